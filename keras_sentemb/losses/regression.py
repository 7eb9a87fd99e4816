"""Cosine-similarity regression (sentence-transformers' `CosineSimilarityLoss`)."""

import tensorflow as tf

from keras_sentemb.losses import _utils
from keras_sentemb.losses.similarity import l2_normalize


def cosine_mse_loss(u, v, targets, reduction="mean"):
    """Mean squared error between `cos(u_i, v_i)` and `targets_i`.

    The objective of STS regression (SBERT's `CosineSimilarityLoss`) and of
    Contrastive Tension's model-specific labels (section 5.2), and the
    similarity head of the multitask model.

    Args:
        u: float tensor `[B, D]`.
        v: float tensor `[B, D]`.
        targets: float tensor `[B]`, e.g. gold scores mapped to `[0, 1]`.
        reduction: str. `"mean"`, `"sum"` or `"none"`. Defaults to `"mean"`.

    Returns:
        float32 scalar `mean_i (cos(u_i, v_i) - targets_i) ** 2` (or `[B]`).

    Examples:

    >>> u = tf.constant([[1.0, 0.0], [1.0, 1.0]])
    >>> v = tf.constant([[0.0, 2.0], [2.0, 2.0]])
    >>> float(cosine_mse_loss(u, v, [0.5, 1.0]))  # ((0 - .5)^2 + 0) / 2
    0.125
    """
    _utils.validate_reduction(reduction)
    u = l2_normalize(_utils.as_embeddings(u, "u"))
    v = l2_normalize(_utils.as_embeddings(v, "v"))
    _utils.check_same_shape(u, v, "u", "v")
    cos = tf.reduce_sum(u * v, axis=-1)
    per_example = tf.square(cos - tf.cast(tf.reshape(targets, [-1]), tf.float32))
    return _utils.reduce_losses(per_example, reduction)
