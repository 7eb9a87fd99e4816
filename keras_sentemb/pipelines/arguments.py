"""The arguments every `fit_*` function shares, defined once.

Each `fit_*` function is written with its method's own arguments only and
decorated with `fit_function`, which gives it the full public signature: the
data, the shared arguments (with the method's defaults), the method's own
arguments, then `precision` and `mini_batch_size` where the method supports
them. The decorator also validates the shared arguments (before any model is
loaded), builds the `FitScaffold` of the run and writes the shared part of the
docstring, so `help(fit_ct)` lists every argument and each `fit_*` body shows
only what is particular to its method. The command line builds
`keras-sentemb train METHOD --help` from the same signatures and docs.
"""

import dataclasses
import functools
import inspect
import re
import textwrap

from keras_sentemb.pipelines.backup import output_lock
from keras_sentemb.pipelines.scaffold import FitScaffold


@dataclasses.dataclass(frozen=True)
class SharedArgument:
    """One shared `fit_*` argument: its name, base default and documentation.

    Attributes:
        name: str. The keyword.
        default: object. The default a method uses unless it declares its own.
        doc: str. The docstring text after `name:` (type, then meaning),
            without the `Defaults to` sentence, which is written from the
            method's default.
    """

    name: str
    default: object
    doc: str


SHARED_ARGUMENTS = (
    SharedArgument("model", "default", "str or `SentenceEncoder`. `\"default\"` (the bundled "
                   "all-MiniLM-L6-v2), a keras-hub preset name, a Hugging Face / "
                   "sentence-transformers folder, a folder saved by this package, or an encoder."),
    SharedArgument("steps", None, "int or None. Optimizer steps; None is the method's epochs "
                   "over the data."),
    SharedArgument("batch_size", 32, "int. Rows per optimizer step (global, across replicas)."),
    SharedArgument("learning_rate", None, "float or None. Peak learning rate; None is the "
                   "method's own."),
    SharedArgument("max_length", None, "int or None. Token limit per training sentence, capped "
                   "at the backbone's positions (the encoder keeps its own limit for inference); "
                   "None is the encoder's."),
    SharedArgument("pooling", "auto", "str. `\"auto\"` (the model's own pooling when it declares "
                   "one, else the paper's) or a pooling name (`cls`, `mean`, `max`, `mean_last2`, "
                   "`first_last`, `layer:K`)."),
    SharedArgument("dev", "stsb", "`\"stsb\"` (the bundled STS-B dev set), an STS-B file or "
                   "folder, a list of (s1, s2, score) or None (no dev selection). With a dev set the "
                   "best checkpoint, the starting weights included, is kept."),
    SharedArgument("eval_every", 100, "int. Steps between dev evaluations (and backups)."),
    SharedArgument("output", None, "str or None. Folder to save the kept encoder to."),
    SharedArgument("strategy", None, "`tf.distribute.Strategy` or None. In-batch candidates "
                   "are gathered across replicas."),
    SharedArgument("callbacks", None, "list of Keras callbacks or None (e.g. "
                   "`BackupAndRestore`, `TensorBoard`)."),
    SharedArgument("seed", 0, "int or None. Seed of the sampling, the initialisation and "
                   "dropout."),
    SharedArgument("verbose", "auto", "Keras `fit` verbosity."),
)
OPTIONAL_ARGUMENTS = (
    SharedArgument("precision", "float32", "str. `\"float32\"` or `\"bfloat16\"` (compute in "
                   "bfloat16, weights and losses in float32; for GPUs and CPUs with AVX512-BF16 / "
                   "AMX)."),
    SharedArgument("mini_batch_size", None, "int or None. GradCache: embed the batch in chunks "
                   "of this many rows, so `batch_size` is limited by time, not memory (same loss "
                   "and gradients; see `BaseTrainer`). None embeds the whole batch at once."),
    SharedArgument("matryoshka_dims", None, "tuple of int or None. Matryoshka training: the "
                   "method's loss is summed over the first d dimensions for each d here (e.g. "
                   "`(384, 256, 128, 64, 32)`), so the encoder can be used truncated "
                   "(`encode(truncate_dim=d)`); see `keras_sentemb.losses.matryoshka`. None "
                   "trains on the whole vector only."),
    SharedArgument("matryoshka_weights", None, "tuple of float or None. One weight per "
                   "`matryoshka_dims` entry; None is 1 each."),
)
SHARED_NAMES = tuple(a.name for a in SHARED_ARGUMENTS)
OPTIONAL_NAMES = tuple(a.name for a in OPTIONAL_ARGUMENTS)
_BY_NAME = {a.name: a for a in SHARED_ARGUMENTS + OPTIONAL_ARGUMENTS}


def format_default(value):
    """A default as the docstrings write it: `"auto"`, `3e-5`, `None`."""
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float):
        return repr(value).replace("e-0", "e-")
    return repr(value)


def _defaults_sentence(value):
    return f"Defaults to `{format_default(value)}`."


def argument_docs(defaults, docs=None):
    """`name -> doc line` of the shared arguments for one method's defaults."""
    docs = docs or {}
    out = {}
    for name, default in defaults.items():
        text = docs.get(name, _BY_NAME[name].doc)
        if "Defaults to" not in text:
            text = f"{text} {_defaults_sentence(default)}"
        out[name] = text
    return out


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
                 docs=None, **defaults):
    """Decorator that makes a method body into a public `fit_*` function.

    The body is written `def fit_x(run, data, <own arguments>)`: `run` is the
    run's `FitScaffold`, already built from the validated shared arguments.

    Args:
        method: str. The method's name (logs, report).
        paper_pooling: str. The paper's pooling for a raw backbone.
        in_batch: bool. The loss takes its negatives from the batch, so a
            batch needs at least 2 rows.
        custom_dev: tuple of str. `dev` values the method handles itself.
        optional: tuple of str. Which of `precision` and `mini_batch_size`
            the method supports (they come last in the signature).
        docs: dict name -> doc text overriding a shared argument's doc.
        **defaults: the method's defaults for shared arguments.
    """
    unknown = set(defaults) - set(SHARED_NAMES)
    unknown |= set(optional) - set(OPTIONAL_NAMES)
    if unknown:
        raise TypeError(f"fit_{method}: unknown shared arguments {sorted(unknown)}.")
    shared_defaults = {a.name: defaults.get(a.name, a.default) for a in SHARED_ARGUMENTS}
    optional_defaults = {a.name: a.default for a in OPTIONAL_ARGUMENTS if a.name in optional}

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
        return fit

    return decorate


def option_docs(fit):
    """`name -> one-line doc` for every argument of a `fit_*` docstring's `Args:`."""
    doc = inspect.getdoc(fit) or ""
    match = re.search(r"^Args:\n((?:    .*\n?|\n)*)", doc, flags=re.M)
    if match is None:
        return {}
    out, name = {}, None
    for line in match.group(1).splitlines():
        head = re.match(r"    (\w+): (.*)", line)
        if head:
            name = head.group(1)
            out[name] = head.group(2).strip()
        elif name and line.startswith("        "):
            out[name] += " " + line.strip()
    return out
