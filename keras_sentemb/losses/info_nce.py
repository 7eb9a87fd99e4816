"""InfoNCE with in-batch negatives (SimCSE / MultipleNegativesRankingLoss)."""

import tensorflow as tf

from keras_sentemb.losses import _utils
from keras_sentemb.losses.distributed import gather_with_offset
from keras_sentemb.losses.similarity import similarity_matrix
from keras_sentemb.losses.similarity import validate_similarity


def info_nce_loss(
    anchors,
    positives,
    hard_negatives=None,
    temperature=0.05,
    hard_negative_weight=0.0,
    similarity="cosine",
    symmetric=False,
    gather=True,
    reduction="mean",
    extra_candidates=None,
    label_offset=None,
):
    """InfoNCE loss with in-batch negatives (SimCSE, MultipleNegativesRankingLoss).

    Each anchor must pick out its own positive among the candidates: all
    positives of the (global) batch, followed, when `hard_negatives` is given,
    by all hard negatives of the batch. With `B` the global batch size, the
    logits of anchor `i` are `sim(anchor_i, candidate_j) / temperature` over
    `B` (or `2 * B`) candidates and the loss is the softmax cross-entropy with
    the label `replica_offset + i` (the row of anchor `i`'s positive). This is
    the unsupervised / supervised SimCSE objective and sentence-transformers'
    `MultipleNegativesRankingLoss` with `scale = 1 / temperature`.

    `hard_negative_weight` is SimCSE's additive weight on the hard negatives:
    it is added to the (already temperature-scaled) logit of anchor `i`'s *own*
    hard negative only, i.e. column `B + replica_offset + i`; all other logits
    are unchanged. It requires `hard_negatives`.

    `extra_candidates` (e.g. a memory queue of earlier positives, MoCo-style)
    are appended after all other candidates as further negatives of every
    anchor; they are not gathered (every replica holds the same queue).

    With `symmetric=True` the column direction is added as in CLIP: each
    positive must also pick out its anchor among all anchors of the batch
    (hard negatives only take part in the anchor-to-candidate direction), and
    the per-example loss is the mean of both directions.

    Under a `tf.distribute` strategy with `gather=True`, candidates are
    gathered from every replica (with gradients), so every replica's anchors
    see the global batch; the returned loss is the mean over the *local*
    anchors. See `keras_sentemb.losses.distributed` for how trainers must scale
    it (`loss / num_replicas_in_sync`, gradients summed across replicas).

    Logits and the loss are computed in float32 whatever the input dtype.

    Args:
        anchors: float tensor of shape `[b, d]`. Anchor embeddings (e.g. the
            first dropout view in unsupervised SimCSE, the premise in
            supervised SimCSE, the query in retrieval).
        positives: float tensor of shape `[b, d]`. Row `i` is anchor `i`'s
            positive; it is a negative for every other anchor.
        hard_negatives: optional float tensor of shape `[b, d]`. Row `i` is
            anchor `i`'s hard negative (e.g. the contradiction in supervised
            SimCSE); every row is a negative for every anchor. Defaults to
            `None`.
        temperature: positive float (or float tensor, e.g. a learnable
            temperature). Divides the similarities. Defaults to `0.05`
            (SimCSE).
        hard_negative_weight: float. SimCSE's `hard_negative_weight`, added to
            each anchor's logit for its own hard negative. Defaults to `0.0`.
        similarity: str. `"cosine"` or `"dot"`. Defaults to `"cosine"`.
        symmetric: bool. Also add the positive-to-anchor direction and average
            the two. Defaults to `False`.
        gather: bool. Gather candidates across replicas under a
            `tf.distribute` strategy. Defaults to `True`.
        reduction: str. `"mean"` over local anchors, `"sum"`, or `"none"`
            (per-anchor losses of shape `[b]`). Defaults to `"mean"`.
        extra_candidates: optional float tensor `[k, d]`. Negatives shared by
            every anchor (a memory queue). Defaults to `None`.
        label_offset: optional int scalar tensor. With `gather=False` and
            `positives` already gathered across replicas (e.g. by
            `gather_with_offset`), the row of local anchor 0's positive.
            Defaults to `None` (0).

    Returns:
        A float32 scalar (or a `[b]` vector for `reduction="none"`).

    Examples:

    >>> anchors = tf.random.normal([4, 8])
    >>> positives = anchors + 0.1 * tf.random.normal([4, 8])
    >>> loss = info_nce_loss(anchors, positives, temperature=0.05)
    >>> loss.shape
    TensorShape([])

    References:
        - [Gao et al., 2021. SimCSE: Simple Contrastive Learning of Sentence
          Embeddings](https://arxiv.org/abs/2104.08821)
        - [Henderson et al., 2017. Efficient Natural Language Response
          Suggestion for Smart Reply](https://arxiv.org/abs/1705.00652)
        - [van den Oord et al., 2018. Representation Learning with Contrastive
          Predictive Coding](https://arxiv.org/abs/1807.03748)
    """
    validate_similarity(similarity)
    _utils.validate_reduction(reduction)
    scale = _utils.inverse_temperature(temperature)
    if hard_negatives is None and not _is_zero(hard_negative_weight):
        raise ValueError(
            "`hard_negative_weight` only applies to hard negatives, but "
            "`hard_negatives` is None. Received: "
            f"hard_negative_weight={hard_negative_weight!r}"
        )
    per_example = info_nce_per_example(
        anchors,
        positives,
        hard_negatives=hard_negatives,
        scale=scale,
        hard_negative_weight=hard_negative_weight,
        similarity=similarity,
        symmetric=symmetric,
        gather=gather,
        extra_candidates=extra_candidates,
        label_offset=label_offset,
    )
    return _utils.reduce_losses(per_example, reduction)


def _is_zero(value):
    return _utils.is_python_number(value) and float(value) == 0.0


def info_nce_per_example(
    anchors,
    positives,
    hard_negatives=None,
    scale=20.0,
    hard_negative_weight=0.0,
    similarity="cosine",
    symmetric=False,
    gather=True,
    extra_candidates=None,
    label_offset=None,
):
    """Per-anchor InfoNCE losses with logits `similarity * scale`.

    The building block of `info_nce_loss` and
    `contrastive_tension_in_batch_loss`; see `info_nce_loss` for the meaning
    of the arguments. `scale` is the multiplier of the similarities
    (`1 / temperature`), a float or float32 tensor, not validated here.

    Returns:
        A float32 tensor of shape `[b]`.
    """
    anchors = _utils.as_embeddings(anchors, "anchors")
    positives = _utils.as_embeddings(positives, "positives")
    if label_offset is None:
        _utils.check_same_shape(anchors, positives, "anchors", "positives")
    elif gather or symmetric or hard_negatives is not None:
        raise ValueError(
            "`label_offset` is for positives gathered beforehand: use it with "
            "gather=False, symmetric=False and no hard_negatives."
        )
    if hard_negatives is not None:
        hard_negatives = _utils.as_embeddings(hard_negatives, "hard_negatives")
        _utils.check_same_shape(
            anchors, hard_negatives, "anchors", "hard_negatives"
        )
    scale = tf.cast(scale, tf.float32)

    # One batched collective for everything that has to be gathered.
    to_gather = {"positives": positives}
    if hard_negatives is not None:
        to_gather["hard_negatives"] = hard_negatives
    if symmetric:
        to_gather["anchors"] = anchors
    local_batch_size = tf.shape(anchors)[0]
    if gather:
        gathered, offset = gather_with_offset(to_gather, local_batch_size)
    else:
        gathered = to_gather
        offset = tf.constant(0, tf.int32) if label_offset is None else tf.cast(label_offset, tf.int32)
    labels = offset + tf.range(local_batch_size, dtype=tf.int32)

    all_positives = gathered["positives"]
    candidates = all_positives
    if hard_negatives is not None:
        candidates = tf.concat(
            [all_positives, gathered["hard_negatives"]], axis=0
        )
    if extra_candidates is not None:
        extra = _utils.as_embeddings(extra_candidates, "extra_candidates")
        candidates = tf.concat([candidates, extra], axis=0)
    logits = similarity_matrix(anchors, candidates, similarity) * scale
    if hard_negatives is not None and not _is_zero(hard_negative_weight):
        # SimCSE: the weight goes to each anchor's own hard negative only.
        global_batch_size = tf.shape(all_positives)[0]
        own_negative = tf.one_hot(
            global_batch_size + labels,
            depth=tf.shape(logits)[1],
            dtype=tf.float32,
        )
        logits = logits + own_negative * tf.cast(
            hard_negative_weight, tf.float32
        )
    per_example = _utils.cross_entropy(labels, logits)

    if symmetric:
        column_logits = (
            similarity_matrix(positives, gathered["anchors"], similarity)
            * scale
        )
        per_example = 0.5 * (
            per_example + _utils.cross_entropy(labels, column_logits)
        )
    return per_example
