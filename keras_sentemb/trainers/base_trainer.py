"""`BaseTrainer`: the Keras train_step template shared by every method."""

import keras
import tensorflow as tf

from keras_sentemb import compat
from keras_sentemb.losses.distributed import all_replicas_agree
from keras_sentemb.models.logit_scale import LogitScale

# Counter values reserved per step for each SeedGenerator (draws within a step).
SEED_STRIDE = 1 << 20


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

    Args:
        optimizer: a built Keras optimizer.
        grads_and_vars: list of `(gradient, variable)` pairs.
        finite: boolean scalar tensor.
    """

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
                finite = tf.logical_and(finite, tf.reduce_all(tf.math.is_finite(g)))
    return all_replicas_agree(finite)  # one replica's NaN skips the step everywhere


class BaseTrainer(keras.Model):
    """Base class of the method trainers: loss in, guarded update out.

    Subclasses implement `compute_contrastive_loss(data, training)`, which
    returns the float32 loss of this replica's examples (averaged over
    them), or `(loss, metrics)` with a dict of extra scalar metrics, or
    `(loss, metrics, aux)` where `aux` is handed to `after_update(aux,
    finite)` once the weights are updated (the parallel trainer enqueues
    its keys there). `train_step` follows Keras' TensorFlow template:
    compute the loss, `optimizer.scale_loss`, gradients, apply, update
    metrics. Under a `tf.distribute` strategy the per-replica loss is
    divided by the number of replicas before the gradients are taken,
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

    `candidates()` names the encoders a dev selection may choose among
    (CT: both towers) and `select(name)` makes one of them the kept
    `encoder`. A trainer's `logit_scale` (a `LogitScale`) is excluded from
    weight decay at `compile`.

    Trainers are registered Keras objects: `get_config()` returns every
    constructor argument, the encoders serialized, and `from_config`
    rebuilds them.

    An encoder with a post-processing layer (whitening, a flow) is refused:
    those are fitted on the frozen encoder's vectors.

    Args:
        encoder: `SentenceEncoder`. The encoder kept for use after training.
    """

    # Constructor arguments holding a SentenceEncoder (serialized in get_config).
    encoder_arguments = ("encoder",)

    def __init__(self, encoder, **kwargs):
        layer = getattr(encoder, "postprocess", None)
        if layer is not None:
            raise ValueError(
                f"The encoder has a post-processing layer ({type(layer).__name__}, fitted on "
                "its frozen vectors); training the encoder would invalidate it. Train the "
                "encoder without it (encoder.postprocess = None, or the model it was fitted "
                "on) and fit the post-processing again afterwards."
            )
        super().__init__(**kwargs)
        self.encoder = encoder
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.nonfinite_tracker = keras.metrics.Sum(name="nonfinite")
        object.__setattr__(self, "_seed_states", None)
        self.built = True

    def compile(self, optimizer="rmsprop", **kwargs):
        """Keras `compile`, with `jit_compile=False` and the optimizer built now.

        Dynamic shapes (every batch is padded to its own length) make XLA
        recompile per shape, so it is off by default. `no_decay_variables()`
        (the learnable logit scale) are excluded from weight decay. The optimizer's slots are created here,
        outside any replica context: built lazily inside the first replica's
        trace under `MirroredStrategy`, they shift the order in which the
        replicas create collectives and the all-gathers of in-batch losses
        then meet mismatched all-reduces.
        """
        kwargs.setdefault("jit_compile", False)
        super().compile(optimizer=optimizer, **kwargs)
        optimizer = self.optimizer
        no_decay = self.no_decay_variables()
        if no_decay and hasattr(optimizer, "exclude_from_weight_decay") and not optimizer.built:
            optimizer.exclude_from_weight_decay(var_list=no_decay)
        if optimizer is not None and not optimizer.built:
            optimizer.build(self.trainable_variables)

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        """Skip Keras' symbolic build from a first, cross-replica-reduced batch.

        Under a strategy Keras 3 takes the first distributed batch, reduces it
        with `strategy.reduce("MEAN", ...)` and traces the model on it. A
        trainer needs none of that (its weights exist from `__init__`, its
        optimizer is built in `compile`, it has no compiled loss or metrics),
        and the reduction fails on nested dict batches under
        `MultiWorkerMirroredStrategy`. (Overrides a private Keras method; see
        `keras_sentemb.compat`.)
        """
        if self.optimizer is not None and not self.optimizer.built:
            with self.distribute_strategy.scope():
                self.optimizer.build(self.trainable_variables)

    # ------------------------------------------------- subclasses override
    def compute_contrastive_loss(self, data, training=True):
        raise NotImplementedError

    def after_update(self, aux, finite):
        """Called after the (possibly skipped) update with the loss's `aux`."""

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
    def _unpack(out):
        if not isinstance(out, tuple):
            return out, {}, None
        if len(out) == 2:
            return out[0], out[1], None
        return out

    def _reseed(self):
        """Make this step's random draws a function of (seed, step).

        Dropout masks, view masks and sampled layers come from Keras
        `SeedGenerator`s, whose counters `save_weights` does not save. Setting
        each counter from the optimizer's step before the step runs makes a
        run resumed by `BackupAndRestore` draw exactly what the uninterrupted
        run drew.
        """
        if self._seed_states is None:
            # Not tracked: they belong to the layers that own the generators.
            object.__setattr__(self, "_seed_states", compat.seed_generator_states(self))
        if not self._seed_states:
            return
        counter = tf.cast(self.optimizer.iterations, "int64") * SEED_STRIDE
        for state in self._seed_states:
            state.assign(tf.stack([tf.convert_to_tensor(state)[0], counter]))

    def train_step(self, data):
        self._reseed()
        variables = self.trainable_variables
        with tf.GradientTape() as tape:
            loss, extras, aux = self._unpack(
                self.compute_contrastive_loss(data, training=True)
            )
            loss = tf.cast(loss, "float32")
            replicas = tf.distribute.get_strategy().num_replicas_in_sync
            scaled = self.optimizer.scale_loss(loss / replicas)
        grads = tape.gradient(scaled, variables)
        finite = all_finite(
            loss, grads, isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
        )
        apply_if_finite(
            self.optimizer,
            [(g, v) for g, v in zip(grads, variables) if g is not None],
            finite,
        )
        self.after_update(aux, finite)
        return self._update_metrics(loss, extras, finite)

    def test_step(self, data):
        loss, extras, _ = self._unpack(
            self.compute_contrastive_loss(data, training=False)
        )
        return self._update_metrics(tf.cast(loss, "float32"), extras, tf.constant(True))

    def _update_metrics(self, loss, extras, finite):
        self.loss_tracker.update_state(tf.where(finite, loss, 0.0))
        self.nonfinite_tracker.update_state(1.0 - tf.cast(finite, "float32"))
        for metric in self.extra_metrics():
            if metric.name in extras:
                metric.update_state(extras[metric.name])
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

    # --------------------------------------------------------------- config
    def get_config(self):
        """The constructor arguments; subclasses add theirs to `super()`'s."""
        return {
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in cls.encoder_arguments:
            if config.get(key) is not None:
                config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)
