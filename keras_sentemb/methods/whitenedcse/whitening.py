"""Shuffled group whitening: WhitenedCSE's training-time transform of a batch of vectors."""

import keras
import tensorflow as tf


def group_whitening(vectors, permutation, group_size, epsilon=1e-5):
    """ZCA-whitens groups of channels of `vectors` over the batch.

    The channels are put in `permutation`'s order, cut into groups of
    `group_size` neighbours, and each group is centred over the batch and
    multiplied by `U diag((s + epsilon) ** -0.5) U^T`, where `U diag(s) U^T`
    is the group's covariance (divided by the batch size). The channels
    then go back to their places. The whitening matrices are constants of
    the step (no gradient flows through the covariance), as in the official
    code, which builds them from a detached copy of the covariance; the
    gradient flows through the centring and the product.

    Args:
        vectors: float `[n, d]`, `d` a multiple of `group_size`.
        permutation: int `[d]`. The channel order that forms the groups.
        group_size: int.
        epsilon: float. Added to each eigenvalue.

    Returns:
        float32 `[n, d]`: the whitened vectors, channels in their own order.
    """
    x = tf.cast(vectors, "float32")
    n = tf.shape(x)[0]
    d = x.shape[-1]
    groups = d // group_size
    grouped = tf.reshape(tf.gather(x, permutation, axis=1), [n, groups, group_size])
    centred = tf.transpose(grouped - tf.reduce_mean(grouped, axis=0, keepdims=True), [1, 0, 2])
    covariance = tf.matmul(centred, centred, transpose_a=True) / tf.cast(n, "float32")
    eigenvalues, eigenvectors = tf.linalg.eigh(tf.stop_gradient(covariance))
    scale = tf.math.rsqrt(tf.maximum(eigenvalues, 0.0) + epsilon)
    whitening = tf.matmul(eigenvectors * scale[:, None, :], eigenvectors, transpose_b=True)
    whitened = tf.matmul(centred, whitening)  # [groups, n, group_size]
    flat = tf.reshape(tf.transpose(whitened, [1, 0, 2]), [n, d])
    return tf.gather(flat, tf.argsort(permutation), axis=1)


@keras.saving.register_keras_serializable(package="keras_sentemb")
class ShuffledGroupWhitening(keras.layers.Layer):
    """Group whitening over the batch, the channels shuffled anew at every call (training only).

    In training each call draws a permutation of the channels from the
    layer's `SeedGenerator` (so each view of a step is grouped differently,
    and a resumed run draws what the uninterrupted one drew), then applies
    `group_whitening`. Outside training the vectors pass unchanged: the
    whitening shapes the contrastive task, the kept encoder has none.

    Args:
        group_size: int. Channels per group; the input width must be a
            multiple of it.
        shuffle: bool. Draw a permutation per call; False groups
            neighbouring channels.
        epsilon: float. Added to each eigenvalue of a group's covariance.
        seed: int or None. The `SeedGenerator`'s seed.
    """

    def __init__(self, group_size=6, shuffle=True, epsilon=1e-5, seed=None, **kwargs):
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self.group_size = int(group_size)
        self.shuffle = bool(shuffle)
        self.epsilon = float(epsilon)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def build(self, input_shape):
        width = input_shape[-1]
        if width is not None and width % self.group_size:
            raise ValueError(
                f"WhitenedCSE's group_size ({self.group_size}) must divide the sentence "
                f"vector's width ({width}); choose a divisor of {width}.")
        super().build(input_shape)

    def permutation(self, width):
        """A random permutation of `range(width)` from the layer's generator (or the identity)."""
        if not self.shuffle:
            return tf.range(width)
        keys = keras.random.uniform([width], seed=self.seed_generator)
        return tf.argsort(keys)

    def call(self, vectors, training=None):
        if not training:
            return vectors
        return group_whitening(vectors, self.permutation(vectors.shape[-1]), self.group_size,
                               self.epsilon)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(group_size=self.group_size, shuffle=self.shuffle, epsilon=self.epsilon,
                      seed=self.seed)
        return config
