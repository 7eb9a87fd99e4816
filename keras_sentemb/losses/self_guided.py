"""Self-guided contrastive losses (Kim et al., 2021): SG, SG-OPT and ablations.

Every loss here compares `cls`, the (projected) last-layer [CLS] vectors
`c_i` of the tuned encoder BERT_T, with `views`, the (projected) pooled hidden
states `h_i` of the frozen encoder BERT_F. Similarities are cosine, logits
are `cos / temperature` in float32 (Kim et al. use `temperature = 0.01`).

- `sg_base_loss` (L_base, "SG"): NT-Xent over the `2b` vectors
  `{c_i} + {h_i}`; each is an anchor, its counterpart the positive, every
  other vector of the batch a negative.
- `sg_opt1_loss` (L_opt1): only the `c_i` are anchors; negatives `c_j` and
  `h_j` (`j != i`).
- `sg_opt2_loss` (L_opt2): only the `c_i` are anchors; negatives `h_j` only.
- `sg_opt3_loss` (L_opt3, "SG-OPT"): `views` holds every layer's view
  `h_{i,k}` ([b, l+1, d]); for each sentence `i` and view `k` the positive is
  `h_{i,k}` and the negatives are every view of every other sentence; the
  loss is averaged over the `b(l+1)` (anchor, view) terms.

Under a `tf.distribute` strategy with `gather=True` the candidates are
gathered across replicas (see `keras_sentemb.losses.distributed`) and the
returned value is the mean over this replica's local terms.

References:
    - [Kim, Yoo & Lee, 2021. Self-Guided Contrastive Learning for BERT
      Sentence Representations](https://arxiv.org/abs/2106.07345)
"""

import tensorflow as tf

from keras_sentemb.losses import _utils
from keras_sentemb.losses.distributed import gather_rows
from keras_sentemb.losses.info_nce import info_nce_loss
from keras_sentemb.losses.nt_xent import nt_xent_loss
from keras_sentemb.losses.similarity import cosine_similarity_matrix
from keras_sentemb.losses.similarity import l2_normalize

SG_LOSSES = ("base", "opt1", "opt2", "opt3")

# Subtracted from masked logits: exp() of the result is exactly 0 in float32.
_LARGE_NUM = 1e9


def sg_base_loss(cls, views, temperature=0.01, gather=True, reduction="mean"):
    """L_base of self-guided contrastive learning (SG): NT-Xent on c and h.

    The `b` [CLS] vectors `c_i` and their `b` views `h_i` form `2b` anchors;
    the positive of `c_i` is `h_i` and vice versa, and every other one of the
    `2b` vectors is a negative. This is `nt_xent_loss(cls, views)`:

    `L = -1/(2b) sum_m log( exp(s(x_m, pos(x_m))/t) / sum_{k != m} exp(s(x_m, x_k)/t) )`

    Args:
        cls: float tensor `[b, d]`. The tuned encoder's (projected) [CLS]
            vectors.
        views: float tensor `[b, d]`. One (projected) frozen-encoder view per
            sentence (a randomly sampled layer in SG).
        temperature: positive float. Defaults to `0.01`.
        gather: bool. Gather candidates across replicas. Defaults to `True`.
        reduction: str. `"mean"`, `"sum"` or `"none"` (`[2b]`). Defaults to
            `"mean"`.

    Returns:
        A float32 scalar (or `[2b]` vector).

    Examples:

    >>> c = tf.random.normal([4, 8])
    >>> sg_base_loss(c, c + 0.1 * tf.random.normal([4, 8])).shape
    TensorShape([])
    """
    return nt_xent_loss(
        cls, views, temperature=temperature, gather=gather, reduction=reduction
    )


def sg_opt1_loss(cls, views, temperature=0.01, gather=True, reduction="mean"):
    """L_opt1: only the [CLS] vectors are anchors; negatives are c_j and h_j.

    `L = -1/b sum_i log( exp(s(c_i, h_i)/t) /
    (exp(s(c_i, h_i)/t) + sum_{j != i} [exp(s(c_i, c_j)/t) + exp(s(c_i, h_j)/t)]) )`

    Args:
        cls: float tensor `[b, d]`. The tuned encoder's (projected) [CLS]
            vectors (the anchors).
        views: float tensor `[b, d]`. One (projected) view per sentence.
        temperature: positive float. Defaults to `0.01`.
        gather: bool. Gather candidates across replicas. Defaults to `True`.
        reduction: str. `"mean"`, `"sum"` or `"none"` (`[b]`). Defaults to
            `"mean"`.

    Returns:
        A float32 scalar (or `[b]` vector).
    """
    scale, cls, views = _utils.paired_embeddings(
        cls, views, "cls", "views", temperature, reduction
    )
    (all_cls, all_views), rows = gather_rows([cls, views], tf.shape(cls)[0], gather)
    total = tf.shape(all_cls)[0]
    cc = cosine_similarity_matrix(cls, all_cls) * scale
    cc = cc - _LARGE_NUM * tf.one_hot(rows, total, dtype=tf.float32)
    ch = cosine_similarity_matrix(cls, all_views) * scale
    logits = tf.concat([cc, ch], axis=1)
    per_example = _utils.cross_entropy(total + rows, logits)
    return _utils.reduce_losses(per_example, reduction)


def sg_opt2_loss(cls, views, temperature=0.01, gather=True, reduction="mean"):
    """L_opt2: only the [CLS] vectors are anchors; negatives are h_j only.

    `L = -1/b sum_i log( exp(s(c_i, h_i)/t) / sum_j exp(s(c_i, h_j)/t) )`,
    i.e. `info_nce_loss(cls, views)` with cosine similarity.

    Args:
        cls: float tensor `[b, d]`. The (projected) [CLS] vectors (anchors).
        views: float tensor `[b, d]`. One (projected) view per sentence.
        temperature: positive float. Defaults to `0.01`.
        gather: bool. Gather candidates across replicas. Defaults to `True`.
        reduction: str. `"mean"`, `"sum"` or `"none"` (`[b]`). Defaults to
            `"mean"`.

    Returns:
        A float32 scalar (or `[b]` vector).
    """
    return info_nce_loss(
        cls,
        views,
        temperature=temperature,
        similarity="cosine",
        gather=gather,
        reduction=reduction,
    )


def sg_opt3_loss(cls, views, temperature=0.01, gather=True, reduction="mean"):
    """L_opt3 (SG-OPT): every layer view of a sentence is a positive of its c_i.

    With `views[i, k] = h_{i,k}` (k over the `l+1` views):

    `L = -1/(b(l+1)) sum_i sum_k log( exp(s(c_i, h_{i,k})/t) /
    (exp(s(c_i, h_{i,k})/t) + sum_{m != i} sum_n exp(s(c_i, h_{m,n})/t)) )`

    The other views of the same sentence are neither positives nor
    negatives of the term `(i, k)`.

    Args:
        cls: float tensor `[b, d]`. The (projected) [CLS] vectors (anchors).
        views: float tensor `[b, l+1, d]`. Every (projected) view of every
            sentence.
        temperature: positive float. Defaults to `0.01`.
        gather: bool. Gather candidates across replicas. Defaults to `True`.
        reduction: str. `"mean"`, `"sum"` or `"none"` (`[b, l+1]`). Defaults
            to `"mean"`.

    Returns:
        A float32 scalar (or `[b, l+1]` tensor).

    Examples:

    >>> c = tf.random.normal([4, 8])
    >>> h = tf.random.normal([4, 3, 8])
    >>> sg_opt3_loss(c, h).shape
    TensorShape([])
    """
    _utils.validate_reduction(reduction)
    scale = _utils.inverse_temperature(temperature)
    cls = _utils.as_embeddings(cls, "cls")
    if views is None:
        raise ValueError("`views` must be a tensor of shape [b, l+1, d]. Received: None")
    views = tf.cast(tf.convert_to_tensor(views), tf.float32)
    if views.shape.rank is not None and views.shape.rank != 3:
        raise ValueError(
            "`views` must be a 3D tensor of shape `[batch_size, num_views, "
            f"dim]`. Received: views.shape={views.shape}"
        )
    if not cls.shape[:1].is_compatible_with(views.shape[:1]) or not cls.shape[
        -1:
    ].is_compatible_with(views.shape[-1:]):
        raise ValueError(
            "`cls` [b, d] and `views` [b, l+1, d] must agree in b and d. "
            f"Received: cls.shape={cls.shape}, views.shape={views.shape}"
        )
    local = tf.shape(cls)[0]
    all_views, rows = gather_rows(views, local, gather)
    total = tf.shape(all_views)[0]
    num_views = tf.shape(all_views)[1]
    dim = tf.shape(all_views)[2]
    flat = tf.reshape(all_views, [-1, dim])
    # [b, N, V] logits of every local anchor against every view.
    sims = tf.matmul(l2_normalize(cls), l2_normalize(flat), transpose_b=True)
    sims = tf.reshape(sims * scale, [local, total, num_views])
    own = tf.one_hot(rows, total, dtype=tf.float32)  # [b, N]
    positives = tf.reduce_sum(sims * own[:, :, None], axis=1)  # [b, V]
    negatives = tf.reshape(
        sims - _LARGE_NUM * own[:, :, None], [local, -1]
    )  # [b, N*V]
    negative_lse = tf.reduce_logsumexp(negatives, axis=1, keepdims=True)
    per_term = tf.math.softplus(negative_lse - positives)  # -log softmax of pos
    if reduction == "none":
        return per_term
    return _utils.reduce_losses(tf.reshape(per_term, [-1]), reduction)


def self_guided_loss(loss, cls, views, temperature=0.01, gather=True):
    """Dispatch to one of the SG losses by name (`base`, `opt1`, `opt2`, `opt3`)."""
    fns = {
        "base": sg_base_loss,
        "opt1": sg_opt1_loss,
        "opt2": sg_opt2_loss,
        "opt3": sg_opt3_loss,
    }
    if loss not in fns:
        raise ValueError(f"`loss` must be one of {SG_LOSSES}. Received: loss={loss!r}")
    return fns[loss](cls, views, temperature=temperature, gather=gather)


def weight_distance_regularizer(weight_pairs):
    """SG's regulariser: the squared distance of the tuned weights from the frozen ones.

    `sum ||theta_F - theta_T||^2` over the pairs (Kim et al., 2021, Eq. 4),
    computed in float32; the pairs of non-trainable tuned weights are
    skipped (frozen embeddings do not move).

    Args:
        weight_pairs: iterable of `(tuned, frozen)` variables of equal shape.

    Returns:
        float32 scalar (0 without trainable pairs).

    Examples:

    >>> tuned = tf.Variable([1.0, 2.0]); frozen = tf.Variable([0.0, 0.0], trainable=False)
    >>> float(weight_distance_regularizer([(tuned, frozen)]))
    5.0
    """
    terms = [
        tf.reduce_sum(tf.square(tf.cast(frozen, "float32") - tf.cast(tuned, "float32")))
        for tuned, frozen in weight_pairs
        if tuned.trainable
    ]
    if not terms:
        return tf.constant(0.0, "float32")
    return tf.add_n(terms)

