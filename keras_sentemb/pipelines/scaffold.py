"""The shared scaffold every `fit_*` function is composed over.

A `fit_*` function is a recipe: it loads its data, builds its trainer and
optimizer, and hands the rest to `FitScaffold`, which does the same things
the same way for every method:

- validates the common arguments once, before any work;
- resolves the model (preset, folder or encoder) under the strategy scope;
- resolves `pooling="auto"`: the model's own pooling when it declares one,
  else the paper's, and logs which and why;
- resolves the dev set (`"stsb"`: the bundled STS-B dev) and scores the
  candidates on it every `eval_every` steps, keeping the best (the starting
  weights included);
- builds step-indexed, tokenized batches, so a run resumed by
  `keras.callbacks.BackupAndRestore` sees the same data order;
- trains exactly `steps` optimizer steps with Keras `fit` (epochs of
  `eval_every` steps, the granularity of `BackupAndRestore`);
- stops at a non-finite step with the last finite weights;
- sets the kept encoder's pooling once, attaches a `TrainingReport` and
  saves it to `output`.

The shared arguments of every `fit_*` (their types, defaults and
documentation) are defined once in `keras_sentemb.pipelines.shared_arguments`;
the scaffold validates them.
"""

import contextlib
import dataclasses
import logging
import math
import os
import time

import keras
import tensorflow as tf

from keras_sentemb import compat
from keras_sentemb import validation
from keras_sentemb.data.batching import shuffled_batches
from keras_sentemb.data.batching import tokenize_columns
from keras_sentemb.data.stream_batches import worker_shard
from keras_sentemb.data.stream_batches import stream_batches
from keras_sentemb.evaluation.readers import load_stsb_pairs
from keras_sentemb.io_utils import check_new_folder
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.models.native_bfloat16 import effective_precision
from keras_sentemb.models.precision import PRECISIONS
from keras_sentemb.models.precision import check_precision
from keras_sentemb.pipelines.callbacks import LossHistory
from keras_sentemb.pipelines.callbacks import NonFiniteGuard
from keras_sentemb.pipelines.callbacks import STSDevEvaluation
from keras_sentemb.pipelines.callbacks import StopAtStep
from keras_sentemb.version import library_versions

logger = logging.getLogger(__name__)

COMMON_ARGS = (
    "model", "steps", "batch_size", "learning_rate", "max_length", "pooling",
    "dev", "eval_every", "output", "strategy", "callbacks", "seed", "verbose",
)
# An in-batch loss takes each row's negatives from the other rows.
MIN_IN_BATCH_SIZE = 2
# Arguments of a fit_* function that are not hyperparameters of the run.
NOT_HYPERPARAMETERS = ("data", "strategy", "callbacks", "verbose", "output")
REPORT_FILE = "training_report.json"


@dataclasses.dataclass
class TrainingReport:
    """How an encoder was trained: the record a `fit_*` function returns with it.

    Attributes:
        method: str. The method (`"ct"`, `"simcse"`, ...).
        model: str. What training started from.
        pooling: str. The pooling the kept encoder encodes with.
        pooling_reason: str. Why that pooling.
        hyperparameters: dict. Every argument of the `fit_*` call.
        resolved: dict. What `"auto"` (and the defaults left as None)
            became: pooling, the training MLP, max length, steps.
        data: dict. What the data held (counts).
        steps: int. Optimizer steps asked for.
        steps_trained: int. Optimizer steps done (fewer after a stop).
        selection: dict or None. The dev selection: rule, history, kept
            candidate and step.
        loss_history: list of `[step, loss]`. The mean training loss of
            each `eval_every` steps (of the last stage in multi-stage
            recipes; each stage's is in `extras["stages"]`). Empty in
            reports written before it was recorded.
        stopped: str or None. Why training stopped early, if it did.
        extras: dict. Method-specific results (e.g. held-out retrieval).
        seconds: float. Wall time of the call.
        versions: dict. keras_sentemb, Keras, keras-hub and TensorFlow.
    """
    method: str
    model: str
    pooling: str = None
    pooling_reason: str = None
    hyperparameters: dict = dataclasses.field(default_factory=dict)
    resolved: dict = dataclasses.field(default_factory=dict)
    data: dict = dataclasses.field(default_factory=dict)
    steps: int = 0
    steps_trained: int = 0
    selection: dict = None
    loss_history: list = dataclasses.field(default_factory=list)
    stopped: str = None
    extras: dict = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    versions: dict = dataclasses.field(default_factory=dict)

    def to_dict(self):
        return dataclasses.asdict(self)


def _jsonable(value):
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return f"<{type(value).__name__}>"


def resolve_encoder(model, max_length=None):
    """A `SentenceEncoder` from a preset name / folder, or the given encoder.

    `max_length` is the training length (the encoder keeps its own
    `max_length` for inference); see `training_length`.
    """
    if isinstance(model, SentenceEncoder):
        encoder = model
    elif isinstance(model, (str, os.PathLike)):
        encoder = SentenceEncoder.from_preset(os.fspath(model))
    else:
        raise ValueError(
            "`model` must be a preset name, a model folder or a SentenceEncoder. "
            f"Received: {type(model).__name__}."
        )
    return encoder


def training_length(max_length, encoder):
    """The training token limit: `max_length` capped at what the backbone takes.

    The papers' lengths (CT's 75, ...) are capped, with a log line, for
    backbones with fewer positions; below 3 (two special tokens and one
    word) is an error.
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


def resolve_pooling(pooling, encoder, paper_pooling):
    """`(pooling, reason)`: `"auto"` is the model's own pooling, else the paper's.

    Args:
        pooling: str. `"auto"` or a pooling name (see `parse_pooling`).
        encoder: `SentenceEncoder`. Its `declared_pooling` is the model's own.
        paper_pooling: str. The method's paper setting for a raw backbone.
    """
    if pooling != "auto":
        return parse_pooling(pooling, encoder.num_layers), "set by the caller"
    declared = encoder.declared_pooling
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
    pooling it would train a head that is then thrown away.
    """
    validation.choice(mlp, "mlp", ("auto", "train", "none"))
    if mlp == "auto":
        return "train" if pooling == "cls" else "none"
    return mlp


def resolve_dev(dev):
    """The `dev` argument -> list of (s1, s2, score), or None.

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
    return load_stsb_pairs(dev, "dev")


def check_output(output):
    """Fail before any work when `output` cannot become a model folder."""

    if output is None:
        return None
    check_new_folder(output, overwrite=True, what="`output`")
    return os.fspath(output)


class FitScaffold:
    """One `fit_*` run: the common arguments and the steps every method shares.

    A method's `train(run, data, config)` gets it from the runner
    (`keras_sentemb.methods.fit`), which builds it from the shared
    arguments; every argument of the call is recorded as a hyperparameter of
    the run.

    Args:
        method: str. The method's name (for logs and the report).
        arguments: dict. Every argument of the `fit_*` call.
        paper_pooling: str. The paper's pooling for a raw backbone.
        custom_dev: tuple of str. `dev` values the recipe handles itself
            (e.g. `"retrieval"`); they are kept in `run.dev` and not read as
            STS data.
        in_batch: bool. The method's loss takes negatives from the batch,
            so `batch_size` must be at least 2.

    Examples:

    ```python
    def train(self, run, data, config):  # a Method's train (see docs: adding a method)
        sentences = load_corpus(data)
        run.set_steps(len(sentences))
        with run.scope():
            encoder = run.load_encoder()
            trainer = MyTrainer(encoder, pooling=run.pooling_for(encoder))
        run.compile(trainer, keras.optimizers.AdamW(run.learning_rate))
        run.fit(trainer, run.batches(encoder, {"sentence": sentences}))
        return run.finish(trainer.encoder)
    ```
    """
    def __init__(self, method, arguments, paper_pooling, custom_dev=(), in_batch=False):
        missing = [name for name in COMMON_ARGS if name not in arguments]
        if missing:
            raise TypeError(f"fit_{method} lacks the common arguments {missing}.")
        self.method = method
        self.paper_pooling = paper_pooling
        args = {name: arguments[name] for name in COMMON_ARGS}
        self.model = args["model"]
        self.steps = validation.optional_positive_int(args["steps"], "steps")
        self.batch_size = validation.positive_int(args["batch_size"], "batch_size")
        if in_batch and self.batch_size < MIN_IN_BATCH_SIZE:
            raise ValueError(
                f"`batch_size` must be >= {MIN_IN_BATCH_SIZE} for {method}: its loss takes each "
                f"sentence's negatives from the rest of the batch. Received: "
                f"batch_size={self.batch_size}."
            )
        self.learning_rate = (
            None if args["learning_rate"] is None
            else validation.positive_float(args["learning_rate"], "learning_rate")
        )
        self.max_length = validation.optional_positive_int(args["max_length"], "max_length")
        self.requested_pooling = args["pooling"]
        if not isinstance(self.requested_pooling, str):
            raise ValueError(
                f"`pooling` must be 'auto' or a pooling name. Received: {self.requested_pooling!r}."
            )
        if self.requested_pooling != "auto":

            parse_pooling(self.requested_pooling)
        self.dev = args["dev"]
        custom = isinstance(self.dev, str) and self.dev in custom_dev
        self.dev_pairs = None if custom else resolve_dev(self.dev)
        self.eval_every = validation.positive_int(args["eval_every"], "eval_every")
        self.output = check_output(args["output"])
        self.strategy = args["strategy"]
        if self.strategy is not None and not isinstance(self.strategy, tf.distribute.Strategy):
            raise ValueError(
                f"`strategy` must be a tf.distribute.Strategy or None. Received: {self.strategy!r}."
            )
        self.callbacks = list(args["callbacks"] or [])
        self.seed = args["seed"]
        if self.seed is not None:
            self.seed = validation.non_negative_int(self.seed, "seed")
        self.verbose = args["verbose"]

        # bfloat16 only where the hardware computes it (else float32, with a notice).
        self.precision = effective_precision(check_precision(arguments.get("precision")))
        self.mini_batch_size = validation.optional_positive_int(
            arguments.get("mini_batch_size"), "mini_batch_size"
        )
        self.max_grad_norm = validation.optional_positive_float(
            arguments.get("max_grad_norm"), "max_grad_norm"
        )
        self.matryoshka_dims = arguments.get("matryoshka_dims")
        self.matryoshka_weights = arguments.get("matryoshka_weights")
        if self.matryoshka_dims is None and self.matryoshka_weights is not None:
            raise ValueError("`matryoshka_weights` needs `matryoshka_dims`.")
        self.pooling = None
        self.pooling_reason = None
        self.report = TrainingReport(
            method=method,
            model=(self.model if isinstance(self.model, str) else getattr(self.model, "name", "encoder")),
            hyperparameters={
                k: _jsonable(v) for k, v in arguments.items()
                if k not in NOT_HYPERPARAMETERS and not k.startswith("_")
            },
        )
        self._stages = []
        self._start = time.time()

    def seed_everything(self):
        """Seed Python, NumPy and Keras with the run's seed (when it has one)."""
        if self.seed is not None:
            keras.utils.set_random_seed(self.seed)

    # ------------------------------------------------------------ resolving
    def scope(self):
        """`strategy.scope()`, or a no-op context without a strategy."""
        if self.strategy is None:
            return contextlib.nullcontext()
        return self.strategy.scope()

    def load_encoder(self, model=None):
        """The starting encoder (`model` defaults to the run's `model`).

        Also caps the run's `max_length` at the backbone's positions.
        """
        encoder = resolve_encoder(self.model if model is None else model)
        if self.precision != "float32":

            # A copy computing in bfloat16 (float32 weights): the caller's
            # encoder is not trained in place.
            encoder = encoder.clone(name=encoder.name, dtype=PRECISIONS[self.precision])
        self.max_length = training_length(self.max_length, encoder)
        self.report.resolved["max_length"] = self.max_length or encoder.max_length
        return encoder

    def pooling_for(self, encoder):
        """Resolve and record the pooling of the run (see `resolve_pooling`)."""
        self.pooling, self.pooling_reason = resolve_pooling(
            self.requested_pooling, encoder, self.paper_pooling
        )
        logger.info("%s: pooling %s (%s)", self.method, self.pooling, self.pooling_reason)
        self.report.pooling, self.report.pooling_reason = self.pooling, self.pooling_reason
        self.report.resolved["pooling"] = self.pooling
        return self.pooling

    def training_mlp(self, mlp):
        """Resolve a training-only MLP head option against the run's pooling."""
        resolved = resolve_training_mlp(mlp, self.pooling)
        self.report.resolved["mlp"] = resolved
        if mlp == "auto":
            logger.info(
                "%s: training-only MLP head %s (pooling %s)",
                self.method, "on" if resolved == "train" else "off", self.pooling,
            )
        return resolved

    def set_steps(self, examples, epochs=1):
        """`steps` or, when it was None, `epochs` epochs over `examples`."""
        if self.steps is None and examples is None:
            raise ValueError(
                "The training data is streamed and its size is unknown (it is not counted): "
                "pass `steps` (`--steps N`)."
            )
        if self.steps is None:
            epochs = validation.positive_int(epochs, "epochs")
            self.steps = max(1, examples // self.batch_size) * epochs
        self.report.resolved["steps"] = self.steps
        return self.steps

    def record_data(self, **counts):
        """Add data counts to the report."""
        self.report.data.update(counts)

    # ------------------------------------------------------------------ data
    def batches(self, encoder, columns, extra=None, encoders=None, max_length=None):
        """A `make_dataset(start_step)` of tokenized, shuffled batches.

        Args:
            encoder: `SentenceEncoder` that tokenizes the columns.
            columns: dict name -> list of str (aligned rows).
            extra: dict name -> list of numbers passed through (labels).
            encoders: dict column -> encoder for columns another encoder
                tokenizes.
            max_length: int or None. Defaults to the run's `max_length`.
        """
        max_length = self.max_length if max_length is None else max_length

        def make_dataset(start_step):
            ds = shuffled_batches(
                columns, self.batch_size, seed=self.seed or 0,
                start_step=start_step, extra=extra,
            )
            return tokenize_columns(encoder, ds, list(columns), max_length, encoders)

        return make_dataset

    def stream_batches(self, encoder, stream, names, no_duplicates=False, max_length=None,
                       encoders=None, exclude=None):
        """A `make_dataset(start_step)` of tokenized batches read from a stream.

        See `keras_sentemb.data.stream_batches`: shuffle buffer, no
        duplicate texts in a batch, mixing, sharding, and a resumed run
        skipping the batches it has trained on.

        Args:
            encoder: `SentenceEncoder` that tokenizes the columns.
            stream: a stream source or `Mixture`.
            names: tuple of str. The columns, in the trainer's order.
            no_duplicates: bool. The method's default (its loss is in-batch).
            max_length: int or None. Defaults to the run's `max_length`.
            encoders: dict column -> encoder for columns another encoder
                tokenizes.
            exclude: dict column -> texts left out of training (held out).
        """
        max_length = self.max_length if max_length is None else max_length
        workers = worker_shard(self.strategy)

        def make_dataset(start_step):
            ds = stream_batches(stream, names, self.batch_size, seed=self.seed or 0,
                                start_step=start_step, no_duplicates=no_duplicates,
                                workers=workers, exclude=exclude)
            return tokenize_columns(encoder, ds, list(names), max_length, encoders)

        return make_dataset

    # -------------------------------------------------------------- training
    def clipped(self, optimizer):
        """`optimizer`, clipping the global gradient norm at the run's `max_grad_norm`."""
        if self.max_grad_norm is not None:
            if getattr(optimizer, "clipnorm", None) or getattr(optimizer, "clipvalue", None):
                raise ValueError("`max_grad_norm` clips the global norm; the optimizer already "
                                 "clips by `clipnorm` / `clipvalue`.")
            optimizer.global_clipnorm = self.max_grad_norm
        return optimizer

    def compile(self, trainer, optimizer, **kwargs):
        """`trainer.compile(optimizer=...)` inside the strategy scope (Matryoshka set first).

        The run's `max_grad_norm` is applied to `optimizer` (`clipped`).
        """
        if self.matryoshka_dims is not None:
            trainer.set_matryoshka(self.matryoshka_dims, self.matryoshka_weights)
        with self.scope():
            trainer.compile(optimizer=self.clipped(optimizer), **kwargs)

    def _backup(self):
        for cb in self.callbacks:
            if isinstance(cb, keras.callbacks.BackupAndRestore):
                if cb.save_freq != "epoch":
                    raise ValueError(
                        "BackupAndRestore must use save_freq='epoch' with the fit_* "
                        "functions (their epochs are `eval_every` steps long); "
                        f"received save_freq={cb.save_freq!r}."
                    )
                return cb
        return None

    def fit(self, trainer, make_dataset, steps=None, dev_pairs="run", patience=None,
            stage=None, callbacks=(), keep_best=True, selection=None):
        """Train `trainer` for exactly `steps` optimizer steps with Keras `fit`.

        Args:
            trainer: a compiled `BaseTrainer`.
            make_dataset: callable `start_step -> tf.data.Dataset`.
            steps: int or None. Defaults to the run's `steps`.
            dev_pairs: list, None or `"run"` (the run's dev set).
            patience: int or None. Dev evaluations without improvement
                before stopping.
            stage: str or None. Name of this stage in multi-stage recipes.
            keep_best: bool. Keep the best candidate on dev (the starting
                weights included); `False` only records the dev scores.
            selection: a `DevSelection` of the recipe's own (e.g. on
                retrieval) used instead of STS dev pairs.
            callbacks: extra callbacks of the recipe (after the scaffold's,
                before the caller's).

        Returns:
            The `STSDevEvaluation` callback, or None without a dev set.
        """
        steps = validation.positive_int(self.steps if steps is None else steps, "steps")
        dev_pairs = self.dev_pairs if dev_pairs == "run" else dev_pairs
        steps_per_epoch = min(self.eval_every, steps)
        epochs = math.ceil(steps / steps_per_epoch)
        backup = self._backup()
        start_step = 0
        if backup is not None:
            start_step = min(compat.backup_start_epoch(backup) * steps_per_epoch, steps)
            if start_step:
                logger.info("%s: resuming from step %d (backup in %s)",
                            self.method, start_step, backup.backup_dir)
        guard = NonFiniteGuard()
        losses = LossHistory(
            state_dir=None if backup is None else os.fspath(backup.backup_dir), resume_step=start_step,
        )
        cbs = [guard, losses]
        if selection is None and dev_pairs:
            selection = STSDevEvaluation(
                dev_pairs, every=steps_per_epoch, pooling=self.pooling, patience=patience,
                restore_best=keep_best,
            )
        if selection is not None:
            selection.every = steps_per_epoch
            selection.resume_step = start_step
            selection.state_dir = None if backup is None else os.fspath(backup.backup_dir)
            cbs.append(selection)
        cbs.append(StopAtStep(steps))
        cbs.extend(callbacks)
        cbs.extend(self.callbacks)
        trainer.fit(
            make_dataset(start_step), epochs=epochs, steps_per_epoch=steps_per_epoch,
            callbacks=cbs, verbose=self.verbose, shuffle=False,  # shuffled in tf.data
        )
        done = int(trainer.optimizer.iterations.numpy())
        stage_report = {"stage": stage, "steps": steps, "steps_trained": done,
                        "loss_history": losses.history}
        if guard.stopped_at is not None:
            stage_report["stopped"] = f"non-finite loss at step {guard.stopped_at}"
        elif done < steps:
            stage_report["stopped"] = f"no dev improvement (patience {patience}) at step {done}"
        if selection is not None:
            stage_report["selection"] = selection.summary()
        self._stages.append(stage_report)
        return selection

    def record_selection(self, summary, stage=None):
        """Record a dev selection made without `fit` (among fitted candidates).

        Args:
            summary: dict in `DevSelection.summary()`'s layout (`monitor`,
                `kept`, `kept_score`, `history`, ...).
            stage: str or None. Name of the stage.
        """
        self._stages.append({"stage": stage, "steps": 0, "steps_trained": 0,
                             "selection": summary})

    # ---------------------------------------------------------------- finish
    def finish(self, encoder, extras=None):
        """Set the kept encoder's pooling, attach the report, save; return it.

        An encoder trained in bfloat16 comes back as a float32 encoder
        (its float32 weights, a float32 policy).
        """
        if encoder.backbone.dtype_policy.name != "float32" and self.precision != "float32":
            encoder = encoder.clone(name=encoder.name, dtype="float32")
        if self.pooling is not None:
            encoder.pooling = self.pooling
        report = self.report
        last = self._stages[-1] if self._stages else {}
        report.steps = sum(s["steps"] for s in self._stages)
        report.steps_trained = sum(s["steps_trained"] for s in self._stages)
        report.selection = last.get("selection")
        report.loss_history = last.get("loss_history", [])
        report.stopped = next((s["stopped"] for s in self._stages if s.get("stopped")), None)
        if len(self._stages) > 1:
            report.extras["stages"] = self._stages
        report.extras.update(_jsonable(extras or {}))
        report.seconds = round(time.time() - self._start, 1)
        report.versions = library_versions()
        encoder.training_report = report
        if self.output is not None:
            encoder.save(self.output)
            logger.info("%s: saved the encoder (pooling %s) to %s",
                        self.method, encoder.pooling, self.output)
        return encoder
