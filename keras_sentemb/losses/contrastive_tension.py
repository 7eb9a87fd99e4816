"""Contrastive Tension losses (K-negatives and in-batch negatives)."""

import math

import tensorflow as tf

from keras_sentemb.losses import _utils
from keras_sentemb.losses.info_nce import info_nce_per_example


def contrastive_tension_loss(reps_1, reps_2, labels, reduction="mean"):
    """Contrastive Tension loss with sampled negatives (the paper's CT).

    Two independent copies of the encoder embed the two sentences of each
    pair: `reps_1` from the first copy (the model that is kept), `reps_2` from
    the second. The logit of a pair is the raw dot product
    `dot(reps_1[i], reps_2[i])` (no normalization, no temperature) and the
    loss is the binary cross-entropy from logits with the pair's label: 1 for
    a positive pair (the same sentence twice), 0 for a negative pair (two
    different sentences; CT samples K = 7 negatives per positive).

    This is a pointwise loss: nothing is gathered across replicas.

    Note: sentence-transformers' `ContrastiveTensionLoss` *sums* over the
    batch (`BCEWithLogitsLoss(reduction="sum")`); pass `reduction="sum"` to
    reproduce its values. The default averages over the batch. Under a
    `tf.distribute` strategy the convention of
    `keras_sentemb.losses.distributed` (divide by the number of replicas)
    reproduces single-device training for `reduction="mean"`.

    Args:
        reps_1: float tensor of shape `[b, d]`. Embeddings of the first
            sentences from the first encoder copy.
        reps_2: float tensor of shape `[b, d]`. Embeddings of the second
            sentences from the second encoder copy.
        labels: tensor of shape `[b]` (or `[b, 1]`). 1 for positive pairs,
            0 for negative pairs (any numeric dtype; cast to float32).
        reduction: str. `"mean"` over the batch, `"sum"`, or `"none"` (shape
            `[b]`). Defaults to `"mean"`.

    Returns:
        A float32 scalar (or a `[b]` vector for `reduction="none"`).

    Examples:

    >>> reps_1 = tf.random.normal([8, 16])
    >>> reps_2 = tf.random.normal([8, 16])
    >>> labels = tf.constant([1, 0, 0, 0, 0, 0, 0, 0])
    >>> contrastive_tension_loss(reps_1, reps_2, labels).shape
    TensorShape([])

    References:
        - [Carlsson et al., 2021. Semantic Re-tuning with Contrastive
          Tension](https://openreview.net/forum?id=Ov_sMNau-PF)
    """
    _utils.validate_reduction(reduction)
    reps_1 = _utils.as_embeddings(reps_1, "reps_1")
    reps_2 = _utils.as_embeddings(reps_2, "reps_2")
    _utils.check_same_shape(reps_1, reps_2, "reps_1", "reps_2")
    labels = tf.convert_to_tensor(labels)
    if labels.shape.rank == 2 and labels.shape[-1] == 1:
        labels = tf.squeeze(labels, axis=-1)
    if labels.shape.rank is not None and labels.shape.rank != 1:
        raise ValueError(
            "`labels` must have shape `[batch_size]` with values in {0, 1}. "
            f"Received: labels.shape={labels.shape}"
        )
    if not labels.shape.is_compatible_with(reps_1.shape[:1]):
        raise ValueError(
            "`labels` must have one entry per pair. Received: "
            f"labels.shape={labels.shape}, reps_1.shape={reps_1.shape}"
        )
    labels = tf.cast(labels, tf.float32)
    logits = tf.reduce_sum(reps_1 * reps_2, axis=-1)
    per_example = tf.nn.sigmoid_cross_entropy_with_logits(
        labels=labels, logits=logits
    )
    return _utils.reduce_losses(per_example, reduction)


def contrastive_tension_in_batch_loss(
    reps_1,
    reps_2,
    logit_scale=math.log(20.0),
    gather=True,
    reduction="mean",
):
    """Contrastive Tension loss with in-batch negatives.

    Both encoder copies embed the *same* sentences: `reps_1[i]` and
    `reps_2[i]` are a positive pair, every other `reps_2[j]` is a negative
    for `reps_1[i]` and vice versa. Scores are
    `cos(reps_1[i], reps_2[j]) * exp(logit_scale)` and the loss is the mean of
    the row-wise and column-wise softmax cross-entropies,
    `(CE(scores) + CE(scores^T)) / 2`, as in sentence-transformers'
    `ContrastiveTensionLossInBatchNegatives` (whose default `scale=20` is
    `logit_scale=log(20)`). Pass a `tf.Variable` as `logit_scale` to learn it
    as sentence-transformers does.

    Under a `tf.distribute` strategy with `gather=True`, the other side is
    gathered from every replica (with gradients) in both directions; the
    returned loss is the mean over local pairs. See
    `keras_sentemb.losses.distributed` for how trainers must scale it.

    Args:
        reps_1: float tensor of shape `[b, d]`. Embeddings from the first
            encoder copy (the model that is kept).
        reps_2: float tensor of shape `[b, d]`. Embeddings of the same
            sentences from the second encoder copy.
        logit_scale: float or float tensor / variable. Log of the multiplier
            of the cosine similarities. Defaults to `log(20)`.
        gather: bool. Gather candidates across replicas under a
            `tf.distribute` strategy. Defaults to `True`.
        reduction: str. `"mean"` over local pairs, `"sum"`, or `"none"`
            (per-pair mean of both directions, shape `[b]`). Defaults to
            `"mean"`.

    Returns:
        A float32 scalar (or a `[b]` vector for `reduction="none"`).

    Examples:

    >>> reps_1 = tf.random.normal([4, 16])
    >>> reps_2 = reps_1 + 0.1 * tf.random.normal([4, 16])
    >>> contrastive_tension_in_batch_loss(reps_1, reps_2).shape
    TensorShape([])

    References:
        - [Carlsson et al., 2021. Semantic Re-tuning with Contrastive
          Tension](https://openreview.net/forum?id=Ov_sMNau-PF)
    """
    _utils.validate_reduction(reduction)
    if isinstance(logit_scale, bool) or (
        _utils.is_python_number(logit_scale)
        and not math.isfinite(float(logit_scale))
    ):
        raise ValueError(
            "`logit_scale` must be a finite number (the log of the scale). "
            f"Received: logit_scale={logit_scale!r}"
        )
    reps_1 = _utils.as_embeddings(reps_1, "reps_1")
    reps_2 = _utils.as_embeddings(reps_2, "reps_2")
    _utils.check_same_shape(reps_1, reps_2, "reps_1", "reps_2")
    scale = tf.exp(tf.cast(logit_scale, tf.float32))
    per_example = info_nce_per_example(
        reps_1,
        reps_2,
        scale=scale,
        similarity="cosine",
        symmetric=True,
        gather=gather,
    )
    return _utils.reduce_losses(per_example, reduction)
