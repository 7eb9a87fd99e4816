"""The one runner: (method, its options, the shared run arguments) -> a trained encoder.

`fit(name, data, **options)` looks the method up in the registry, splits the
keyword arguments into the shared run arguments (with the method's
defaults) and the method's own options (its frozen config, validated on
creation), builds the run's `FitScaffold`, and calls the method's `train`.
Every `fit_*` function is a thin wrapper over it with the method's real
signature.
"""

from keras_sentemb.methods.registry import get_method
from keras_sentemb.pipelines.backup import output_lock
from keras_sentemb.pipelines.scaffold import FitScaffold


def split_options(method, options):
    """`(run_arguments, config)` for `method` from the keyword arguments of a call.

    Missing run arguments take the method's defaults; unknown names raise a
    `TypeError` naming the valid ones, as a Python call with a wrong keyword
    does.
    """
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


def fit(method, data, **options):
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
            method's own options. Each defaults to the method's.

    Returns:
        The trained `SentenceEncoder`, with its `training_report`.

    Examples:

    ```python
    encoder = keras_sentemb.fit("simcse", "sentences.txt", steps=300, temperature=0.05)
    encoder = keras_sentemb.fit("my_method", sentences)  # a method registered elsewhere
    ```
    """
    method = get_method(method)
    run_arguments, config = split_options(method, options)
    arguments = {"data": data, **run_arguments, **config.to_dict()}
    run = FitScaffold(method.name, arguments, method.paper_pooling,
                      custom_dev=method.custom_dev, in_batch=method.in_batch)
    run.seed_everything()
    with output_lock(run.output):
        return method().train(run, data, config)


def fit_function(method_name, wrapper):
    """Checks a `fit_*` wrapper against its method and gives it the method's docstring.

    The wrapper is written out with its real signature (so editors, `help`
    and type checkers see it); this raises `TypeError` at import when the
    signature drifts from the registered method's.
    """
    import inspect

    method = get_method(method_name)
    expected = method.signature()
    if inspect.signature(wrapper) != expected:
        raise TypeError(f"{wrapper.__name__}{inspect.signature(wrapper)} differs from the "
                        f"{method_name!r} method's signature {expected}")
    wrapper.__doc__ = method.docstring()
    wrapper.method = method_name
    return wrapper
