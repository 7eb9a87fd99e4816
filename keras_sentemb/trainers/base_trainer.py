"""`BaseTrainer`: the Keras train_step template shared by every method."""

import dataclasses

import keras
import tensorflow as tf

from keras_sentemb import compat
from keras_sentemb import validation
from keras_sentemb.losses.distributed import all_replicas_agree
from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.models.logit_scale import LogitScale
from keras_sentemb.trainers.grad_cache import CHUNK_STRIDE
from keras_sentemb.trainers.grad_cache import SEED_STRIDE
from keras_sentemb.trainers.grad_cache import GradCacheMixin
from keras_sentemb.trainers.matryoshka_training import MatryoshkaMixin
from keras_sentemb.trainers.optimizers import get
from keras_sentemb.trainers.trainer_config import TrainerConfig


def dense_gradients(grads):
    """Embedding gradients (`tf.IndexedSlices`) as dense tensors; others unchanged.

    A token embedding's gradient holds one row per occurrence of a token in
    the batch. Keras 3's Adam and RMSprop square such a gradient slice by
    slice (`ops.square` is applied before duplicate rows are summed), so a
    token that occurs k times gets `sum(g_i^2)` instead of `(sum g_i)^2` in
    its second moment: up to sqrt(k) times larger steps for [CLS], [SEP] and
    frequent words. Dense gradients give the usual update (PyTorch's, whose
    embedding gradients are dense; the papers' code), under every strategy
    (an all-reduce of dense gradients sums rows; of sparse ones it would
    concatenate them again). The optimizers update every row of their
    moments anyway.
    """
    return [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]


def apply_if_finite(optimizer, grads_and_vars, finite):
    """`optimizer.apply_gradients(grads_and_vars)` if `finite`, else skip the update.

    A skipped step leaves the weights *and* the optimizer state (Adam's
    moments, weight decay) untouched and only advances `optimizer.iterations`,
    so the step count and learning-rate schedule stay aligned with the data.
    Zeroed gradients would not do: with momentum or decoupled weight decay a
    zero gradient still moves the weights.

    `finite` must be the same on every replica (see
    `keras_sentemb.losses.distributed.all_replicas_agree`). Under a strategy
    that synchronises through `merge_call` (MirroredStrategy) an optimizer
    update cannot run inside replica-context control flow, so the condition
    is evaluated in the cross-replica context and the update re-entered per
    replica, as Keras' `LossScaleOptimizer` does.

    Sparse gradients are made dense first (`dense_gradients`).

    Args:
        optimizer: a built Keras optimizer.
        grads_and_vars: list of `(gradient, variable)` pairs.
        finite: boolean scalar tensor.
    """
    grads, variables = zip(*grads_and_vars) if grads_and_vars else ((), ())
    grads_and_vars = list(zip(dense_gradients(grads), variables))

    def apply(pairs):
        optimizer.apply_gradients(pairs)

    def skip():
        optimizer.iterations.assign_add(1)

    ctx = tf.distribute.get_replica_context()
    if (
        ctx is not None
        and ctx.num_replicas_in_sync > 1
        and not compat.strategy_supports_no_merge_call()
    ):

        def merged(distribution, pairs, finite):
            first = distribution.experimental_local_results(finite)[0]
            tf.cond(
                first,
                lambda: distribution.extended.call_for_each_replica(apply, args=(pairs,)),
                skip,
            )

        ctx.merge_call(merged, args=(grads_and_vars, finite))
    else:
        tf.cond(finite, lambda: apply(grads_and_vars), skip)


def all_finite(loss, grads, loss_scaled):
    """Whether the loss and (without loss scaling) every gradient are finite."""
    finite = tf.math.is_finite(loss)
    if not loss_scaled:
        # With mixed precision an overflow of the scaled gradients is
        # routine: the LossScaleOptimizer skips that step and lowers its
        # scale, so only a non-finite loss counts there.
        for g in grads:
            if g is not None:
                # An embedding's gradient is IndexedSlices: check its rows
                # (converting it would build a dense vocabulary-sized tensor).
                values = g.values if isinstance(g, tf.IndexedSlices) else g
                finite = tf.logical_and(finite, tf.reduce_all(tf.math.is_finite(values)))
    return all_replicas_agree(finite)  # one replica's NaN skips the step everywhere


@compat.replace_symbolic_build
class BaseTrainer(TrainerConfig, GradCacheMixin, MatryoshkaMixin, keras.Model):
    """Base class of the method trainers: loss in, guarded update out.

    **The loss hook.** A subclass implements `compute_loss_terms(data,
    training)`, or its two halves `embed_batch(data, training)` (per-row
    embeddings, a nest of `[b, ...]` tensors) and
    `loss_from_embeddings(embeddings, data, training)`. Both loss hooks
    return a `LossOutput` (`keras_sentemb.losses.loss_output`), and nothing
    else: `loss` is the float32 loss of this replica's examples (averaged
    over them), `metrics` a dict of extra scalars (each updates the metric
    of that name in `extra_metrics()`), and `aux` anything `after_update(aux,
    finite)` needs once the weights are updated (the parallel trainer
    enqueues its keys there). Another return value is a `TypeError`.

    **The step.** `train_step` follows Keras' TensorFlow template, in hooks a
    trainer may override: `_reseed()` (the step's random draws, below),
    `step_variables()`, `loss_and_gradients(data, variables)` (the loss, then
    `optimizer.scale_loss(loss / replicas)` and its gradients),
    `apply_update(out, grads, variables)` (the guarded update),
    `after_update(out.aux, finite)` and `update_metrics(out, finite, healthy)`;
    `test_step` is `compute_loss_terms(data, training=False)` and
    `update_metrics`. Under a `tf.distribute` strategy the per-replica loss
    is divided by the number of replicas before the gradients are taken,
    because the optimizer sums gradients across replicas; the in-batch
    losses gather candidates across replicas (see
    `keras_sentemb.losses.distributed`), so the result equals one device
    with the global batch.

    A step whose loss or gradients are not finite (with a
    `LossScaleOptimizer`: whose loss is not finite; it handles gradient
    overflow itself) is skipped (`apply_if_finite`: weights and optimizer
    state stay the last finite ones, only the step count advances) and
    reports `nonfinite = 1`; the `NonFiniteGuard` callback then stops
    training. Under a strategy the replicas agree first, so a NaN in one
    replica's shard skips the step on all of them.

    **Seeding.** Dropout masks, view masks and sampled layers come from
    Keras `SeedGenerator`s, whose counters `save_weights` does not save.
    `_reseed()` sets every generator's state from the optimizer's step
    before the step runs (`seed_state`), so a run resumed by
    `BackupAndRestore` draws exactly what the uninterrupted run drew. Every
    trainer keeps each generator's own seed and sets its counter to `step *
    SEED_STRIDE` (plus a GradCache chunk's offset), except `MultitaskModel`,
    which derives the seeds from its `seed` argument (see its `seed_state`).

    `candidates()` names the encoders a dev selection may choose among
    (CT: both towers) and `select(name)` makes one of them the kept
    `encoder`. A trainer's `logit_scale` (a `LogitScale`) is excluded from
    weight decay at `compile`.

    Trainers are registered Keras objects: `get_config()` returns every
    constructor argument, the encoders serialized, and `from_config`
    rebuilds them.

    **The method's options.** A trainer sets `config_class` to its method's
    options dataclass (a `MethodConfig`) and takes an instance as `config`
    (the method's `train` passes its own): the trainer reads `self.config`,
    `get_config()` writes the options it keeps (`"config"`: those declared
    `option(..., trainer=True)`, the default) and `from_config` reads them
    back. Options may also be given one by one as keywords
    (`SimCSE(encoder, temperature=0.1)`, or a flat config written by an
    earlier version); they override `config`'s values. So an option is
    declared once, in the method's `config.py`, and reaches the trainer,
    its saved config and the `fit_*` signature from there.

    **GradCache** (`mini_batch_size`). A trainer whose loss is split into
    `embed_batch` and `loss_from_embeddings` can train a batch of any size
    in the memory of `mini_batch_size` rows (Gao et al., 2021; see
    `keras_sentemb.trainers.grad_cache`): the batch is embedded in chunks
    without gradients, the loss's gradient with respect to the embeddings is
    cached, and each chunk is embedded again, with the same random draws,
    to back-propagate it; the update equals the full-batch one.

    An encoder with a post-processing layer (whitening, a flow) is refused:
    those are fitted on the frozen encoder's vectors.

    Args:
        encoder: `SentenceEncoder`. The encoder kept for use after training.
        mini_batch_size: int or None. Rows embedded at once with GradCache;
            `None` embeds the whole batch at once (no GradCache). Defaults
            to `None`.
        config: the method's options (`config_class`): an instance, a dict
            of options, or None (the method's defaults). Only for a trainer
            that sets `config_class`. Defaults to `None`.
        **kwargs: Keras `Model` arguments (`name`), and, for a trainer that
            sets `config_class`, single options overriding `config`'s.

    Examples:

    ```python
    class AlignmentTrainer(BaseTrainer):
        def embed_batch(self, data, training=True):
            x = data["sentence"]
            return {"a": self.encoder.sentence_vectors(x, "mean", training=training),
                    "b": self.encoder.sentence_vectors(x, "mean", training=training)}

        def loss_from_embeddings(self, embeddings, data, training=True):
            gap = tf.reduce_sum(tf.square(embeddings["a"] - embeddings["b"]), axis=-1)
            return LossOutput(tf.reduce_mean(gap))
    ```

    References:
        - [Gao, Zhang, Han & Callan, 2021. Scaling Deep Contrastive Learning
          Batch Size under Memory Limited Setup](https://arxiv.org/abs/2101.06983)
    """
    # Constructor arguments holding a SentenceEncoder (serialized in get_config).
    encoder_arguments = ("encoder",)
    # The method's options dataclass (a `MethodConfig`), or None: the trainer takes none.
    config_class = None

    def __init__(self, encoder, mini_batch_size=None, config=None, **kwargs):
        config = self.method_config(config, kwargs)  # takes the options out of kwargs
        layer = getattr(encoder, "postprocess", None)
        if layer is not None:
            raise ValueError(
                f"The encoder has a post-processing layer ({type(layer).__name__}, fitted on "
                "its frozen vectors); training the encoder would invalidate it. Train the "
                "encoder without it (encoder.postprocess = None, or the model it was fitted "
                "on) and fit the post-processing again afterwards."
            )
        super().__init__(**kwargs)
        self.config = config
        self.encoder = encoder
        self.mini_batch_size = validation.optional_positive_int(
            mini_batch_size, "mini_batch_size"
        )
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.nonfinite_tracker = keras.metrics.Sum(name="nonfinite")
        self.matryoshka = None  # a MatryoshkaLoss (a plain object: nothing to track)
        self.built = True

    def compile(self, optimizer="rmsprop", **kwargs):
        """Keras `compile`, with `jit_compile=False` and the optimizer built now.

        An optimizer given by name is this toolkit's fused form where there is
        one (`keras_sentemb.trainers.optimizers.get`: `"rmsprop"`, `"adam"`,
        `"adamw"`).

        Dynamic shapes (every batch is padded to its own length) make XLA
        recompile per shape, so it is off by default. `no_decay_variables()`
        (the learnable logit scale) are excluded from weight decay. The optimizer's slots are created here,
        outside any replica context: built lazily inside the first replica's
        trace under `MirroredStrategy`, they shift the order in which the
        replicas create collectives and the all-gathers of in-batch losses
        then meet mismatched all-reduces.
        """
        kwargs.setdefault("jit_compile", False)
        if self.mini_batch_size is not None:
            reason = self.grad_cache_unsupported()
            if reason:
                raise ValueError(
                    f"mini_batch_size (GradCache) is not available here: {reason}. "
                    f"Received: mini_batch_size={self.mini_batch_size}."
                )
        if isinstance(optimizer, str):  # RMSprop / Adam / AdamW: their fused forms

            optimizer = get(optimizer)
        super().compile(optimizer=optimizer, **kwargs)
        optimizer = self.optimizer
        no_decay = self.no_decay_variables()
        if no_decay and hasattr(optimizer, "exclude_from_weight_decay") and not optimizer.built:
            optimizer.exclude_from_weight_decay(var_list=no_decay)
        if optimizer is not None and not optimizer.built:
            optimizer.build(self.trainable_variables)

    def build_before_fit(self):
        """Skip Keras' symbolic build from a first, cross-replica-reduced batch.

        Under a strategy Keras 3 takes the first distributed batch, reduces it
        with `strategy.reduce("MEAN", ...)` and traces the model on it. A
        trainer needs none of that (its weights exist from `__init__`, its
        optimizer is built in `compile`, it has no compiled loss or metrics),
        and the reduction fails on nested dict batches under
        `MultiWorkerMirroredStrategy`. Keras calls this instead of its own
        build (`compat.replace_symbolic_build`).
        """
        if self.optimizer is not None and not self.optimizer.built:
            with self.distribute_strategy.scope():
                self.optimizer.build(self.trainable_variables)

    # ------------------------------------------------- subclasses override
    def compute_loss_terms(self, data, training=True):
        """The loss of a batch, a `LossOutput`: `loss_from_embeddings(embed_batch(data))`.

        Trainers override either this or the two halves; GradCache and
        Matryoshka need the halves.
        """
        if not self._splits_loss():
            raise NotImplementedError(
                f"{type(self).__name__} implements neither compute_loss_terms nor "
                "embed_batch / loss_from_embeddings."
            )
        return self.embeddings_loss(self.embed_batch(data, training), data, training)

    def embeddings_loss(self, embeddings, data, training=True):
        """`loss_from_embeddings`, over nested prefixes when `set_matryoshka` was called."""
        if self.matryoshka is not None:
            return self.matryoshka(embeddings, data, training)
        return self.loss_from_embeddings(embeddings, data, training)

    def embed_batch(self, data, training=True):
        """Per-row embeddings of a batch: a nest of float32 `[b, ...]` tensors.

        Everything that depends on one example at a time (encoders, views,
        projection heads) happens here; nothing may mix rows.
        """
        raise NotImplementedError

    def loss_from_embeddings(self, embeddings, data, training=True):
        """The `LossOutput` of `embed_batch`'s output."""
        raise NotImplementedError

    def _splits_loss(self):
        cls = type(self)
        return (
            cls.embed_batch is not BaseTrainer.embed_batch
            and cls.loss_from_embeddings is not BaseTrainer.loss_from_embeddings
        )

    def grad_cache_unsupported(self):
        """Why `mini_batch_size` cannot be used with this trainer, or None."""
        if not self._splits_loss():
            return (
                f"{type(self).__name__} does not split its loss into embed_batch / "
                "loss_from_embeddings"
            )
        return None

    def after_update(self, aux, finite):
        """Called after the (possibly skipped) update with the loss's `aux`.

        Returns None, or a boolean scalar tensor: whether the work done here
        was finite too (a `False` counts the step in `nonfinite`).
        """

    def no_decay_variables(self):
        """Variables kept out of weight decay: the `logit_scale`, if any."""
        scale = getattr(self, "logit_scale", None)
        return [scale.log_scale] if isinstance(scale, LogitScale) else []

    def candidates(self):
        """Encoders that dev selection may choose among (name -> encoder)."""
        return {"encoder": self.encoder}

    def select(self, name):
        """Make candidate `name` the kept `encoder` (after dev selection)."""
        self.encoder = self.candidates()[name]

    def extra_metrics(self):
        return []

    # ---------------------------------------------------------------- steps
    @property
    def metrics(self):
        return [self.loss_tracker, self.nonfinite_tracker] + self.extra_metrics()

    @staticmethod
    def _checked_loss(out, hook):
        """`out` (a `LossOutput`, else a TypeError naming `hook`) with a float32 loss."""
        out = LossOutput.check(out, hook)
        return dataclasses.replace(out, loss=tf.cast(out.loss, "float32"))

    def _reseed(self, chunk=None):
        """Make this step's random draws a function of (seed, step[, chunk]).

        Sets the state of every Keras `SeedGenerator` of the model to
        `seed_state(index, state, step, chunk)` (see the class docstring).
        With `chunk` (a GradCache chunk index, int or int tensor) the
        counters start at that chunk's own range of the step, so both passes
        over a chunk draw the same masks.
        """
        # Read at trace time (once per traced step): the generators belong to
        # the layers that own them, so the list is not kept on the trainer.
        states = compat.seed_generator_states(self)
        if not states:
            return
        step = tf.cast(self.optimizer.iterations, "int64")
        for index, state in enumerate(states):
            state.assign(self.seed_state(index, state, step, chunk))

    def seed_state(self, index, state, step, chunk=None):
        """The `[seed, counter]` value of generator `index` at `step` (and `chunk`).

        The generator's own seed, and a counter of `step * SEED_STRIDE`, plus
        `(chunk + 1) * CHUNK_STRIDE` for a GradCache chunk.
        """
        del index
        counter = step * SEED_STRIDE
        if chunk is not None:
            counter += (tf.cast(chunk, "int64") + 1) * CHUNK_STRIDE
        return tf.stack([tf.convert_to_tensor(state)[0], counter])

    def step_variables(self):
        """The variables `loss_and_gradients` differentiates: the trainable ones."""
        return self.trainable_variables

    def loss_and_gradients(self, data, variables):
        """`(LossOutput, gradients)` of a batch.

        The gradients are those of `optimizer.scale_loss(loss / replicas)`
        with respect to `variables`; with `mini_batch_size` they come from
        `grad_cache_gradients`.
        """
        if self.mini_batch_size is not None:
            return self.grad_cache_gradients(data, variables)
        with tf.GradientTape() as tape:
            out = self._checked_loss(
                self.compute_loss_terms(data, training=True), "compute_loss_terms"
            )
            replicas = tf.distribute.get_strategy().num_replicas_in_sync
            scaled = self.optimizer.scale_loss(out.loss / replicas)
        return out, tape.gradient(scaled, variables)

    def apply_update(self, out, grads, variables):
        """Apply the gradients if the loss and gradients are finite; return that flag."""
        finite = all_finite(
            out.loss, grads, isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        )
        apply_if_finite(
            self.optimizer,
            [(g, v) for g, v in zip(grads, variables) if g is not None],
            finite,
        )
        return finite

    def train_step(self, data):
        self._reseed()
        variables = self.step_variables()
        out, grads = self.loss_and_gradients(data, variables)
        finite = self.apply_update(out, grads, variables)
        healthy = self.after_update(out.aux, finite)
        return self.update_metrics(out, finite, finite if healthy is None else healthy)

    def test_step(self, data):
        out = self._checked_loss(
            self.compute_loss_terms(data, training=False), "compute_loss_terms"
        )
        return self.update_metrics(out, tf.constant(True), tf.constant(True))

    def update_metrics(self, out, finite, healthy):
        """Update the metrics with a step's `LossOutput`; return the logs.

        `finite`: whether the update was applied (a skipped step logs a loss
        of 0); `healthy`: whether the whole step was finite (else it counts
        in `nonfinite`).
        """
        self.loss_tracker.update_state(tf.where(finite, out.loss, 0.0))
        self.nonfinite_tracker.update_state(1.0 - tf.cast(healthy, "float32"))
        for metric in self.extra_metrics():
            if metric.name in out.metrics:
                metric.update_state(out.metrics[metric.name])
        return self._metric_logs()

    def _metric_logs(self):
        """`{name: result}` of the metrics, as Keras' step functions return them.

        Under a multi-worker `MultiWorkerMirroredStrategy` Keras 3 reduces each
        per-replica log with `strategy.reduce("MEAN", v, axis=0)`, which fails
        on scalars ("Invalid reduction dimension 0 for input with 0
        dimensions", tensorflow/tensorflow#72388); there the results are
        returned as `[1]` vectors, which that reduction turns back into scalars.
        """
        logs = {m.name: m.result() for m in self.metrics}
        if compat.in_multi_worker_mode(self.distribute_strategy):
            logs = {k: tf.reshape(v, [1]) for k, v in logs.items()}
        return logs
