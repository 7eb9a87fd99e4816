"""Matryoshka representation learning: a method's loss on nested prefixes of its vectors.

`MatryoshkaLoss` wraps any loss of sentence embeddings: it computes the same
loss on the first `d` dimensions of every embedding for each `d` in `dims`
and returns the weighted sum. Training on it makes every prefix a usable
embedding, so a model can be used truncated (`encode(truncate_dim=d)`) with
little loss of quality. The wrapped loss sees the truncated vectors exactly as
it would see full ones: a cosine loss renormalises them itself; a dot-product
loss sees the shorter vectors' smaller products, as in the paper.

References:
    - [Kusupati et al., 2022. Matryoshka Representation
      Learning](https://arxiv.org/abs/2205.13147)
"""

import dataclasses

import numpy as np
import tensorflow as tf

from keras_sentemb.losses.loss_output import LossOutput


def _from_text(value, cast, name):
    """`"384,256"` (a command-line value) -> `(384, 256)`; other values unchanged."""
    if not isinstance(value, str):
        return value
    try:
        return tuple(cast(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise ValueError(
            f"`{name}` must be comma-separated numbers (e.g. 384,256,128); received {value!r}."
        ) from None


def check_matryoshka(dims, weights, full_dim):
    """Validated `(dims, weights)` tuples for vectors of `full_dim` dimensions.

    Args:
        dims: sequence of int (or a comma-separated str). Prefix sizes, each
            in `[1, full_dim]`, distinct.
        weights: sequence of float or None. One non-negative weight per
            size, not all zero; None is 1 for each.
        full_dim: int. The embeddings' dimension.

    Returns:
        `(dims, weights)`: a tuple of int and a tuple of float.
    """
    dims = _from_text(dims, int, "matryoshka_dims")
    weights = _from_text(weights, float, "matryoshka_weights")
    if isinstance(dims, (int, np.integer)) and not isinstance(dims, bool):
        dims = (dims,)  # one prefix (`--matryoshka-dims 64` on the command line)
    if isinstance(weights, (int, float, np.number)) and not isinstance(weights, bool):
        weights = (weights,)
    if not hasattr(dims, "__iter__"):
        raise ValueError(f"`matryoshka_dims` must be a sequence of ints; received {dims!r}.")
    dims = tuple(dims)
    if not dims:
        raise ValueError("`matryoshka_dims` is empty; give at least one dimension.")
    for d in dims:
        if not isinstance(d, (int, np.integer)) or isinstance(d, bool) or not 1 <= d <= full_dim:
            raise ValueError(
                f"`matryoshka_dims` must hold ints in [1, {full_dim}] (the model's dimension); "
                f"received {dims!r}."
            )
    if len(set(dims)) != len(dims):
        raise ValueError(f"`matryoshka_dims` has a repeated dimension: {dims!r}.")
    if weights is None:
        weights = (1.0,) * len(dims)
    weights = tuple(weights)
    if len(weights) != len(dims):
        raise ValueError(
            f"`matryoshka_weights` needs one weight per dimension ({len(dims)}); received "
            f"{len(weights)}."
        )
    for w in weights:
        if isinstance(w, bool) or not isinstance(w, (int, float, np.number)) or not w >= 0:
            raise ValueError(f"`matryoshka_weights` must be non-negative numbers; received {weights!r}.")
    if not any(w > 0 for w in weights):
        raise ValueError("`matryoshka_weights` are all zero.")
    return tuple(int(d) for d in dims), tuple(float(w) for w in weights)


def truncate_nest(embeddings, dim, full_dim):
    """Every tensor of the nest whose last axis is `full_dim`, cut to its first `dim`.

    Other entries (labels, masks, scalars) are returned unchanged.
    """

    def cut(x):
        if not (tf.is_tensor(x) or isinstance(x, np.ndarray)):
            return x
        shape = tf.TensorShape(x.shape)
        if shape.rank in (None, 0) or shape[-1] != full_dim:
            return x
        if not tf.as_dtype(x.dtype).is_floating:
            return x
        return x[..., :dim]

    return tf.nest.map_structure(cut, embeddings)


class MatryoshkaLoss:
    """Weighted sum of a loss over nested prefixes of the embeddings.

    `loss(embeddings, *args) = sum_i weights[i] * base_loss(embeddings[..., :dims[i]], *args)`,
    where every float tensor of the `embeddings` nest whose last axis is
    `full_dim` is truncated (labels and other entries pass through). The base
    loss may return a tensor or a `LossOutput` (the trainers' loss hooks):
    then the weighted sum replaces its `loss`, and its `metrics` and `aux`
    are taken from the call on the largest prefix (the full vectors when
    `full_dim` is in `dims`), so auxiliary outputs such as keys to enqueue
    keep their full size.

    Args:
        base_loss: callable `(embeddings, *args, **kwargs)` returning a
            tensor or a `LossOutput`.
        dims: sequence of int. The prefix sizes, e.g. `(384, 256, 128, 64,
            32)`.
        weights: sequence of float or None. One weight per size. Defaults
            to `None` (1 each).
        full_dim: int. The embeddings' dimension.

    Examples:

    >>> import tensorflow as tf
    >>> def sum_of_squares(z):
    ...     return tf.reduce_sum(z["a"] ** 2)
    >>> loss = MatryoshkaLoss(sum_of_squares, dims=(4, 2), weights=(1.0, 0.5), full_dim=4)
    >>> float(loss({"a": tf.ones((1, 4))}))
    5.0

    References:
        - [Kusupati et al., 2022. Matryoshka Representation
          Learning](https://arxiv.org/abs/2205.13147)
    """

    def __init__(self, base_loss, dims, weights=None, full_dim=None):
        if full_dim is None:
            raise ValueError("`full_dim` (the embeddings' dimension) is required.")
        self.base_loss = base_loss
        self.full_dim = int(full_dim)
        self.dims, self.weights = check_matryoshka(dims, weights, self.full_dim)

    def __call__(self, embeddings, *args, **kwargs):
        total = None
        largest_out = None
        for dim, weight in zip(self.dims, self.weights):
            out = self.base_loss(truncate_nest(embeddings, dim, self.full_dim), *args, **kwargs)
            loss = out.loss if isinstance(out, LossOutput) else out
            term = tf.cast(loss, "float32") * weight
            total = term if total is None else total + term
            if dim == max(self.dims):
                largest_out = out
        if isinstance(largest_out, LossOutput):
            return dataclasses.replace(largest_out, loss=total)
        return total

    def get_config(self):
        return {"dims": list(self.dims), "weights": list(self.weights), "full_dim": self.full_dim}
