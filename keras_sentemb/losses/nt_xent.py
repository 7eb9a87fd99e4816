"""NT-Xent, the normalized temperature-scaled cross-entropy of SimCLR."""

import tensorflow as tf

from keras_sentemb.losses import _utils
from keras_sentemb.losses.distributed import gather_rows
from keras_sentemb.losses.similarity import cosine_similarity_matrix

# Subtracted from the self-similarity logits (as in SimCLR's reference code):
# exp() of the result is exactly 0 in float32 and gradients stay finite.
_LARGE_NUM = 1e9


def nt_xent_loss(view_a, view_b, temperature=0.1, gather=True, reduction="mean"):
    """NT-Xent loss of SimCLR over two augmented views of a batch.

    The two views of `N` examples give `2N` embeddings. Each of them must pick
    out its counterpart (the other view of the same example) among the other
    `2N - 1` embeddings, with logits `cos(u, v) / temperature`; its own
    similarity is masked out. The loss is the softmax cross-entropy averaged
    over all `2N` embeddings. Unlike `info_nce_loss`, both views serve as
    anchors and negatives come from both views (ConSERT uses this objective).

    Under a `tf.distribute` strategy with `gather=True`, both views are
    gathered from every replica (with gradients) so `N` is the global batch;
    the returned loss is the mean over this replica's `2 * b` local
    embeddings. See `keras_sentemb.losses.distributed` for how trainers must
    scale it.

    Args:
        view_a: float tensor of shape `[b, d]`. Embeddings of the first view.
        view_b: float tensor of shape `[b, d]`. Embeddings of the second view;
            row `i` is the counterpart of `view_a`'s row `i`.
        temperature: positive float (or float tensor). Divides the cosine
            similarities. Defaults to `0.1`.
        gather: bool. Gather both views across replicas under a
            `tf.distribute` strategy. Defaults to `True`.
        reduction: str. `"mean"` over the `2b` local embeddings, `"sum"`, or
            `"none"` (shape `[2b]`: the `view_a` rows, then the `view_b`
            rows). Defaults to `"mean"`.

    Returns:
        A float32 scalar (or a `[2b]` vector for `reduction="none"`).

    Examples:

    >>> view_a = tf.random.normal([4, 8])
    >>> view_b = view_a + 0.1 * tf.random.normal([4, 8])
    >>> nt_xent_loss(view_a, view_b, temperature=0.1).shape
    TensorShape([])

    References:
        - [Chen et al., 2020. A Simple Framework for Contrastive Learning of
          Visual Representations](https://arxiv.org/abs/2002.05709)
        - [Yan et al., 2021. ConSERT: A Contrastive Framework for
          Self-Supervised Sentence Representation
          Transfer](https://arxiv.org/abs/2105.11741)
    """
    scale, view_a, view_b = _utils.paired_embeddings(
        view_a, view_b, "view_a", "view_b", temperature, reduction
    )
    local_batch_size = tf.shape(view_a)[0]
    (all_a, all_b), rows = gather_rows([view_a, view_b], local_batch_size, gather)
    global_batch_size = tf.shape(all_a)[0]

    # Local queries [2b, d] against global candidates [2N, d], ordered
    # (all view_a rows, all view_b rows).
    queries = tf.concat([view_a, view_b], axis=0)
    candidates = tf.concat([all_a, all_b], axis=0)
    logits = cosine_similarity_matrix(queries, candidates) * scale
    self_columns = tf.concat([rows, global_batch_size + rows], axis=0)
    positive_columns = tf.concat([global_batch_size + rows, rows], axis=0)
    self_mask = tf.one_hot(
        self_columns, depth=2 * global_batch_size, dtype=tf.float32
    )
    logits = logits - _LARGE_NUM * self_mask
    per_example = _utils.cross_entropy(positive_columns, logits)
    return _utils.reduce_losses(per_example, reduction)
