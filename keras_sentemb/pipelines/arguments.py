"""The arguments every `fit_*` function shares, defined once.

Each `fit_*` function is written with its method's own arguments only and
decorated with `fit_function`, which gives it the full public signature: the
data, the shared arguments (with the method's defaults), the method's own
arguments, then `precision` and `mini_batch_size` where the method supports
them. The decorator also validates the shared arguments (before any model is
loaded), builds the `FitScaffold` of the run and writes the shared part of the
docstring, so `help(fit_ct)` lists every argument and each `fit_*` body shows
only what is particular to its method. The command line builds
`keras-sentemb train METHOD --help` from the same signatures and docs
(`keras_sentemb.pipelines.shared_arguments` holds the definitions).
"""

import functools
import inspect
import re
import textwrap

from keras_sentemb.pipelines.backup import output_lock
from keras_sentemb.pipelines.scaffold import FitScaffold
from keras_sentemb.pipelines.shared_arguments import OPTIONAL_ARGUMENTS
from keras_sentemb.pipelines.shared_arguments import OPTIONAL_NAMES
from keras_sentemb.pipelines.shared_arguments import SHARED_ARGUMENTS
from keras_sentemb.pipelines.shared_arguments import SHARED_NAMES
from keras_sentemb.pipelines.shared_arguments import argument_docs


def _doc_with_shared(doc, shared_docs):
    """Insert the shared arguments at the top of the docstring's `Args:` section."""
    doc = inspect.cleandoc(doc or "")
    lines = []
    for name, text in shared_docs.items():
        lines.extend(textwrap.wrap(f"{name}: {text}", width=76, initial_indent="    ",
                                   subsequent_indent="        ", break_on_hyphens=False))
    block = "\n".join(lines)
    match = re.search(r"^Args:\n", doc, flags=re.M)
    if match is None:
        return f"{doc}\n\nArgs:\n{block}"
    data_line = re.match(r"(    data:.*\n(?:        .*\n)*)", doc[match.end():])
    at = match.end() + (data_line.end() if data_line else 0)
    return f"{doc[:at]}{block}\n{doc[at:]}"


def fit_function(method, paper_pooling, *, in_batch=False, custom_dev=(), optional=(),
                 docs=None, python_only=(), **defaults):
    """Decorator that makes a method body into a public `fit_*` function.

    The body is written `def fit_x(run, data, <own arguments>)`: `run` is the
    run's `FitScaffold`, already built from the validated shared arguments.

    Args:
        method: str. The method's name (logs, report).
        paper_pooling: str. The paper's pooling for a raw backbone.
        in_batch: bool. The loss takes its negatives from the batch, so a
            batch needs at least 2 rows.
        custom_dev: tuple of str. `dev` values the method handles itself.
        optional: tuple of str. Which of the optional arguments
            (`precision`, `mini_batch_size`, `max_grad_norm`, Matryoshka's)
            the method supports (they come last in the signature).
        docs: dict name -> doc text overriding a shared argument's doc.
        python_only: tuple of str. The method's own arguments that take
            Python objects (e.g. a scoring function), so have no flag on the
            command line.
        **defaults: the method's defaults for shared arguments (and for the
            optional ones it supports).
    """
    unknown = set(defaults) - set(SHARED_NAMES) - set(optional)
    unknown |= set(optional) - set(OPTIONAL_NAMES)
    if unknown:
        raise TypeError(f"fit_{method}: unknown shared arguments {sorted(unknown)}.")
    shared_defaults = {a.name: defaults.get(a.name, a.default) for a in SHARED_ARGUMENTS}
    optional_defaults = {a.name: defaults.get(a.name, a.default) for a in OPTIONAL_ARGUMENTS
                         if a.name in optional}

    def decorate(body):
        params = list(inspect.signature(body).parameters.values())
        if [p.name for p in params[:2]] != ["run", "data"]:
            raise TypeError(f"{body.__name__} must start with (run, data, ...).")
        own = params[2:]
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        signature = inspect.Signature(
            [params[1].replace(kind=kind)]
            + [inspect.Parameter(n, kind, default=d) for n, d in shared_defaults.items()]
            + [p.replace(kind=kind) for p in own]
            + [inspect.Parameter(n, kind, default=d) for n, d in optional_defaults.items()]
        )

        @functools.wraps(body)
        def fit(*args, **kwargs):
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{body.__name__}(): {e}") from None
            bound.apply_defaults()
            arguments = dict(bound.arguments)
            run = FitScaffold(method, arguments, paper_pooling, custom_dev=custom_dev,
                              in_batch=in_batch)
            run.seed_everything()
            own_values = {p.name: arguments[p.name] for p in own}
            with output_lock(run.output):
                return body(run, arguments["data"], **own_values)

        fit.__signature__ = signature
        fit.__doc__ = _doc_with_shared(
            body.__doc__, argument_docs({**shared_defaults, **optional_defaults}, docs)
        )
        fit.method = method
        fit.shared_defaults = {**shared_defaults, **optional_defaults}
        fit.python_only = tuple(python_only)
        return fit

    return decorate
