"""Classification losses on sentence vectors (SBERT's NLI objective, task heads)."""

import tensorflow as tf

from keras_sentemb.losses import _utils


def pair_features(u, v):
    """SBERT's classifier input `[u, v, |u - v|]` of two sentence vectors.

    Args:
        u: float tensor `[B, D]`.
        v: float tensor `[B, D]`.

    Returns:
        float32 tensor `[B, 3 * D]`.

    References:
        - [Reimers & Gurevych, 2019. Sentence-BERT](https://arxiv.org/abs/1908.10084)
    """
    u = _utils.as_embeddings(u, "u")
    v = _utils.as_embeddings(v, "v")
    _utils.check_same_shape(u, v, "u", "v")
    return tf.concat([u, v, tf.abs(u - v)], axis=-1)


def softmax_classification_loss(logits, labels):
    """Mean softmax cross-entropy and accuracy of class logits.

    Args:
        logits: float tensor `[B, C]`.
        labels: int tensor `[B]` of class ids.

    Returns:
        `(loss, accuracy)`, float32 scalars.

    Examples:

    >>> loss, acc = softmax_classification_loss([[0.0, 0.0], [2.0, 0.0]], [0, 1])
    >>> round(float(loss), 4), float(acc)  # (log 2 + log(1 + e^2)) / 2; one hit
    (1.41, 0.5)
    """
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(tf.reshape(labels, [-1]), tf.int32)
    loss = tf.reduce_mean(_utils.cross_entropy(labels, logits))
    hits = tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels)
    return loss, tf.reduce_mean(tf.cast(hits, tf.float32))


def binary_classification_loss(logits, labels):
    """Mean sigmoid cross-entropy of one logit per example.

    Args:
        logits: float tensor `[B]`.
        labels: float tensor `[B]` in `{0, 1}` (or soft labels in `[0, 1]`).

    Returns:
        float32 scalar.

    Examples:

    >>> round(float(binary_classification_loss([0.0, 3.0], [1.0, 1.0])), 4)
    0.3709
    """
    logits = tf.cast(tf.reshape(logits, [-1]), tf.float32)
    labels = tf.cast(tf.reshape(labels, [-1]), tf.float32)
    return tf.reduce_mean(
        tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
    )
