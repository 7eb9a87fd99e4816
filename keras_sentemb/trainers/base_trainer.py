"""`BaseTrainer`: the Keras train_step template shared by every method."""

import keras
import tensorflow as tf


class BaseTrainer(keras.Model):
    """Base class of the method trainers: loss in, guarded update out.

    Subclasses implement `compute_contrastive_loss(data, training)` returning
    a float32 scalar (the loss of this replica's examples, averaged over them)
    and, optionally, a dict of extra scalar metrics. `train_step` follows
    Keras' TensorFlow template: compute the loss, `optimizer.scale_loss`,
    gradients, apply, update metrics. Under a `tf.distribute` strategy the
    per-replica loss is divided by the number of replicas before the
    gradients are taken, because the optimizer sums gradients across
    replicas; the in-batch losses gather candidates across replicas (see
    `keras_sentemb.losses.distributed`), so the result equals one device with
    the global batch.

    A step whose loss or gradients are not finite applies zero gradients
    (the weights stay the last finite ones) and reports `nonfinite = 1`; the
    `NonFiniteGuard` callback then stops training.

    Args:
        encoder: `SentenceEncoder`. The encoder kept for use after training.
    """

    def __init__(self, encoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.nonfinite_tracker = keras.metrics.Sum(name="nonfinite")
        self.built = True

    def compile(self, *args, **kwargs):
        """Keras `compile`, with `jit_compile=False` and the optimizer built now.

        Dynamic shapes (every batch is padded to its own length) make XLA
        recompile per shape, so it is off by default. The optimizer's slots are
        created here, outside any replica context: built lazily inside the
        first replica's trace under `MirroredStrategy`, they shift the order in
        which the replicas create collectives and the all-gathers of in-batch
        losses then meet mismatched all-reduces.
        """
        kwargs.setdefault("jit_compile", False)
        super().compile(*args, **kwargs)
        if self.optimizer is not None and not self.optimizer.built:
            self.optimizer.build(self.trainable_variables)

    # Subclasses override these.
    def compute_contrastive_loss(self, data, training=True):
        raise NotImplementedError

    def candidate_encoders(self):
        """Encoders that dev evaluation may choose among (name -> encoder)."""
        return {"encoder": self.encoder}

    def select_encoder(self, name):
        """Make candidate `name` the kept `encoder` (after dev selection)."""
        self.encoder = self.candidate_encoders()[name]

    @property
    def metrics(self):
        return [self.loss_tracker, self.nonfinite_tracker] + self.extra_metrics()

    def extra_metrics(self):
        return []

    def _split_loss(self, out):
        if isinstance(out, tuple):
            return out[0], out[1]
        return out, {}

    def train_step(self, data):
        variables = self.trainable_variables
        with tf.GradientTape() as tape:
            loss, extras = self._split_loss(
                self.compute_contrastive_loss(data, training=True)
            )
            loss = tf.cast(loss, "float32")
            replicas = tf.distribute.get_strategy().num_replicas_in_sync
            scaled = self.optimizer.scale_loss(loss / replicas)
        grads = tape.gradient(scaled, variables)
        finite = tf.math.is_finite(loss)
        for g in grads:
            if g is not None:
                finite = tf.logical_and(finite, tf.reduce_all(tf.math.is_finite(g)))
        grads = [
            None if g is None else tf.where(finite, g, tf.zeros_like(g)) for g in grads
        ]
        self.optimizer.apply_gradients(
            [(g, v) for g, v in zip(grads, variables) if g is not None]
        )
        self.loss_tracker.update_state(tf.where(finite, loss, 0.0))
        self.nonfinite_tracker.update_state(1.0 - tf.cast(finite, "float32"))
        for metric in self.extra_metrics():
            if metric.name in extras:
                metric.update_state(extras[metric.name])
        return {m.name: m.result() for m in self.metrics}

    def test_step(self, data):
        loss, extras = self._split_loss(
            self.compute_contrastive_loss(data, training=False)
        )
        self.loss_tracker.update_state(loss)
        for metric in self.extra_metrics():
            if metric.name in extras:
                metric.update_state(extras[metric.name])
        return {m.name: m.result() for m in self.metrics}
