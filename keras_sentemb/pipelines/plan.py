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

from keras_sentemb import validation
from keras_sentemb.evaluation.readers import load_stsb_pairs
from keras_sentemb.io_utils import check_new_folder
from keras_sentemb.kernels.precision import resolve_training_precision
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.pipelines.arguments import RUN_ARGUMENTS
from keras_sentemb.trainers.training_head import resolve_training_mlp

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


def _given(value):
    """Whether a dev-set argument names a set (None, `"none"` and `""` do not)."""
    return value is not None and not (isinstance(value, str) and value.lower() in ("none", ""))


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """The shared arguments of a `fit_*` call, validated once before any work.

    One field per shared run argument (`keras_sentemb.pipelines.arguments`:
    their defaults are there, and only there), plus what the files they
    name hold: `dev_pairs`, the STS pairs `dev` names (None for no dev set
    or a method's own dev kind, e.g. `"retrieval"`), and
    `dev_retrieval_data`, the `BeirData` read from `dev_retrieval`. Built in
    two steps: `RunConfig.from_arguments` checks the values (no I/O), then
    `read_files` reads the dev sets and checks the output folder; `resolve`
    turns it and an encoder into a `RunPlan`. `dev_select` is `"dev"` or
    `"retrieval"` (`"auto"` resolved): which dev score chooses the kept
    checkpoint.
    """
    model: object
    steps: int | None
    batch_size: int
    learning_rate: float | None
    max_length: int | None
    pooling: str
    dev: object
    eval_every: int
    output: object
    strategy: object
    callbacks: tuple
    seed: int | None
    verbose: object
    precision: str
    mini_batch_size: int | None
    max_grad_norm: float | None
    matryoshka_dims: tuple | None
    matryoshka_weights: tuple | None
    dev_retrieval: object
    dev_select: str
    max_skipped: float
    custom_dev: bool = False
    precision_reason: str = "asked for"
    dev_pairs: tuple | None = None
    dev_retrieval_data: object = None

    @classmethod
    def from_arguments(cls, method, arguments, custom_dev=(), in_batch=False):
        """Validate the shared arguments of a call (a dict; absent ones take their default).

        Each value is checked by its `Argument` (`Argument.validate`, the
        check of method options too); then the rules between arguments.
        Reads no file: `read_files` is the next step.

        Args:
            method: str. The method's name (for messages).
            arguments: dict. The call's arguments.
            custom_dev: tuple of str. `dev` values the method handles itself.
            in_batch: bool. The loss takes negatives from the batch, so
                `batch_size` must be at least 2.
        """
        values = {name: argument.validate(arguments.get(name, argument.default))
                  for name, argument in RUN_ARGUMENTS.items()}
        if in_batch and values["batch_size"] < MIN_IN_BATCH_SIZE:
            raise ValueError(
                f"`batch_size` must be >= {MIN_IN_BATCH_SIZE} for {method}: its loss takes each "
                f"sentence's negatives from the rest of the batch. Received: "
                f"batch_size={values['batch_size']}."
            )
        if values["matryoshka_dims"] is None and values["matryoshka_weights"] is not None:
            raise ValueError("`matryoshka_weights` needs `matryoshka_dims`.")
        dev = values["dev"]
        custom = isinstance(dev, str) and dev in custom_dev
        retrieval = _given(values["dev_retrieval"])
        if values["dev_select"] == "auto":
            values["dev_select"] = "retrieval" if retrieval else "dev"
        elif values["dev_select"] == "retrieval" and not retrieval:
            raise ValueError("`dev_select='retrieval'` needs a retrieval dev set: pass "
                             "`dev_retrieval` (a BEIR folder).")
        elif values["dev_select"] == "dev" and retrieval and not (custom or _given(dev)):
            raise ValueError("`dev_select='dev'` needs a `dev` set; `dev` is None (use "
                             "dev_select='retrieval' to select on `dev_retrieval`).")
        values["callbacks"] = tuple(values["callbacks"] or ())
        # "auto" resolved; bfloat16 only where the hardware computes it (else float32).
        if "precision" in arguments:
            values["precision"], reason = resolve_training_precision(values["precision"])
        else:  # a method without the option (its trainer computes in float32)
            values["precision"], reason = "float32", f"{method} trains in float32"
        return cls(**values, custom_dev=custom, precision_reason=reason)

    def read_files(self):
        """The config with its dev sets read and its output folder checked (the I/O step).

        `dev` and `dev_retrieval` are read once, before any work (a missing
        or malformed file is one line), and `output` is checked to be a
        folder a model can be written to.

        Returns:
            A new `RunConfig` with `dev_pairs` and `dev_retrieval_data`.
        """
        return dataclasses.replace(
            self,
            dev_pairs=None if self.custom_dev else resolve_dev(self.dev),
            dev_retrieval_data=resolve_dev_retrieval(self.dev_retrieval),
            output=check_output(self.output),
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
            computes; see `keras_sentemb.kernels.precision.resolve_training_precision`).
        encoder_max_length: int. The encoder's own token limit.
        precision_reason: str. Why that precision (asked for, or what
            `"auto"` found on this host).
    """
    pooling: str
    pooling_reason: str
    max_length: int | None
    steps: int
    learning_rate: float | None
    mlp: str | None
    precision: str
    encoder_max_length: int
    precision_reason: str = "asked for"

    @property
    def training_max_length(self):
        """The token limit training batches are cut at."""
        return self.encoder_max_length if self.max_length is None else self.max_length

    def record(self):
        """The plan as the report's `resolved` entries."""
        resolved = {"pooling": self.pooling, "max_length": self.training_max_length,
                    "steps": self.steps, "precision": self.precision,
                    "precision_reason": self.precision_reason}
        if self.learning_rate is not None:
            resolved["learning_rate"] = self.learning_rate
        if self.mlp is not None:
            resolved["mlp"] = self.mlp
        return resolved


def training_length(max_length, encoder):
    """The training token limit: `max_length` capped at what the backbone takes.

    The papers' lengths (CT's 75, ...) are capped for backbones with fewer
    positions (the run logs it); below 3 (two special tokens and one word)
    is an error. None stays None (the encoder's own limit).
    """
    if max_length is None:
        return None
    if max_length < 3:
        raise ValueError(f"`max_length` must be >= 3. Received: max_length={max_length!r}.")
    return min(max_length, int(encoder.backbone.max_sequence_length))


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
    """The `RunPlan` of a run (`config`) for its starting `encoder`: a pure function.

    It logs nothing, reads and writes nothing, and changes neither argument
    (`FitScaffold.plan` logs the plan and records it in the report).

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
        precision_reason=config.precision_reason,
    )
