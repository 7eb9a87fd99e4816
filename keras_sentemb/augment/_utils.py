"""Private helpers shared by the view layers in `keras_sentemb.augment`.

Nothing here is public API. The helpers validate constructor arguments the
same way in every layer and implement the few tensor tricks the layers share
(exact-count random selection, real-token bookkeeping), all with `keras.ops`
so they trace inside `tf.function` with dynamic batch and sequence sizes.
"""

import numbers

from keras import backend
from keras import ops


def validate_rate(rate, layer_name, arg_name="rate"):
    """Return `rate` as a Python float, or raise if it is not in [0, 1)."""
    if isinstance(rate, bool) or not isinstance(rate, numbers.Real):
        raise ValueError(
            f"`{arg_name}` of {layer_name} must be a float in [0, 1). "
            f"Received: {arg_name}={rate!r} (of type {type(rate).__name__})."
        )
    rate = float(rate)
    if not 0.0 <= rate < 1.0:
        raise ValueError(
            f"`{arg_name}` of {layer_name} must be in [0, 1). "
            f"Received: {arg_name}={rate!r}."
        )
    return rate


def validate_seed(seed, layer_name):
    """Return `seed` unchanged if it is `None` or an int, else raise."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(
            f"`seed` of {layer_name} must be an int or None. "
            f"Received: seed={seed!r} (of type {type(seed).__name__})."
        )
    return int(seed)


def validate_bool(value, arg_name, layer_name):
    if not isinstance(value, bool):
        raise ValueError(
            f"`{arg_name}` of {layer_name} must be a bool. "
            f"Received: {arg_name}={value!r} (of type {type(value).__name__})."
        )
    return value


def check_rank(x, rank, arg_name, layer_name, layout):
    """Raise if the static rank of `x` is known and differs from `rank`."""
    shape = getattr(x, "shape", None)
    if shape is None:
        return
    ndim = len(shape)
    if ndim != rank:
        raise ValueError(
            f"{layer_name} expects `{arg_name}` of rank {rank} ({layout}). "
            f"Received: {arg_name} with shape {tuple(shape)}."
        )


def check_embeddings(embeddings, layer_name):
    """Raise if `embeddings` is not of rank 3 (`[batch, seq_len, hidden]`)."""
    check_rank(embeddings, 3, "embeddings", layer_name, "[batch, seq_len, hidden]")


def real_token_mask(padding_mask, reference, layer_name):
    """Boolean `[B, T]` mask of real tokens.

    `padding_mask` is 1/True for real tokens (including special tokens) and
    0/False for padding. When it is `None`, every position counts as real.
    `reference` is a tensor whose first two dimensions are `[B, T]`.
    """
    if padding_mask is None:
        shape = ops.shape(reference)
        return ops.ones((shape[0], shape[1]), dtype="bool")
    check_rank(padding_mask, 2, "padding_mask", layer_name, "[batch, seq_len]")
    padding_mask = ops.convert_to_tensor(padding_mask)
    if backend.standardize_dtype(padding_mask.dtype) == "bool":
        return padding_mask
    return ops.not_equal(padding_mask, ops.zeros_like(padding_mask))


def floor_rate_times(count, rate):
    """`int(count * rate)` per element, computed in float64.

    Matches Python's `int(n * rate)` bit for bit (the original implementations
    compute it in float64 on the host); float32 would differ for some (n, rate)
    pairs such as n=100, rate=0.29.
    """
    product = ops.cast(count, "float64") * rate
    return ops.cast(ops.floor(product), "int32")


def ranks(keys):
    """Rank of every entry along the last axis (0 = smallest).

    Ranks form a permutation of `0..N-1` in every row even when keys tie, so
    `ranks < k` always selects exactly `k` entries.
    """
    order = ops.argsort(keys, axis=-1)
    return ops.cast(ops.argsort(order, axis=-1), "int32")


def real_token_index(real):
    """0-based index of each real token among the real tokens of its row.

    Equals the position for right-padded rows; padding entries get the index
    of the preceding real token and must be masked by the caller.
    """
    return ops.cumsum(ops.cast(real, "int32"), axis=1) - 1
