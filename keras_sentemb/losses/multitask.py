"""Losses of the multitask heads (sentiment, paraphrase, similarity), maskable.

Every function here takes an optional per-row `mask` (1 for a row that
counts, 0 for a placeholder row) and returns the mean over the rows that
count, `0` when none does (`masked_mean`). A multitask batch carries every
task in every step (a fixed structure, so one `train_step` trace serves all
schedules); a task that is not trained at that step has placeholder rows
with mask 0, and its loss is exactly 0 with exactly zero gradients.

Without a mask (or with a mask of ones) the values are those of
`softmax_classification_loss`, `binary_classification_loss` and
`cosine_mse_loss` on `scores / max_score`.
"""

import tensorflow as tf

from keras_sentemb.losses import _utils
from keras_sentemb.losses.regression import cosine_mse_loss


def _mask_like(mask, values):
    if mask is None:
        return tf.ones_like(values, tf.float32)
    return tf.cast(tf.reshape(mask, [-1]), tf.float32)


def masked_mean(values, mask=None):
    """Mean of `values` over the rows where `mask` is non-zero; 0 when none is.

    `sum_i mask_i * values_i / sum_i mask_i` with masked-out rows replaced
    by 0 first (so a NaN or inf in a placeholder row cannot leak into the
    result), and `0` (not NaN) for an empty batch or an all-zero mask.

    Args:
        values: float tensor `[B]` of per-row losses.
        mask: float or bool tensor `[B]` of row weights in `{0, 1}`, or None
            (every row counts). Defaults to `None`.

    Returns:
        float32 scalar.

    Examples:

    >>> float(masked_mean([1.0, 2.0, 6.0], [1.0, 0.0, 1.0]))  # (1 + 6) / 2
    3.5
    >>> float(masked_mean([4.0, float("nan")], [0.0, 0.0]))   # nothing counts
    0.0
    >>> float(masked_mean(tf.zeros([0])))                     # empty batch
    0.0
    """
    values = tf.cast(tf.reshape(values, [-1]), tf.float32)
    mask = _mask_like(mask, values)
    kept = tf.where(mask > 0, values, tf.zeros_like(values))
    return tf.math.divide_no_nan(tf.reduce_sum(kept * mask), tf.reduce_sum(mask))


def sentiment_classification_loss(logits, labels, mask=None):
    """Masked mean softmax cross-entropy and accuracy of class logits.

    The sentiment head's objective (SST, 5 classes).

    Args:
        logits: float tensor `[B, C]`.
        labels: int tensor `[B]` of class ids.
        mask: tensor `[B]` in `{0, 1}` or None. See `masked_mean`.

    Returns:
        `(loss, accuracy)`: float32 scalars over the rows that count.

    Examples:

    >>> loss, acc = sentiment_classification_loss(
    ...     [[0.0, 0.0], [2.0, 0.0], [9.0, 0.0]], [0, 1, 1], mask=[1, 1, 0])
    >>> round(float(loss), 4), float(acc)  # (log 2 + 2 + log(1 + e^-2)) / 2
    (1.41, 0.5)
    """
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(tf.reshape(labels, [-1]), tf.int32)
    per_row = _utils.cross_entropy(labels, logits)
    hits = tf.cast(
        tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32
    )
    return masked_mean(per_row, mask), masked_mean(hits, mask)


def paraphrase_classification_loss(logits, labels, mask=None):
    """Masked mean sigmoid cross-entropy of one paraphrase logit per pair.

    The paraphrase head's objective (Quora, label 1 = paraphrase).

    Args:
        logits: float tensor `[B]`.
        labels: float tensor `[B]` in `{0, 1}`.
        mask: tensor `[B]` in `{0, 1}` or None. See `masked_mean`.

    Returns:
        float32 scalar.

    Examples:

    >>> # (log 2 + log(1 + e^-3)) / 2; the third row does not count
    >>> round(float(paraphrase_classification_loss([0.0, 3.0, 5.0], [1, 1, 0], [1, 1, 0])), 4)
    0.3709
    """
    logits = tf.cast(tf.reshape(logits, [-1]), tf.float32)
    labels = tf.cast(tf.reshape(labels, [-1]), tf.float32)
    per_row = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
    return masked_mean(per_row, mask)


def similarity_regression_loss(u, v, scores, mask=None, max_score=5.0):
    """Masked mean squared error between `cos(u_i, v_i)` and `scores_i / max_score`.

    The similarity head's objective (STS, scores 0-5):
    sentence-transformers' `CosineSimilarityLoss` (`cosine_mse_loss`) on
    `scores / max_score`, averaged over the rows that count.

    Args:
        u: float tensor `[B, D]`.
        v: float tensor `[B, D]`.
        scores: float tensor `[B]`, gold scores in `[0, max_score]`.
        mask: tensor `[B]` in `{0, 1}` or None. See `masked_mean`.
        max_score: float. The top of the score scale. Defaults to `5.0`.

    Returns:
        float32 scalar.

    Examples:

    >>> u = tf.constant([[1.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    >>> v = tf.constant([[0.0, 2.0], [2.0, 2.0], [1.0, 0.0]])
    >>> # ((0 - 2.5 / 5)^2 + (1 - 5 / 5)^2) / 2; the third row does not count
    >>> float(similarity_regression_loss(u, v, [2.5, 5.0, 0.0], mask=[1, 1, 0]))
    0.125
    """
    _utils.validate_positive(max_score, "max_score")
    targets = tf.cast(tf.reshape(scores, [-1]), tf.float32) / float(max_score)
    per_row = cosine_mse_loss(u, v, targets, reduction="none")
    return masked_mean(per_row, mask)
