"""Every argument of a training run, shared or a method's own, declared with one class (light: no TensorFlow).

An `Argument` holds everything about one argument: its name, type (an
annotation), default, one-line doc, allowed values (`choices`, `minimum`,
`above`, `maximum`, a `check`), where a paper sets it (`source`), and
whether it takes a Python object only (`python_only`: no command-line flag).
`Argument.validate` is the one validation path of shared run arguments
(`RunConfig.from_arguments`) and of method options (`MethodConfig`); the
`fit_*` signatures, their docstrings, the command line's flags and help and
the docs' option tables are all written from the same objects.

`SHARED_ARGUMENTS` are every method's; `OPTIONAL_ARGUMENTS` the ones a method
opts into (`Method.optional`). A method gives them its own defaults
(`Method.run_defaults`); `Method.run_arguments()` returns them so.
"""

import dataclasses
import inspect
import math
import numbers
import os
import re
import types
import typing

from keras_sentemb.models.model_kinds import transformer_check
from keras_sentemb.validation import DEFAULT_MAX_SKIPPED

_NONE = type(None)


@dataclasses.dataclass(frozen=True)
class Argument:
    """One argument of a run: shared (`steps`, `batch_size`, ...) or a method's option.

    Attributes:
        name: str. The keyword (`--kebab-case` on the command line).
        type: the value's type, as an annotation (`int | None`, `tuple[int, ...]`);
            `object` for values several forms can take (`dev`, `verbose`).
        default: object. The default (a method's own where it declares one).
        doc: str. One line or more: what the argument does. The type and
            the default are written from `type` and `default` (unless the
            doc says `Defaults to` itself).
        choices: tuple or None. The allowed values.
        minimum: number or None. Smallest allowed value (inclusive).
        above: number or None. Values must be greater than this.
        maximum: number or None. Largest allowed value (inclusive).
        source: str or None. Where the paper sets the default.
        python_only: bool. Takes a Python object (a strategy, callbacks, a
            callable): no flag on the command line.
        check: callable or None. `check(value)` raises `ValueError` for a
            value the other rules cannot describe.
        type_doc: str or None. How the docs write the type when the
            annotation cannot say it (`object` arguments).
        trainer: bool. A method option its trainer keeps (in `get_config`,
            so a saved trainer restores it); False for options of the run
            only (data, paths, optimizers, Python objects).
    """

    name: str
    type: object
    default: object
    doc: str
    choices: tuple = None
    minimum: float = None
    above: float = None
    maximum: float = None
    source: str = None
    python_only: bool = False
    check: typing.Callable = None
    type_doc: str = None
    trainer: bool = True

    @property
    def optional(self):
        """`None` is allowed (the annotation is `X | None`)."""
        return _NONE in typing.get_args(self.type)

    @property
    def base_type(self):
        """The annotation without `None` (`float` for `float | None`)."""
        args = [a for a in typing.get_args(self.type) if a is not _NONE]
        if _is_union(self.type):
            return args[0] if len(args) == 1 else typing.Union[tuple(args)]
        return self.type

    def type_text(self):
        """The type as a docstring writes it: `float or None`, `tuple of int`."""
        if self.type_doc is not None:
            return self.type_doc
        text = _type_text(self.base_type)
        return f"{text} or None" if self.optional else text

    def default_text(self):
        """The default as the docs write it: `"auto"`, `3e-5`, `None`."""
        return format_default(self.default)

    def doc_line(self):
        """`TYPE. Doc. [One of ...] Defaults to `X` (source).`: the `Args:` entry after the name."""
        line = f"{self.type_text()}. {self.doc}"
        if self.choices is not None and "`" not in self.doc:
            line += " One of " + ", ".join(format_default(c) for c in self.choices) + "."
        if "Defaults to" not in self.doc:
            line += f" Defaults to `{self.default_text()}`"
            line += f" ({self.source})." if self.source else "."
        return line

    def validate(self, value):
        """`value` in canonical form (floats for floats, tuples for tuples), or `ValueError`.

        The one check of every argument: the type, then `choices`, the bounds
        and `check`. The message names the argument, the rule and the value
        received.
        """
        name = self.name
        value = _comma_separated(value, self.type)
        if not _matches(value, self.type):
            raise ValueError(f"`{name}` must be {_describe(self.type)}. "
                             f"Received: {name}={value!r}.")
        value = _normalized(value, self.type)
        if value is None:
            return value
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"`{name}` must be one of {', '.join(map(repr, self.choices))}. "
                             f"Received: {name}={value!r}.")
        for bound, ok, word in ((self.minimum, lambda v, b: v >= b, ">="),
                                (self.above, lambda v, b: v > b, ">"),
                                (self.maximum, lambda v, b: v <= b, "<=")):
            if bound is None:
                continue
            values = value if isinstance(value, tuple) else (value,)
            if not all(ok(v, bound) for v in values):
                raise ValueError(f"`{name}` must be {word} {bound}. Received: {name}={value!r}.")
        if self.check is not None:
            self.check(value)
        return value


def format_default(value):
    """A default as the docstrings write it: `"auto"`, `3e-5`, `None`."""
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float):
        return repr(value).replace("e-0", "e-")
    return repr(value)


def _is_union(tp):
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _type_text(tp):
    if tp is _NONE:
        return "None"
    if tp is os.PathLike:
        return "path"
    origin = typing.get_origin(tp)
    if origin is tuple:
        args = typing.get_args(tp)
        if not args:
            return "tuple"
        item = _type_text(args[0])
        return f"tuple of ({item})" if " or " in item else f"tuple of {item}"
    if _is_union(tp):
        return " or ".join(_type_text(a) for a in typing.get_args(tp))
    return getattr(tp, "__name__", str(tp))


def _matches(value, tp):
    """Whether `value` is of type `tp` (bool is not a number here; numbers are finite)."""
    if tp is typing.Any or tp is object:
        return True
    if _is_union(tp):
        return any(_matches(value, a) for a in typing.get_args(tp))
    if tp is _NONE:
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:  # an int, or a number that is one (8.0)
        return (isinstance(value, numbers.Real) and not isinstance(value, bool)
                and math.isfinite(value) and float(value).is_integer())
    if tp is float:
        return (isinstance(value, numbers.Real) and not isinstance(value, bool)
                and math.isfinite(value))
    if typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        return isinstance(value, (tuple, list)) and all(_matches(v, args[0]) for v in value)
    if typing.get_origin(tp) is typing.Callable or tp is typing.Callable:
        return callable(value)
    return isinstance(value, tp)


def _comma_separated(value, tp):
    """`"32,16"` as `(32, 16)` for a tuple-of-numbers argument (as the command line writes it);
    any other value unchanged."""
    if not isinstance(value, str):
        return value
    members = typing.get_args(tp) if _is_union(tp) else (tp,)
    for member in members:
        if typing.get_origin(member) is tuple and typing.get_args(member)[0] in (int, float):
            cast = typing.get_args(member)[0]
            try:
                return tuple(cast(item) for item in value.split(",") if item.strip())
            except ValueError:
                return value
    return value


def _normalized(value, tp):
    """`value` in the argument's canonical form: float for float fields, tuples for tuples."""
    if value is None:
        return None
    if _is_union(tp):
        tp = next((a for a in typing.get_args(tp) if a is not _NONE and _matches(value, a)), tp)
    if tp is float:
        return float(value)
    if tp is int:
        return int(value)
    if typing.get_origin(tp) is tuple:
        return tuple(_normalized(v, typing.get_args(tp)[0]) for v in value)
    return value


def _describe(tp):
    if _is_union(tp):
        parts = [a for a in typing.get_args(tp) if a is not _NONE]
        text = " or ".join(_describe(a) for a in parts)
        return f"{text} or None" if _NONE in typing.get_args(tp) else text
    names = {bool: "a bool", int: "an int", float: "a number", str: "a string",
             os.PathLike: "a path"}
    if tp in names:
        return names[tp]
    if typing.get_origin(tp) is tuple:
        return f"a {_type_text(tp)}"
    if tp is typing.Callable or typing.get_origin(tp) is typing.Callable:
        return "a callable"
    return _type_text(tp)


def _pooling(value):
    """`"auto"` or a pooling name `parse_pooling` reads."""
    if value != "auto":
        from keras_sentemb.models.pooling import parse_pooling

        parse_pooling(value)


def _strategy(value):
    import tensorflow as tf

    if value is not None and not isinstance(value, tf.distribute.Strategy):
        raise ValueError(f"`strategy` must be a tf.distribute.Strategy or None. "
                         f"Received: {value!r}.")


_PATH = str | os.PathLike


SHARED_ARGUMENTS = (
    Argument("model", object, "default", "`\"default\"` (the bundled all-MiniLM-L6-v2), a "
             "keras-hub preset name or folder (a `TextEmbedder` keeps its pooling and "
             "normalisation), a Hugging Face / sentence-transformers folder, a folder saved by "
             "this package, or (in Python) a `SentenceEncoder`, a keras-hub `TextEmbedder` or a "
             "`(Backbone, Tokenizer)` pair (copied, never trained in place).",
             type_doc="str, `SentenceEncoder` or keras-hub model",
             check=transformer_check("model")),
    Argument("steps", int | None, None, "Optimizer steps; None is the method's epochs over "
             "the data.", minimum=1),
    Argument("batch_size", int, 32, "Rows per optimizer step (global, across replicas).",
             minimum=1),
    Argument("learning_rate", float | None, None, "Peak learning rate; None is the method's "
             "own.", above=0.0),
    Argument("max_length", int | None, None, "Token limit per training sentence, capped at "
             "the backbone's positions (the encoder keeps its own limit for inference); None is "
             "the encoder's.", minimum=1),
    Argument("pooling", str, "auto", "`\"auto\"` (the model's own pooling when it declares "
             "one, else the paper's) or a pooling name (`cls`, `mean`, `max`, `mean_last2`, "
             "`first_last`, `layer:K`, `token:I`, `mask` with a prompt).", check=_pooling),
    Argument("dev", object, "stsb", "`\"stsb\"` (the bundled STS-B dev set), an STS-B file or "
             "folder, a list of (s1, s2, score) or None (no dev selection). With a dev set the "
             "best checkpoint, the starting weights included, is kept.",
             type_doc="str, list or None"),
    Argument("eval_every", int, 100, "Steps between dev evaluations (and backups).", minimum=1),
    Argument("output", _PATH | None, None, "Folder to save the kept encoder to."),
    Argument("strategy", object, None, "In-batch candidates are gathered across replicas.",
             python_only=True, check=_strategy, type_doc="`tf.distribute.Strategy` or None"),
    Argument("callbacks", object, None, "Keras callbacks (e.g. `BackupAndRestore`, "
             "`TensorBoard`).", python_only=True, type_doc="list of Keras callbacks or None"),
    Argument("seed", int | None, 0, "Seed of the sampling, the initialisation and dropout.",
             minimum=0),
    Argument("verbose", object, "auto", "Keras `fit` verbosity: `\"auto\"`, 0, 1 or 2.",
             type_doc="str or int"),
)
OPTIONAL_ARGUMENTS = (
    Argument("precision", str | None, "auto", "`\"auto\"`, `\"float32\"` or `\"bfloat16\"` "
             "(mixed precision: compute in bfloat16; weights, optimizer state, layer norms, "
             "similarities and losses in float32). `\"auto\"` is bfloat16 where the CPU "
             "computes it natively (AVX512-BF16, AMX, Arm BF16) and float32 elsewhere (CPUs "
             "without it, GPUs and TPUs, or `KERAS_SENTEMB_PRECISION=float32`); an explicit "
             "`\"bfloat16\"` on a CPU-only host without native bfloat16 computes float32, with "
             "a notice. The run's report says which and why (`resolved`).",
             choices=("auto", "float32", "bfloat16")),
    Argument("mini_batch_size", int | None, None, "GradCache: embed the batch in chunks of "
             "this many rows, so `batch_size` is limited by time, not memory (same loss and "
             "gradients; see `BaseTrainer`). None embeds the whole batch at once.", minimum=1),
    Argument("matryoshka_dims", tuple[int, ...] | None, None, "Matryoshka training: the "
             "method's loss is summed over the first d dimensions for each d here (e.g. "
             "`(384, 256, 128, 64, 32)`), so the encoder can be used truncated "
             "(`encode(truncate_dim=d)`); see `keras_sentemb.losses.matryoshka`. None trains on "
             "the whole vector only."),
    Argument("max_grad_norm", float | None, None, "Clip the global norm of the gradients to "
             "this before each update (PyTorch's `clip_grad_norm_`; the Hugging Face and "
             "sentence-transformers trainers clip at 1.0 by default). None does not clip.",
             above=0.0),
    Argument("matryoshka_weights", tuple[float, ...] | None, None, "One weight per "
             "`matryoshka_dims` entry; None is 1 each."),
    Argument("dev_retrieval", _PATH | None, None, "A retrieval dev set: a BEIR-layout folder "
             "(`corpus.jsonl`, `queries.jsonl`, `qrels/dev.tsv`, else `qrels/test.tsv`) scored "
             "by nDCG@10 x100 every `eval_every` steps, the starting weights included, and "
             "logged as `retrieval_dev_ndcg_at_10`; `dev_select` says whether it chooses the "
             "kept checkpoint. Needs the `retrieval` extra (pytrec_eval). None: no retrieval "
             "dev set."),
    Argument("dev_select", str, "auto", "Which dev score chooses the kept checkpoint: "
             "`\"retrieval\"` (nDCG@10 on `dev_retrieval`), `\"dev\"` (the `dev` set's score, "
             "as without `dev_retrieval`) or `\"auto\"` (`\"retrieval\"` when `dev_retrieval` "
             "is given, else `\"dev\"`). The other dev set is scored and logged only.",
             choices=("auto", "dev", "retrieval")),
    Argument("max_skipped", float, DEFAULT_MAX_SKIPPED, "The largest share of a streamed "
             "source's rows that may be skipped (a missing column, a broken record, bytes that "
             "are not UTF-8, a label that does not parse) before training stops with one line "
             "naming the source, the rows read and skipped, and why; checked every "
             "`eval_every` steps once 1,000 rows are read, and when training ends, before "
             "anything is saved. 0 allows none, 1 any. Data read into memory is not counted.",
             minimum=0.0, maximum=1.0),
)
SHARED_NAMES = tuple(a.name for a in SHARED_ARGUMENTS)
OPTIONAL_NAMES = tuple(a.name for a in OPTIONAL_ARGUMENTS)
RUN_ARGUMENTS = {a.name: a for a in SHARED_ARGUMENTS + OPTIONAL_ARGUMENTS}


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
