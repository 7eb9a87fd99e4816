"""The one runner: (method, its options, the shared run arguments) -> a trained encoder.

`fit(name, data, **options)` looks the method up in the registry, splits the
keyword arguments into the shared run arguments (with the method's
defaults) and the method's own options (its frozen config, validated on
creation), builds the run's `FitScaffold`, and calls the method's `train`.
Every `fit_*` function is a thin wrapper over it with the method's real
signature.
"""

import gc
import inspect
import sys

from keras_sentemb.kernels.gradient_registry import releasing_custom_gradients
from keras_sentemb.methods.registry import get_method
from keras_sentemb.pipelines.backup import output_lock
from keras_sentemb.pipelines.scaffold import FitScaffold


def split_options(method, options, preset=None):
    """`(run_arguments, config)` for `method` from the keyword arguments of a call.

    Missing arguments take the preset's values (when one is named), then the
    method's defaults; unknown names raise a `TypeError` naming the valid
    ones, as a Python call with a wrong keyword does.
    """
    options = {**method.preset_values(preset), **options}
    shared, optional = method.run_arguments()
    run_names = [a.name for a in shared + optional]
    own_names = [f.name for f in method.config_class.option_fields()]
    unknown = sorted(set(options) - set(run_names) - set(own_names))
    if unknown:
        raise TypeError(
            f"fit({method.name!r}) got unexpected option(s) {', '.join(unknown)}; its options: "
            f"{', '.join(run_names + own_names)}")
    run_arguments = {a.name: options.get(a.name, a.default) for a in shared + optional}
    config = method.config_class(**{n: options[n] for n in own_names if n in options})
    return run_arguments, config


def fit(method, data, preset=None, **options):
    """Trains a sentence encoder with any registered method and returns it.

    Args:
        method: str or `Method` subclass. A name from `list_methods()`
            (built-in, registered with `@register_method`, or installed
            through the `keras_sentemb.methods` entry points).
        data: the training data, as the method takes it (see its `fit_*`
            function or `keras-sentemb train METHOD --help`).
        **options: the shared run arguments (`model`, `steps`,
            `batch_size`, `learning_rate`, `max_length`, `pooling`, `dev`,
            `eval_every`, `output`, `strategy`, `callbacks`, `seed`,
            `verbose`, and the optional ones the method supports, e.g.
            `dev_retrieval`, `dev_select`) and the
            method's own options. Each defaults to the preset's, else the
            method's.
        preset: str or None. One of the method's named paper settings
            (`keras-sentemb train METHOD --help` lists them); arguments
            given here override its values.

    Returns:
        The trained `SentenceEncoder`, with its `training_report`.

    Examples:

    ```python
    encoder = keras_sentemb.fit("simcse", "sentences.txt", steps=300, temperature=0.05)
    encoder = keras_sentemb.fit("my_method", sentences)  # a method registered elsewhere
    encoder = keras_sentemb.fit("simcse", "wiki1m.txt", preset="unsup-bert-base")
    ```
    """
    method = get_method(method)
    run_arguments, config = split_options(method, options, preset)
    # Every argument of the fit_* call, the preset's name too, is a hyperparameter of the run.
    arguments = {"data": data, **run_arguments, **config.to_dict(), "preset": preset}
    run = FitScaffold(method.name, arguments, method.paper_pooling,
                      custom_dev=method.custom_dev, in_batch=method.in_batch)
    run.seed_everything()
    try:
        with output_lock(run.output), releasing_custom_gradients():
            try:
                return method().train(run, data, config)
            finally:  # also when the run fails or is interrupted
                run.restore_precision()
    finally:
        # What the run built and no longer needs (its trainer, traced steps, optimizer state,
        # input pipeline) holds itself in reference cycles: about 100,000 objects and 120 MiB
        # after a run of the default model. Collected now, not by a collection that falls in
        # the middle of whatever the process does next (the next run's trace, a request).
        gc.collect()


def fit_function(method_name, literal):
    """The `fit_*` function of a method, its signature and docstring written from the method.

    A built-in method declares its function in one line, `fit_x =
    fit_function("x", "fit_x")`: the signature (`Method.signature()`, from
    the method's config and run defaults) and the docstring
    (`Method.docstring()`) are the method's, so `help`, `inspect.signature`
    and the API reference show every argument, and an option added to the
    config is an argument of the function with nothing else to edit. The
    function passes only the arguments a call gives (so a `preset` fills the
    others) to `fit`.

    Args:
        method_name: str. The registered method.
        literal: str, the function's name (`"fit_x"`); or a function written
            out with the method's signature (a plugin that wants the literal
            in its source for editors), which must equal `Method.signature()`
            or this raises `TypeError`.

    Returns:
        The `fit_*` function.
    """
    method = get_method(method_name)
    expected = method.signature()
    if isinstance(literal, str):
        name = literal
        module = sys._getframe(1).f_globals.get("__name__", __name__)
    else:
        name, module = literal.__name__, literal.__module__
        signature = inspect.signature(literal)
        if signature != expected:
            raise TypeError(f"{literal.__name__}{signature} differs from the {method_name!r} "
                            f"method's signature {expected}")

    def fit_method(*args, **kwargs):
        given = expected.bind(*args, **kwargs).arguments
        return fit(method_name, **given)

    fit_method.__name__ = fit_method.__qualname__ = name
    fit_method.__module__ = module
    fit_method.__signature__ = expected
    fit_method.__doc__ = method.docstring()
    fit_method.method = method_name
    return fit_method
