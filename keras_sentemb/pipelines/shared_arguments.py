"""The definitions of the arguments every `fit_*` shares (light: no TensorFlow).

Each registered method (`keras_sentemb.methods.Method`) gives them its own
defaults; its `fit_*` signature and docstring and the command line's `train`
flags are written from them and from the method's config.
"""

import dataclasses
import inspect
import re
import typing

from keras_sentemb.validation import DEFAULT_MAX_SKIPPED


@dataclasses.dataclass(frozen=True)
class SharedArgument:
    """One shared `fit_*` argument: its name, base default and documentation.

    Attributes:
        name: str. The keyword.
        default: object. The default a method uses unless it declares its own.
        doc: str. The docstring text after `name:` (type, then meaning),
            without the `Defaults to` sentence, which is written from the
            method's default.
        type: the value's type, as an annotation (`int | None`); `object`
            for values several forms can take (`dev`, `verbose`). The
            command line's flag parses by it.
        python_only: bool. Takes a Python object (a strategy, callbacks):
            no flag on the command line.
        choices: tuple or None. The allowed values.
    """

    name: str
    default: object
    doc: str
    type: object = object
    python_only: bool = False
    choices: tuple = None


SHARED_ARGUMENTS = (
    SharedArgument("model", "default", "str or `SentenceEncoder`. `\"default\"` (the bundled "
                   "all-MiniLM-L6-v2), a keras-hub preset name, a Hugging Face / "
                   "sentence-transformers folder, a folder saved by this package, or an encoder.",
                   object),
    SharedArgument("steps", None, "int or None. Optimizer steps; None is the method's epochs "
                   "over the data.", typing.Optional[int]),
    SharedArgument("batch_size", 32, "int. Rows per optimizer step (global, across replicas).", int),
    SharedArgument("learning_rate", None, "float or None. Peak learning rate; None is the "
                   "method's own.", typing.Optional[float]),
    SharedArgument("max_length", None, "int or None. Token limit per training sentence, capped "
                   "at the backbone's positions (the encoder keeps its own limit for inference); "
                   "None is the encoder's.", typing.Optional[int]),
    SharedArgument("pooling", "auto", "str. `\"auto\"` (the model's own pooling when it declares "
                   "one, else the paper's) or a pooling name (`cls`, `mean`, `max`, `mean_last2`, "
                   "`first_last`, `layer:K`).", str),
    SharedArgument("dev", "stsb", "`\"stsb\"` (the bundled STS-B dev set), an STS-B file or "
                   "folder, a list of (s1, s2, score) or None (no dev selection). With a dev set the "
                   "best checkpoint, the starting weights included, is kept.", object),
    SharedArgument("eval_every", 100, "int. Steps between dev evaluations (and backups).", int),
    SharedArgument("output", None, "str or None. Folder to save the kept encoder to.",
                   typing.Optional[str]),
    SharedArgument("strategy", None, "`tf.distribute.Strategy` or None. In-batch candidates "
                   "are gathered across replicas.", object, python_only=True),
    SharedArgument("callbacks", None, "list of Keras callbacks or None (e.g. "
                   "`BackupAndRestore`, `TensorBoard`).", object, python_only=True),
    SharedArgument("seed", 0, "int or None. Seed of the sampling, the initialisation and "
                   "dropout.", typing.Optional[int]),
    SharedArgument("verbose", "auto", "Keras `fit` verbosity.", object),
)
OPTIONAL_ARGUMENTS = (
    SharedArgument("precision", "float32", "str. `\"float32\"` or `\"bfloat16\"` (compute in "
                   "bfloat16, weights and losses in float32; for GPUs and CPUs with AVX512-BF16 / "
                   "AMX: a CPU-only host without them computes float32, with a notice).", str,
                   choices=("float32", "bfloat16")),
    SharedArgument("mini_batch_size", None, "int or None. GradCache: embed the batch in chunks "
                   "of this many rows, so `batch_size` is limited by time, not memory (same loss "
                   "and gradients; see `BaseTrainer`). None embeds the whole batch at once.", typing.Optional[int]),
    SharedArgument("matryoshka_dims", None, "tuple of int or None. Matryoshka training: the "
                   "method's loss is summed over the first d dimensions for each d here (e.g. "
                   "`(384, 256, 128, 64, 32)`), so the encoder can be used truncated "
                   "(`encode(truncate_dim=d)`); see `keras_sentemb.losses.matryoshka`. None "
                   "trains on the whole vector only.",
                   typing.Optional[typing.Tuple[int, ...]]),
    SharedArgument("max_grad_norm", None, "float or None. Clip the global norm of the "
                   "gradients to this before each update (PyTorch's `clip_grad_norm_`; the "
                   "Hugging Face and sentence-transformers trainers clip at 1.0 by default). "
                   "None does not clip.", typing.Optional[float]),
    SharedArgument("matryoshka_weights", None, "tuple of float or None. One weight per "
                   "`matryoshka_dims` entry; None is 1 each.",
                   typing.Optional[typing.Tuple[float, ...]]),
    SharedArgument("dev_retrieval", None, "str or None. A retrieval dev set: a BEIR-layout "
                   "folder (`corpus.jsonl`, `queries.jsonl`, `qrels/dev.tsv`, else "
                   "`qrels/test.tsv`) scored by nDCG@10 x100 every `eval_every` steps, the "
                   "starting weights included, and logged as `retrieval_dev_ndcg_at_10`; "
                   "`dev_select` says whether it chooses the kept checkpoint. Needs the "
                   "`retrieval` extra (pytrec_eval). None: no retrieval dev set.",
                   typing.Optional[str]),
    SharedArgument("dev_select", "auto", "str. Which dev score chooses the kept checkpoint: "
                   "`\"retrieval\"` (nDCG@10 on `dev_retrieval`), `\"dev\"` (the `dev` set's "
                   "score, as without `dev_retrieval`) or `\"auto\"` (`\"retrieval\"` when "
                   "`dev_retrieval` is given, else `\"dev\"`). The other dev set is scored and "
                   "logged only.", str, choices=("auto", "dev", "retrieval")),
    SharedArgument("max_skipped", DEFAULT_MAX_SKIPPED, "float. The largest share of a streamed source's rows "
                   "that may be skipped (a missing column, a broken record, bytes that are not "
                   "UTF-8, a label that does not parse) before training stops with one line "
                   "naming the source, the rows read and skipped, and why; checked every "
                   "`eval_every` steps once 1,000 rows are read, and when training ends, before "
                   "anything is saved. 0 allows none, 1 any. Data read into memory is not "
                   "counted.", float),
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
