"""Pairwise similarity matrices shared by every contrastive loss.

All similarities are computed in float32. Note that on Ampere or newer NVIDIA
GPUs TensorFlow runs float32 matmuls in TensorFloat-32 by default (about 1e-3
relative precision); call
`tf.config.experimental.enable_tensor_float_32_execution(False)` when exact
float32 logits matter (e.g. parity checks).
"""

import tensorflow as tf

from keras_sentemb.losses._utils import as_embeddings

SIMILARITIES = ("cosine", "dot")

# Same convention as `torch.nn.functional.normalize` (used by
# sentence-transformers' `cos_sim`): x / max(||x||, epsilon).
_NORM_EPSILON = 1e-12


def _as_pair(a, b):
    """`a` `[n, d]` and `b` `[m, d]` as float32 embeddings of the same `d`."""
    a = as_embeddings(a, "a")
    b = as_embeddings(b, "b")
    dim_a, dim_b = a.shape[-1], b.shape[-1]
    if dim_a is not None and dim_b is not None and dim_a != dim_b:
        raise ValueError(
            "`a` and `b` must have the same embedding "
            f"dimension. Received: a.shape={a.shape}, "
            f"b.shape={b.shape}"
        )
    return a, b


def l2_normalize(x, epsilon=_NORM_EPSILON):
    """L2-normalizes the rows of a matrix, in float32.

    Computes `x / max(||x||, epsilon)` row by row, so a zero row stays zero
    (with finite gradients) instead of becoming NaN. This is the convention of
    `torch.nn.functional.normalize`, which sentence-transformers uses.

    Args:
        x: tensor of shape `[n, d]`. Embeddings, any floating dtype; cast to
            float32 first.
        epsilon: float. Lower bound on the row norm. Defaults to `1e-12`.

    Returns:
        A float32 tensor of shape `[n, d]` whose non-zero rows have unit norm.

    Examples:

    >>> l2_normalize([[3.0, 4.0]]).numpy()
    array([[0.6, 0.8]], dtype=float32)
    """
    x = as_embeddings(x, "x")
    squared_norm = tf.reduce_sum(tf.square(x), axis=-1, keepdims=True)
    return x * tf.math.rsqrt(tf.maximum(squared_norm, epsilon * epsilon))


def dot_similarity_matrix(a, b):
    """Pairwise dot products between two sets of embeddings, in float32.

    Args:
        a: tensor of shape `[n, d]`. First set of embeddings.
        b: tensor of shape `[m, d]`. Second set of embeddings.

    Returns:
        A float32 tensor of shape `[n, m]` whose entry `[i, j]` is
        `dot(a[i], b[j])`.

    Examples:

    >>> dot_similarity_matrix([[1.0, 2.0]], [[3.0, 4.0], [1.0, 0.0]]).numpy()
    array([[11.,  1.]], dtype=float32)
    """
    a, b = _as_pair(a, b)
    return tf.matmul(a, b, transpose_b=True)


def cosine_similarity_matrix(a, b, epsilon=_NORM_EPSILON):
    """Pairwise cosine similarities between two sets of embeddings, in float32.

    Rows are normalized with `l2_normalize` (norm clamped at `epsilon`, so zero
    vectors give a similarity of 0 rather than NaN), then multiplied.

    Args:
        a: tensor of shape `[n, d]`. First set of embeddings.
        b: tensor of shape `[m, d]`. Second set of embeddings.
        epsilon: float. Lower bound on the row norms. Defaults to `1e-12`.

    Returns:
        A float32 tensor of shape `[n, m]` whose entry `[i, j]` is
        `cos(a[i], b[j])`, in `[-1, 1]`.

    Examples:

    >>> cosine_similarity_matrix([[1.0, 0.0]], [[2.0, 0.0], [0.0, 5.0]]).numpy()
    array([[1., 0.]], dtype=float32)
    """
    a, b = _as_pair(a, b)
    return tf.matmul(
        l2_normalize(a, epsilon), l2_normalize(b, epsilon), transpose_b=True
    )


def similarity_matrix(a, b, similarity="cosine"):
    """Pairwise similarity matrix for a similarity given by name.

    Args:
        a: tensor of shape `[n, d]`. First set of embeddings.
        b: tensor of shape `[m, d]`. Second set of embeddings.
        similarity: str. `"cosine"` or `"dot"`. Defaults to `"cosine"`.

    Returns:
        A float32 tensor of shape `[n, m]`.
    """
    validate_similarity(similarity)
    if similarity == "cosine":
        return cosine_similarity_matrix(a, b)
    return dot_similarity_matrix(a, b)


def validate_similarity(similarity):
    """Raises a `ValueError` unless `similarity` is a supported name."""
    if similarity not in SIMILARITIES:
        raise ValueError(
            f"`similarity` must be one of {SIMILARITIES}. "
            f"Received: similarity={similarity!r}"
        )
