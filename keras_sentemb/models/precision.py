"""The precisions an encoder computes in, and the Keras dtype policy of each."""

# `precision` -> the Keras dtype policy of the backbone that computes.
PRECISIONS = {"float32": "float32", "bfloat16": "mixed_bfloat16"}


def check_precision(precision):
    """`None` -> `"float32"`; else one of `PRECISIONS`, or a clear error."""
    if precision is None:
        return "float32"
    if precision not in PRECISIONS:
        raise ValueError(
            f"`precision` must be one of {sorted(PRECISIONS)}. Received: precision={precision!r}."
        )
    return precision
