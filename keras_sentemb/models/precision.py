"""The precisions an encoder computes in, and the Keras dtype policy of each."""

# `precision` -> the Keras dtype policy of a backbone that trains: bfloat16
# training keeps float32 weights for the optimizer (mixed precision).
PRECISIONS = {"float32": "float32", "bfloat16": "mixed_bfloat16"}

# `precision` -> the dtype policy of a backbone that only encodes. Nothing
# updates its weights, so bfloat16 stores them in bfloat16 too: no float32
# master copy cast to bfloat16 in every forward pass (about 10 % of a
# bfloat16 encode). Layer normalisation still computes in float32 (Keras),
# and pooling and outputs are float32 (`SentenceEncoder.encode`).
INFERENCE_POLICIES = {"float32": "float32", "bfloat16": "bfloat16"}


def check_precision(precision):
    """`None` -> `"float32"`; else one of `PRECISIONS`, or a clear error."""
    if precision is None:
        return "float32"
    if precision not in PRECISIONS:
        raise ValueError(
            f"`precision` must be one of {sorted(PRECISIONS)}. Received: precision={precision!r}."
        )
    return precision
