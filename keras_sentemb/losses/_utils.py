"""Argument validation and reduction shared by the loss functions (private)."""

import math
import numbers

import tensorflow as tf

REDUCTIONS = ("mean", "sum", "none")


def is_python_number(value):
    """True for Python / NumPy real scalars (bools excluded)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def validate_positive(value, name):
    """Raises a `ValueError` unless a numeric `value` is finite and > 0.

    Tensors and variables (e.g. a learnable temperature) are not checked.
    """
    if isinstance(value, bool):
        raise ValueError(
            f"`{name}` must be a positive number. Received: {name}={value!r}"
        )
    if is_python_number(value):
        if not (math.isfinite(float(value)) and float(value) > 0):
            raise ValueError(
                f"`{name}` must be a finite number > 0. "
                f"Received: {name}={value!r}"
            )


def inverse_temperature(temperature):
    """Validates `temperature` and returns `1 / temperature` for the logits.

    Python numbers are inverted in float64 first (so `temperature=0.05` gives a
    scale of exactly 20, matching sentence-transformers' `scale=20`).
    """
    validate_positive(temperature, "temperature")
    if is_python_number(temperature):
        return tf.constant(1.0 / float(temperature), dtype=tf.float32)
    return 1.0 / tf.cast(temperature, tf.float32)


def validate_reduction(reduction):
    if reduction not in REDUCTIONS:
        raise ValueError(
            f"`reduction` must be one of {REDUCTIONS}. "
            f"Received: reduction={reduction!r}"
        )


def reduce_losses(per_example, reduction):
    """Reduces a `[n]` vector of per-example losses."""
    if reduction == "mean":
        return tf.reduce_mean(per_example)
    if reduction == "sum":
        return tf.reduce_sum(per_example)
    return per_example


def as_embeddings(x, name):
    """Converts embeddings to a float32 `[batch, dim]` tensor, validating rank."""
    if x is None:
        raise ValueError(f"`{name}` must be a tensor of embeddings. Received: None")
    x = tf.convert_to_tensor(x)
    if not x.dtype.is_floating:
        raise ValueError(
            f"`{name}` must be a floating point tensor of embeddings. "
            f"Received: {name}.dtype={x.dtype.name}"
        )
    if x.shape.rank is not None and x.shape.rank != 2:
        raise ValueError(
            f"`{name}` must be a 2D tensor of shape `[batch_size, dim]`. "
            f"Received: {name}.shape={x.shape}"
        )
    return tf.cast(x, tf.float32)


def check_same_shape(reference, other, reference_name, other_name):
    """Raises a `ValueError` when two static shapes are known to differ."""
    if not reference.shape.is_compatible_with(other.shape):
        raise ValueError(
            f"`{other_name}` must have the same shape as `{reference_name}` "
            f"(row i of `{other_name}` belongs to row i of "
            f"`{reference_name}`). Received: "
            f"{reference_name}.shape={reference.shape}, "
            f"{other_name}.shape={other.shape}"
        )


def paired_embeddings(a, b, name_a, name_b, temperature, reduction):
    """The checks of a loss over paired rows: `(1 / temperature, a, b)`.

    Validates `reduction` and `temperature`, converts `a` and `b` with
    `as_embeddings` and checks that they have the same shape.
    """
    validate_reduction(reduction)
    scale = inverse_temperature(temperature)
    a = as_embeddings(a, name_a)
    b = as_embeddings(b, name_b)
    check_same_shape(a, b, name_a, name_b)
    return scale, a, b


def cross_entropy(labels, logits):
    """Per-row softmax cross-entropy, float32."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.int32), logits=logits
    )
