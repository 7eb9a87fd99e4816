"""Matryoshka truncation of sentence vectors: the first k dimensions, renormalised."""

import numpy as np


def check_truncate_dim(truncate_dim, dim):
    """`truncate_dim` as an int in [1, dim], else a clear error."""
    if (not isinstance(truncate_dim, (int, np.integer)) or isinstance(truncate_dim, bool)
            or not 1 <= truncate_dim <= dim):
        raise ValueError(
            f"`truncate_dim` must be an int in [1, {dim}] (the model's dimension); "
            f"received {truncate_dim!r}."
        )
    return int(truncate_dim)


def truncate_embeddings(vectors, truncate_dim, normalize):
    """The first `truncate_dim` columns of `vectors`, L2-renormalised if `normalize`.

    Args:
        vectors: float array `[..., dim]`.
        truncate_dim: int. Dimensions kept.
        normalize: bool. Renormalise each truncated vector to unit length.

    Returns:
        float32 array `[..., truncate_dim]`.

    Examples:

    >>> truncate_embeddings(np.array([[3.0, 4.0, 12.0]]), 2, normalize=True).tolist()
    [[0.6000000238418579, 0.800000011920929]]
    """
    vectors = np.asarray(vectors, np.float32)[..., :truncate_dim]
    if normalize:
        norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
        vectors = vectors / np.maximum(norms, np.float32(1e-12))
    return np.ascontiguousarray(vectors, np.float32)
