"""The masked-language-model loss: cross-entropy over the masked positions only."""

import tensorflow as tf


def masked_token_loss(logits, labels, weights):
    """Mean cross-entropy of the masked tokens, and their top-1 accuracy.

    Args:
        logits: float tensor `[N, P, V]`: the vocabulary logits at the `P`
            masked positions of each of `N` sentences (computed in float32).
        labels: int tensor `[N, P]`: the original token ids there.
        weights: float tensor `[N, P]`: 1 for a real masked position, 0 for
            padding of the position list.

    Returns:
        `(loss, accuracy)`: float32 scalars, both averaged over the real
        masked positions (at least one counted, so an all-padding batch
        gives 0, not NaN).

    Examples:

    >>> logits = tf.math.log([[[0.5, 0.25, 0.25], [1.0, 1.0, 1.0]]])
    >>> loss, acc = masked_token_loss(logits, [[0, 2]], [[1.0, 0.0]])
    >>> round(float(loss), 4), float(acc)
    (0.6931, 1.0)
    """
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)
    weights = tf.cast(weights, tf.float32)
    per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    total = tf.maximum(tf.reduce_sum(weights), 1.0)
    hits = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
    return tf.reduce_sum(per_token * weights) / total, tf.reduce_sum(hits * weights) / total
