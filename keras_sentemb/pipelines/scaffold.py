"""The shared scaffold every `fit_*` function is composed over.

A `fit_*` function is a recipe: it loads its data, builds its trainer and
optimizer, and hands the rest to `FitScaffold`, which does the same things
the same way for every method:

- validates the shared arguments once, before any work (a frozen
  `RunConfig`), then reads the dev sets they name and checks the output
  folder, in a step of its own;
- loads the model (preset, folder or encoder) under the strategy scope;
- resolves, as a pure function of the arguments and the encoder, what
  `"auto"` and the unset arguments become (`keras_sentemb.pipelines.plan.resolve`
  returns a frozen `RunPlan`: pooling and why, token limit, steps, learning
  rate, MLP head, precision), and logs and records it (`run.plan(encoder)`);
- resolves the dev set (`"stsb"`: the bundled STS-B dev) and scores the
  candidates on it every `eval_every` steps, keeping the best (the starting
  weights included); with `dev_retrieval` also nDCG@10 on a BEIR folder,
  and `dev_select` says which of the two chooses the kept checkpoint;
- builds step-indexed, tokenized batches, so a run resumed by
  `keras.callbacks.BackupAndRestore` sees the same data order;
- trains exactly `steps` optimizer steps with Keras `fit` (epochs of
  `eval_every` steps, the granularity of `BackupAndRestore`);
- counts a streamed source's rows read and skipped, and stops with one line
  when it skipped more than `max_skipped` of them or cannot be read
  (`keras_sentemb.data.row_accounting`), before anything is saved;
- stops at a non-finite step with the last finite weights;
- sets the kept encoder's pooling once, attaches a `TrainingReport` and
  saves it to `output`.

The shared arguments of every `fit_*` (their types, defaults and
documentation) are defined once in `keras_sentemb.pipelines.arguments`;
the scaffold validates them.
"""

import contextlib
import dataclasses
import logging
import math
import os
import time
import warnings

import keras

from keras_sentemb import compat
from keras_sentemb import validation
from keras_sentemb.data.batching import without_autotuner
from keras_sentemb.data.read_errors import DataError
from keras_sentemb.data.read_errors import reading
from keras_sentemb.data.row_accounting import accounting
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.models.compute_policy import switch_compute_policy
from keras_sentemb.models.keras_hub_models import is_keras_hub_model
from keras_sentemb.models.keras_hub_models import renew_sentencepiece
from keras_sentemb.models.projection_head import with_projection_head
from keras_sentemb.kernels.precision import PRECISIONS
from keras_sentemb.pipelines.plan import RunConfig
from keras_sentemb.pipelines.run_data import RunData
from keras_sentemb.pipelines.plan import resolve
from keras_sentemb.pipelines.callbacks import BeirDevEvaluation
from keras_sentemb.pipelines.callbacks import LossHistory
from keras_sentemb.pipelines.callbacks import NonFiniteGuard
from keras_sentemb.pipelines.callbacks import STSDevEvaluation
from keras_sentemb.pipelines.callbacks import SkippedRowsCheck
from keras_sentemb.pipelines.callbacks import StopAtStep
from keras_sentemb.version import library_versions

logger = logging.getLogger(__name__)

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


def resolve_encoder(model):
    """A `SentenceEncoder` from a preset name / folder or a keras-hub model, or the given encoder."""
    if isinstance(model, SentenceEncoder):
        encoder = model
    elif isinstance(model, (str, os.PathLike)):
        encoder = SentenceEncoder.from_preset(os.fspath(model))
    elif is_keras_hub_model(model):  # a copy: the caller's keras-hub object is not trained
        encoder = SentenceEncoder.from_preset(model)
    else:
        raise ValueError(
            "`model` must be a preset name, a model folder, a SentenceEncoder, a keras-hub "
            f"TextEmbedder or a (keras-hub Backbone, Tokenizer) pair. Received: "
            f"{type(model).__name__}."
        )
    return encoder


class FitScaffold(RunData):
    """One `fit_*` run: its validated arguments and the steps every method shares.

    A method's `train(run, data, config)` gets it from the runner
    (`keras_sentemb.methods.fit`), which builds it from the shared
    arguments; every argument of the call is recorded as a hyperparameter of
    the run. The validated arguments are `run.config` (a frozen
    `RunConfig`) and read as attributes too (`run.batch_size`, `run.seed`,
    `run.dev_pairs`, ...), except the ones a plan resolves: `steps`,
    `max_length`, `pooling` and `learning_rate` are read from the
    `RunPlan` that `run.plan(encoder, ...)` returns (or, as asked, from
    `run.config`). It keeps no state between its steps but its report.

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
        sentences, _, count = run.read_sentences(data)  # a list (a stream: `stream_batches`)
        with run.scope():
            encoder, plan = run.start(examples=count)
            trainer = MyTrainer(encoder, pooling=plan.pooling)
        optimizer = keras.optimizers.AdamW(plan.learning_rate)
        make_dataset = run.batches(encoder, {"sentence": sentences}, plan)
        return run.train(trainer, optimizer, make_dataset, plan)
    ```

    `run.start` is `load_encoder` then `plan`; `run.train` is `compile`,
    `fit` and `finish`: a method of several stages calls those steps itself.
    """
    # Resolved per encoder by `resolve`: read them from the plan.
    PLANNED = ("steps", "max_length", "pooling", "learning_rate")

    def __init__(self, method, arguments, paper_pooling, custom_dev=(), in_batch=False):
        self.method = method
        self.paper_pooling = paper_pooling
        # The values checked first (no I/O), then the files they name read.
        self.config = RunConfig.from_arguments(method, arguments, custom_dev, in_batch).read_files()
        self.report = TrainingReport(
            method=method,
            model=(self.config.model if isinstance(self.config.model, str)
                   else getattr(self.config.model, "name", "encoder")),
            hyperparameters={
                k: _jsonable(v) for k, v in arguments.items()
                if k not in NOT_HYPERPARAMETERS and not k.startswith("_")
            },
        )
        self._stages = []
        self._restores = []  # undo a mixed-precision switch (`load_encoder`)
        self._start = time.time()

    def __getattr__(self, name):
        config = self.__dict__.get("config")
        if config is not None and name in RunConfig.__dataclass_fields__:
            if name in self.PLANNED:
                raise AttributeError(
                    f"`run.{name}` is resolved per encoder: read `plan.{name}` from "
                    f"`run.plan(encoder, ...)`, or `run.config.{name}` for the value asked."
                )
            return getattr(config, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name, value):
        if name in RunConfig.__dataclass_fields__:
            raise AttributeError(f"`run.{name}` is a validated argument of the run (read-only); "
                                 "stages pass their own values to `run.fit`.")
        super().__setattr__(name, value)

    def seed_everything(self):
        """Seed Python, NumPy and Keras with the run's seed (when it has one)."""
        if self.config.seed is not None:
            keras.utils.set_random_seed(self.config.seed)

    # ------------------------------------------------------------ resolving
    def scope(self):
        """`strategy.scope()`, or a no-op context without a strategy."""
        if self.config.strategy is None:
            return contextlib.nullcontext()
        return self.config.strategy.scope()

    def load_encoder(self, model=None):
        """The starting encoder (`model` defaults to the run's `model`).

        With bfloat16 precision, the encoder itself computing in mixed
        bfloat16 until the run ends (`compute_policy.switch_compute_policy`:
        float32 weights and optimizer state, trained in place as in
        float32); an encoder whose backbone does not compute in float32 is
        copied into mixed bfloat16 instead.
        """
        encoder = resolve_encoder(self.config.model if model is None else model)
        renew_sentencepiece(encoder)  # the run's seed cleared the kernel holding its model
        if self.config.precision == "float32" or not hasattr(encoder, "backbone"):
            return encoder
        policy = PRECISIONS[self.config.precision]
        if encoder.backbone.dtype_policy.name == policy:
            return encoder  # switched already (one encoder as teacher and student)
        if encoder.backbone.dtype_policy.name != "float32":
            return encoder.clone(name=encoder.name, dtype=policy)
        self._restores.append(switch_compute_policy(encoder, policy))
        return encoder

    def restore_precision(self):
        """Every encoder `load_encoder` switched computes in its own precision again."""
        while self._restores:
            self._restores.pop()()

    def plan(self, encoder, examples=None, epochs=1, mlp=None, learning_rate=None,
             paper_pooling_only=None):
        """The run's `RunPlan` for `encoder`, logged and recorded in the report.

        The plan is `keras_sentemb.pipelines.plan.resolve`'s (a pure
        function); this step logs the pooling (an `"auto"` MLP head, a token
        limit capped at the backbone's positions) and records the plan in
        the report.

        Args:
            encoder: `SentenceEncoder`. The encoder training starts from.
            examples: int or None. Training examples per epoch (None when
                unknown: then `steps` must be given).
            epochs: int. Epochs when `steps` is None. Defaults to 1.
            mlp: str or None. The method's training-MLP option, if any.
            learning_rate: float or None. The method's default learning
                rate when the run's is None.
            paper_pooling_only: str or None. Why `"auto"` pooling is the
                paper's whatever the model declares (see
                `keras_sentemb.pipelines.plan.resolve_pooling`).
        """
        plan = resolve(self.config, encoder, self.paper_pooling, examples=examples,
                       epochs=epochs, mlp=mlp, learning_rate=learning_rate,
                       paper_pooling_only=paper_pooling_only)
        logger.info("%s: pooling %s (%s)", self.method, plan.pooling, plan.pooling_reason)
        logger.info("%s: trains in %s (%s)", self.method,
                    "mixed bfloat16" if plan.precision == "bfloat16" else plan.precision,
                    plan.precision_reason)
        asked = self.config.max_length
        if asked is not None and plan.max_length is not None and plan.max_length < asked:
            logger.info("max_length %d is capped at the model's %d positions", asked,
                        plan.max_length)
        if mlp == "auto":
            logger.info("%s: training-only MLP head %s (pooling %s)", self.method,
                        "on" if plan.mlp == "train" else "off", plan.pooling)
        self.report.pooling, self.report.pooling_reason = plan.pooling, plan.pooling_reason
        self.report.resolved.update(plan.record())
        return plan

    resolve = plan  # the name methods written before `plan` call

    def start(self, examples=None, epochs=1, mlp=None, learning_rate=None,
              paper_pooling_only=None):
        """`(encoder, plan)`: `load_encoder()` then `plan(...)`, in `run.scope()`; with `mlp`
        resolved to `"keep"`, a projection head (trained and kept) if the encoder has none."""
        encoder = self.load_encoder()
        plan = self.plan(encoder, examples=examples, epochs=epochs, mlp=mlp,
                         learning_rate=learning_rate, paper_pooling_only=paper_pooling_only)
        if plan.mlp == "keep" and encoder.projection is None:
            encoder = with_projection_head(encoder, seed=self.seed)
        return encoder, plan

    def record_data(self, **counts):
        """Add data counts to the report."""
        self.report.data.update(counts)

    # -------------------------------------------------------------- training
    def clipped(self, optimizer):
        """`optimizer`, clipping the global gradient norm at the run's `max_grad_norm`."""
        if self.config.max_grad_norm is not None:
            if getattr(optimizer, "clipnorm", None) or getattr(optimizer, "clipvalue", None):
                raise ValueError("`max_grad_norm` clips the global norm; the optimizer already "
                                 "clips by `clipnorm` / `clipvalue`.")
            optimizer.global_clipnorm = self.config.max_grad_norm
        return optimizer

    def compile(self, trainer, optimizer, **kwargs):
        """`trainer.compile(optimizer=...)` inside the strategy scope (Matryoshka set first).

        The run's `max_grad_norm` is applied to `optimizer` (`clipped`). An
        optimizer made outside the run's strategy scope belongs to the default
        strategy and cannot make slots for the trainer's distributed variables
        ("Mixing different tf.distribute.Strategy objects"): it is made again
        from its config inside the scope.
        """
        if self.config.matryoshka_dims is not None:
            trainer.set_matryoshka(self.config.matryoshka_dims, self.config.matryoshka_weights)
        with self.scope():
            strategy = self.config.strategy
            if strategy is not None and compat.optimizer_strategy(optimizer) not in (None, strategy):
                optimizer = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
            trainer.compile(optimizer=self.clipped(optimizer), **kwargs)

    @staticmethod
    def _backup(callbacks):
        for cb in callbacks:
            if isinstance(cb, keras.callbacks.BackupAndRestore):
                if cb.save_freq != "epoch":
                    raise ValueError(
                        "BackupAndRestore must use save_freq='epoch' with the fit_* "
                        "functions (their epochs are `eval_every` steps long); "
                        f"received save_freq={cb.save_freq!r}."
                    )
                return cb
        return None

    def fit(self, trainer, make_dataset, plan, steps=None, dev_pairs="run", patience=None,
            stage=None, callbacks=(), keep_best=True, selection=None, run_callbacks=None,
            dev_retrieval=True, retrieval_score=None):
        """Train `trainer` for exactly `steps` optimizer steps with Keras `fit`.

        Args:
            trainer: a compiled `BaseTrainer`.
            make_dataset: callable `start_step -> tf.data.Dataset`.
            plan: `RunPlan`. Its steps (by default) and its pooling (for
                the dev evaluation).
            steps: int or None. Defaults to the plan's `steps`.
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
            run_callbacks: list or None. The caller's callbacks for this
                stage (e.g. a stage with a backup folder of its own);
                defaults to the run's `callbacks`.
            dev_retrieval: bool. Score the run's retrieval dev set
                (`dev_retrieval`, if any) in this stage. With
                `dev_select="retrieval"` it chooses the kept checkpoint
                (with `patience`) and the `dev` selection only records its
                scores; otherwise it is recorded only. Defaults to `True`.
            retrieval_score: callable `(name, candidate) -> float` or None.
                nDCG@10 of a candidate that is not an encoder (see
                `BeirDevEvaluation`'s `score`).

        Returns:
            The `dev` selection (`STSDevEvaluation`, or the recipe's
            `selection`), or None without a dev set.
        """
        steps = validation.positive_int(plan.steps if steps is None else steps, "steps")
        dev_pairs = self.config.dev_pairs if dev_pairs == "run" else dev_pairs
        steps_per_epoch = min(self.config.eval_every, steps)
        epochs = math.ceil(steps / steps_per_epoch)
        run_callbacks = list(self.config.callbacks if run_callbacks is None else run_callbacks)
        backup = self._backup(run_callbacks)
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
                dev_pairs, every=steps_per_epoch, pooling=plan.pooling, patience=patience,
                restore_best=keep_best,
            )
        retrieval = None
        if dev_retrieval and self.config.dev_retrieval_data is not None:
            retrieval = BeirDevEvaluation(
                self.config.dev_retrieval_data, pooling=plan.pooling, score=retrieval_score,
                restore_best=False,
            )
            if self.config.dev_select == "retrieval":
                # Retrieval chooses; the `dev` selection records its scores only.
                retrieval.restore_best, retrieval.patience = keep_best, patience
                if selection is not None:
                    selection.restore_best, selection.patience = False, None
        # The choosing selection runs last, so the other's last evaluation
        # sees the trained weights before the best ones are restored.
        dev_callbacks = [c for c in (selection, retrieval) if c is not None]
        if retrieval is not None and self.config.dev_select != "retrieval":
            dev_callbacks.reverse()
        for dev_callback in dev_callbacks:
            dev_callback.every = steps_per_epoch
            dev_callback.resume_step = start_step
            dev_callback.state_dir = None if backup is None else os.fspath(backup.backup_dir)
            cbs.append(dev_callback)
        cbs.append(StopAtStep(steps))
        cbs.extend(callbacks)
        cbs.extend(run_callbacks)
        with accounting(self.config.max_skipped) as rows:
            dataset = without_autotuner(make_dataset(start_step))
        cbs.insert(0, SkippedRowsCheck(rows))
        self._train(trainer, dataset, rows, epochs=epochs, steps_per_epoch=steps_per_epoch,
                    callbacks=cbs)
        done = int(trainer.optimizer.iterations.numpy())
        stage_report = {"stage": stage, "steps": steps, "steps_trained": done,
                        "loss_history": losses.history}
        if rows.counters:
            stage_report["rows"] = rows.report(done, self.config.batch_size)
        if guard.stopped_at is not None:
            stage_report["stopped"] = f"non-finite loss at step {guard.stopped_at}"
        elif done < steps:
            stage_report["stopped"] = f"no dev improvement (patience {patience}) at step {done}"
        if dev_callbacks:
            # The choosing selection's summary (the last one), with the other's beside it.
            stage_report["selection"] = dev_callbacks[-1].summary()
            if len(dev_callbacks) > 1:
                stage_report["selection"]["also_scored"] = dev_callbacks[0].summary()
        self._stages.append(stage_report)
        return selection

    def _train(self, trainer, dataset, rows, **fit_arguments):
        """`trainer.fit(dataset, ...)`, then the streams' row counts checked.

        An error reading a streamed source is one line naming it (see
        `keras_sentemb.data.read_errors`); a source that skipped more than
        `max_skipped` of its rows, or data that ran out before the last
        step, is a `DataError` raised here, before anything is saved.
        """
        where = rows.where()
        guard = reading(where) if rows.counters else contextlib.nullcontext()
        with guard, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            trainer.fit(dataset, verbose=self.config.verbose, shuffle=False,  # shuffled in tf.data
                        **fit_arguments)
        ran_out = False
        for warning in caught:
            if "ran out of data" in str(warning.message):
                ran_out = True
            else:
                warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                       warning.lineno)
        rows.check(final=True)
        if ran_out:
            done = int(trainer.optimizer.iterations.numpy())
            raise DataError(f"The training data ({where}) ran out after {done} step(s); give "
                            "more data or fewer --steps.")

    def record_selection(self, summary, stage=None):
        """Record a dev selection made without `fit` (among fitted candidates).

        Args:
            summary: dict in `DevSelection.summary()`'s layout (`monitor`,
                `kept`, `kept_score`, `history`, ...).
            stage: str or None. Name of the stage.
        """
        self._stages.append({"stage": stage, "steps": 0, "steps_trained": 0,
                             "selection": summary})

    def train(self, trainer, optimizer, make_dataset, plan, extras=None, **fit_options):
        """`compile`, `fit` and `finish` in one step: the kept encoder, saved and reported.

        For a method of one training stage; `fit_options` go to `fit`
        (e.g. `patience`), `extras` to `finish`.
        """
        self.compile(trainer, optimizer)
        self.fit(trainer, make_dataset, plan, **fit_options)
        return self.finish(trainer.encoder, plan, extras=extras)

    # ---------------------------------------------------------------- finish
    def finish(self, encoder, plan, extras=None):
        """Set the kept encoder's pooling (the plan's), attach the report, save; return it.

        An encoder trained in bfloat16 comes back as a float32 encoder
        (its float32 weights, a float32 policy): the one trained in place
        computes in float32 again, a copy is cloned back.
        """
        self.restore_precision()
        backbone = getattr(encoder, "backbone", None)  # a StaticEncoder has none
        if (backbone is not None and backbone.dtype_policy.name != "float32"
                and self.config.precision != "float32"):
            encoder = encoder.clone(name=encoder.name, dtype="float32")
        encoder.pooling = plan.pooling
        report = self.report
        last = self._stages[-1] if self._stages else {}
        report.steps = sum(s["steps"] for s in self._stages)
        report.steps_trained = sum(s["steps_trained"] for s in self._stages)
        report.selection = last.get("selection")
        report.loss_history = last.get("loss_history", [])
        report.stopped = next((s["stopped"] for s in self._stages if s.get("stopped")), None)
        for stage in self._stages:
            if stage.get("rows"):
                report.data.setdefault("rows", {}).update(stage["rows"])
        if len(self._stages) > 1:
            report.extras["stages"] = self._stages
        report.extras.update(_jsonable(extras or {}))
        report.seconds = round(time.time() - self._start, 1)
        report.versions = library_versions()
        encoder.training_report = report
        if self.config.output is not None:
            encoder.save(self.config.output)
            logger.info("%s: saved the encoder (pooling %s) to %s",
                        self.method, encoder.pooling, self.config.output)
        return encoder
