"""What a run's "auto" and unset arguments become for one encoder: a pure, immutable plan.

`resolve(config, encoder, paper_pooling, ...)` reads the validated run
arguments (a `RunConfig`) and the starting encoder and returns a `RunPlan`:
the pooling and why, the training token limit, the number of optimizer
steps, the learning rate, the training-only MLP head and the precision. It
changes nothing and reads nothing an earlier call set, so every rule is
unit-tested without training (tests/pipelines/test_plan.py), and a method's
`train` passes the plan explicitly to what needs it (`run.batches`,
`run.fit`, `run.finish`).
"""

import dataclasses
import logging
import os

import tensorflow as tf

from keras_sentemb import validation
from keras_sentemb.data.row_accounting import DEFAULT_MAX_SKIPPED
from keras_sentemb.evaluation.readers import load_stsb_pairs
from keras_sentemb.io_utils import check_new_folder
from keras_sentemb.kernels.native_bfloat16 import effective_precision
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.kernels.precision import check_precision

logger = logging.getLogger(__name__)

# An in-batch loss takes each row's negatives from the other rows.
MIN_IN_BATCH_SIZE = 2


def resolve_dev(dev):
    """The `dev` argument -> tuple of (s1, s2, score), or None.

    `"stsb"` (or `"auto"`) is the STS-B dev set (SentEval's version); a path
    is an STS-B file or folder (its dev split); a list is used as is; None
    (or `"none"`) means no dev selection. See `load_stsb_pairs`.
    """
    if dev is None or (isinstance(dev, str) and dev.lower() in ("none", "")):
        return None
    if isinstance(dev, str) and dev.lower() == "auto":
        dev = "stsb"
    if isinstance(dev, (list, tuple)) and not dev:
        raise ValueError("`dev` is an empty list; pass None for no dev selection.")
    return tuple(load_stsb_pairs(dev, "dev"))


DEV_SELECT = ("auto", "dev", "retrieval")


def resolve_dev_retrieval(dev_retrieval):
    """The `dev_retrieval` argument -> `BeirData` (read once, before any work), or None.

    The folder is read as `evaluate retrieval` reads one (`load_beir`): its
    `qrels/dev.tsv`, else its `qrels/test.tsv`. A missing folder or file,
    malformed lines or a qrels id that is not in the corpus or the queries
    raise a one-line `ValueError`; a missing pytrec_eval raises the one-line
    `MissingDependencyError` naming the install command.
    """
    if dev_retrieval is None or (isinstance(dev_retrieval, str)
                                 and dev_retrieval.lower() in ("none", "")):
        return None
    if not isinstance(dev_retrieval, (str, os.PathLike)):
        raise ValueError("`dev_retrieval` must be a BEIR folder (a path) or None. Received: "
                         f"{type(dev_retrieval).__name__}.")
    from keras_sentemb.evaluation.beir import load_beir
    from keras_sentemb.missing_dependency import import_optional

    import_optional("pytrec_eval", "`dev_retrieval` (nDCG@10 during training)", "retrieval")
    folder = os.fspath(dev_retrieval)
    if not os.path.isdir(folder):
        raise ValueError(f"`dev_retrieval`: BEIR folder not found: {folder}")
    split = next((s for s in ("dev", "test")
                  if os.path.isfile(os.path.join(folder, "qrels", f"{s}.tsv"))), None)
    if split is None:
        raise ValueError(f"`dev_retrieval`: {folder} has no qrels/dev.tsv or qrels/test.tsv "
                         "(the BEIR layout: corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv)")
    try:
        data = load_beir(folder, split=split)
    except (FileNotFoundError, ValueError) as error:
        raise ValueError(f"`dev_retrieval`: {error}") from None
    logger.info("retrieval dev set %s: %d queries, %d documents (qrels/%s.tsv)",
                folder, len(data.queries), len(data.corpus), split)
    return data


def check_output(output):
    """Fail before any work when `output` cannot become a model folder."""
    if output is None:
        return None
    check_new_folder(output, overwrite=True, what="`output`")
    return os.fspath(output)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """The shared arguments of a `fit_*` call, validated once before any work.

    Built by `RunConfig.from_arguments`; `resolve` turns it and an encoder
    into a `RunPlan`. `pooling` is as asked (`"auto"` or a name); `dev` is
    the argument as given and `dev_pairs` the STS pairs it names (None for
    no dev set or a method's own dev kind, e.g. `"retrieval"`).
    `dev_retrieval` is the retrieval dev folder as given and
    `dev_retrieval_data` the `BeirData` read from it; `dev_select` is
    `"dev"` or `"retrieval"` (`"auto"` resolved): which dev score chooses
    the kept checkpoint. `max_skipped` is the share of a streamed source's
    rows that may be skipped (see `keras_sentemb.data.row_accounting`).
    """
    model: object
    steps: int | None
    batch_size: int
    learning_rate: float | None
    max_length: int | None
    pooling: str
    dev: object
    dev_pairs: tuple | None
    eval_every: int
    output: str | None
    strategy: object
    callbacks: tuple
    seed: int | None
    verbose: object
    precision: str = "float32"
    mini_batch_size: int | None = None
    max_grad_norm: float | None = None
    matryoshka_dims: object = None
    matryoshka_weights: object = None
    dev_retrieval: object = None
    dev_retrieval_data: object = None
    dev_select: str = "dev"
    max_skipped: float = DEFAULT_MAX_SKIPPED

    @classmethod
    def from_arguments(cls, method, arguments, custom_dev=(), in_batch=False):
        """Validate the shared arguments of a call (a dict with every common name).

        Args:
            method: str. The method's name (for messages).
            arguments: dict. The call's arguments.
            custom_dev: tuple of str. `dev` values the method handles itself.
            in_batch: bool. The loss takes negatives from the batch, so
                `batch_size` must be at least 2.
        """
        batch_size = validation.positive_int(arguments["batch_size"], "batch_size")
        if in_batch and batch_size < MIN_IN_BATCH_SIZE:
            raise ValueError(
                f"`batch_size` must be >= {MIN_IN_BATCH_SIZE} for {method}: its loss takes each "
                f"sentence's negatives from the rest of the batch. Received: "
                f"batch_size={batch_size}."
            )
        learning_rate = arguments["learning_rate"]
        if learning_rate is not None:
            learning_rate = validation.positive_float(learning_rate, "learning_rate")
        pooling = arguments["pooling"]
        if not isinstance(pooling, str):
            raise ValueError(f"`pooling` must be 'auto' or a pooling name. Received: {pooling!r}.")
        if pooling != "auto":
            parse_pooling(pooling)
        dev = arguments["dev"]
        custom = isinstance(dev, str) and dev in custom_dev
        strategy = arguments["strategy"]
        if strategy is not None and not isinstance(strategy, tf.distribute.Strategy):
            raise ValueError(
                f"`strategy` must be a tf.distribute.Strategy or None. Received: {strategy!r}."
            )
        seed = arguments["seed"]
        if seed is not None:
            seed = validation.non_negative_int(seed, "seed")
        matryoshka_dims = arguments.get("matryoshka_dims")
        matryoshka_weights = arguments.get("matryoshka_weights")
        if matryoshka_dims is None and matryoshka_weights is not None:
            raise ValueError("`matryoshka_weights` needs `matryoshka_dims`.")
        dev_select = validation.choice(arguments.get("dev_select", "auto"), "dev_select",
                                       DEV_SELECT)
        dev_pairs = None if custom else resolve_dev(dev)
        dev_retrieval_data = resolve_dev_retrieval(arguments.get("dev_retrieval"))
        if dev_select == "auto":
            dev_select = "dev" if dev_retrieval_data is None else "retrieval"
        elif dev_select == "retrieval" and dev_retrieval_data is None:
            raise ValueError("`dev_select='retrieval'` needs a retrieval dev set: pass "
                             "`dev_retrieval` (a BEIR folder).")
        elif dev_select == "dev" and dev_retrieval_data is not None and not (custom or dev_pairs):
            raise ValueError("`dev_select='dev'` needs a `dev` set; `dev` is None (use "
                             "dev_select='retrieval' to select on `dev_retrieval`).")
        return cls(
            model=arguments["model"],
            steps=validation.optional_positive_int(arguments["steps"], "steps"),
            batch_size=batch_size,
            learning_rate=learning_rate,
            max_length=validation.optional_positive_int(arguments["max_length"], "max_length"),
            pooling=pooling,
            dev=dev,
            dev_pairs=dev_pairs,
            eval_every=validation.positive_int(arguments["eval_every"], "eval_every"),
            output=check_output(arguments["output"]),
            strategy=strategy,
            callbacks=tuple(arguments["callbacks"] or ()),
            seed=seed,
            verbose=arguments["verbose"],
            # bfloat16 only where the hardware computes it (else float32, with a notice).
            precision=effective_precision(check_precision(arguments.get("precision"))),
            mini_batch_size=validation.optional_positive_int(
                arguments.get("mini_batch_size"), "mini_batch_size"),
            max_grad_norm=validation.optional_positive_float(
                arguments.get("max_grad_norm"), "max_grad_norm"),
            matryoshka_dims=matryoshka_dims,
            matryoshka_weights=matryoshka_weights,
            dev_retrieval=arguments.get("dev_retrieval"),
            dev_retrieval_data=dev_retrieval_data,
            dev_select=dev_select,
            max_skipped=validation.fraction(arguments.get("max_skipped", DEFAULT_MAX_SKIPPED),
                                            "max_skipped", closed_top=True),
        )


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """How one run trains one encoder: its resolved settings.

    Attributes:
        pooling: str. The pooling the run trains and keeps.
        pooling_reason: str. Why that pooling (caller, model, paper).
        max_length: int or None. The training token limit; None is the
            encoder's own `max_length`.
        steps: int. Optimizer steps to train.
        learning_rate: float or None. The peak learning rate (None: the
            method sets its own optimizer's).
        mlp: str or None. The training-only MLP head (`"train"`,
            `"none"`, `"keep"`), or None for a method without one.
        precision: str. `"float32"` or `"bfloat16"` (what the hardware
            computes; see `keras_sentemb.kernels.native_bfloat16`).
        encoder_max_length: int. The encoder's own token limit.
    """
    pooling: str
    pooling_reason: str
    max_length: int | None
    steps: int
    learning_rate: float | None
    mlp: str | None
    precision: str
    encoder_max_length: int

    @property
    def training_max_length(self):
        """The token limit training batches are cut at."""
        return self.encoder_max_length if self.max_length is None else self.max_length

    def record(self):
        """The plan as the report's `resolved` entries."""
        resolved = {"pooling": self.pooling, "max_length": self.training_max_length,
                    "steps": self.steps, "precision": self.precision}
        if self.learning_rate is not None:
            resolved["learning_rate"] = self.learning_rate
        if self.mlp is not None:
            resolved["mlp"] = self.mlp
        return resolved


def training_length(max_length, encoder):
    """The training token limit: `max_length` capped at what the backbone takes.

    The papers' lengths (CT's 75, ...) are capped, with a log line, for
    backbones with fewer positions; below 3 (two special tokens and one
    word) is an error. None stays None (the encoder's own limit).
    """
    if max_length is None:
        return None
    if max_length < 3:
        raise ValueError(f"`max_length` must be >= 3. Received: max_length={max_length!r}.")
    limit = int(encoder.backbone.max_sequence_length)
    if max_length > limit:
        logger.info("max_length %d is capped at the model's %d positions", max_length, limit)
        return limit
    return max_length


def resolve_pooling(pooling, encoder, paper_pooling, paper_only=None):
    """`(pooling, reason)`: `"auto"` is the model's own pooling, else the paper's.

    Args:
        pooling: str. `"auto"` or a pooling name (see `parse_pooling`).
        encoder: `SentenceEncoder`. Its `declared_pooling` is the model's own.
        paper_pooling: str. The method's paper setting for a raw backbone.
        paper_only: str or None. Why `"auto"` is the paper's pooling
            whatever the model declares, for a method whose loss is defined
            on one pooling (SG trains the [CLS] vector); None follows the
            model.
    """
    if pooling != "auto":
        return parse_pooling(pooling, encoder.num_layers), "set by the caller"
    declared = encoder.declared_pooling
    if paper_only is not None:
        resolved = parse_pooling(paper_pooling, encoder.num_layers)
        reason = f"auto: {paper_only}"
        if declared is not None and declared != resolved:
            reason += f"; the model's own {declared} pooling is not used"
        return resolved, reason
    if declared is not None:
        return declared, f"the model declares {declared} pooling"
    return (
        parse_pooling(paper_pooling, encoder.num_layers),
        f"the model declares no pooling; the paper's {paper_pooling} pooling",
    )


def resolve_training_mlp(mlp, pooling):
    """`"auto"` -> `"train"` with [CLS] pooling (the papers' setting), else `"none"`.

    A projection MLP used in training only (SimCSE, the parallel-pairs
    method) belongs to the papers' [CLS] pooling; on a model's own mean
    pooling it would train a head that is then thrown away. `"keep"` (a
    head trained and kept as the encoder's projection) passes through.
    """
    validation.choice(mlp, "mlp", ("auto", "train", "none", "keep"))
    if mlp == "auto":
        return "train" if pooling == "cls" else "none"
    return mlp


def resolve_steps(steps, batch_size, examples, epochs=1):
    """`steps`, or `epochs` epochs of `examples // batch_size` steps (at least 1 each).

    Without `steps`, the data's size must be known: a stream has none, and
    counting it would read it whole.
    """
    if steps is not None:
        return steps
    if examples is None:
        raise ValueError("`steps` is needed: the training data's size is not known in advance "
                         "(a stream); pass steps=N (`--steps N`).")
    epochs = validation.positive_int(epochs, "epochs")
    return max(1, examples // batch_size) * epochs


def resolve(config, encoder, paper_pooling, examples=None, epochs=1, mlp=None,
            learning_rate=None, paper_pooling_only=None):
    """The `RunPlan` of a run (`config`) for its starting `encoder`. Changes nothing.

    Args:
        config: `RunConfig`. The run's validated arguments.
        encoder: `SentenceEncoder`. The starting encoder.
        paper_pooling: str. The method's paper pooling for a raw backbone.
        examples: int or None. Training examples per epoch (None: unknown,
            then `config.steps` must be set).
        epochs: int. Epochs when `config.steps` is None. Defaults to 1.
        mlp: str or None. The method's training-MLP option (`"auto"`,
            `"train"`, `"none"`, `"keep"`), None when it has none.
        learning_rate: float or None. The method's default learning rate
            when the run's is None.
        paper_pooling_only: str or None. See `resolve_pooling`'s
            `paper_only`.

    Returns:
        A `RunPlan`.
    """
    pooling, reason = resolve_pooling(config.pooling, encoder, paper_pooling,
                                      paper_only=paper_pooling_only)
    return RunPlan(
        pooling=pooling,
        pooling_reason=reason,
        max_length=training_length(config.max_length, encoder),
        steps=resolve_steps(config.steps, config.batch_size, examples, epochs),
        learning_rate=config.learning_rate if config.learning_rate is not None else learning_rate,
        mlp=None if mlp is None else resolve_training_mlp(mlp, pooling),
        precision=config.precision,
        encoder_max_length=int(encoder.max_length),
    )
