"""The precisions an encoder computes in, the Keras dtype policy of each, and `"auto"`.

Training computes in `"float32"` or `"bfloat16"` (mixed precision: bfloat16
compute, float32 weights and optimizer state) and takes `"auto"`, the
default of every `fit_*` that trains with gradients: mixed bfloat16 where
the CPU computes bfloat16 natively, float32 elsewhere
(`resolve_training_precision`). Encoding also takes `"int8"`
(`int8_transformer`: int8 matrix multiplies, float32 elsewhere) and
`"auto"`, its default too: the fastest precision that keeps float32's
results, on this host (`auto_precision`).

What stays float32 in a mixed bfloat16 training step (checked on the
traced step by tests/models/test_training_precision.py): the weights and
the optimizer update (Keras' mixed policy keeps float32 variables and casts
them per layer), layer normalisation (Keras computes it in float32 under a
mixed policy), the pooled sentence vectors as the losses see them, the
similarity matrix, its temperature scaling, log-softmax / logsumexp and the
loss (`keras_sentemb.losses` cast their inputs to float32: half-precision
similarities tie scores), GradCache's cached gradients (taken with respect
to the float32 embeddings the loss sees) and Matryoshka's slices (of those
float32 embeddings).
"""

import inspect
import os

# `precision` -> the Keras dtype policy of a backbone that trains: bfloat16
# training keeps float32 weights for the optimizer (mixed precision).
PRECISIONS = {"float32": "float32", "bfloat16": "mixed_bfloat16"}

# `precision` -> the dtype policy of a backbone that only encodes. Nothing
# updates its weights, so bfloat16 stores them in bfloat16 too: no float32
# master copy cast to bfloat16 in every forward pass (about 10 % of a
# bfloat16 encode). Layer normalisation still computes in float32 (Keras),
# and pooling and outputs are float32 (`SentenceEncoder.encode`). An int8
# encoder keeps float32 layers around its int8 matrix multiplies.
INFERENCE_POLICIES = {"float32": "float32", "bfloat16": "bfloat16", "int8": "float32"}

# What `encode` and the command line take.
ENCODE_PRECISIONS = ("auto", "float32", "bfloat16", "int8")

# What training (`fit_*`, `keras-sentemb train`) takes; `"auto"` is the default.
TRAINING_PRECISIONS = ("auto", "float32", "bfloat16")

# Pins what `"auto"` means in this process, e.g. `KERAS_SENTEMB_PRECISION=float32`
# for vectors that compare exactly across machines.
PIN_ENV = "KERAS_SENTEMB_PRECISION"

# The largest difference between a bfloat16 encode and a float32 one that `"auto"`
# accepts, stated as a cosine: every sentence's bfloat16 vector has at least this
# cosine to its float32 vector (measured by benchmarks/encode_backends.py and
# checked by the tests on the bundled STS-B sentences).
BFLOAT16_MIN_COSINE = 0.999


def _one_of(precision, allowed, default):
    """`None` -> `default`; else `precision` when in `allowed`, or a clear error."""
    if precision is None:
        return default
    if precision not in allowed:
        raise ValueError(f"`precision` must be one of {allowed}. Received: precision={precision!r}.")
    return precision


def check_precision(precision):
    """`None` -> `"float32"`; else one of `PRECISIONS`, or a clear error."""
    return _one_of(precision, sorted(PRECISIONS), "float32")


def check_training_precision(precision):
    """`None` -> `"auto"`; else one of `TRAINING_PRECISIONS`, or a clear error."""
    return _one_of(precision, list(TRAINING_PRECISIONS), "auto")


def resolve_training_precision(precision, flags=None):
    """`(precision, why)`: what a training run asked for `precision` computes in here.

    `"auto"` (the default of every `fit_*`) is mixed bfloat16 (bfloat16
    compute, float32 weights, optimizer state and losses) on a CPU-only
    host whose CPU computes bfloat16 natively (AVX512-BF16, AMX, Arm BF16),
    and float32 on CPUs without it, where bfloat16 is emulated and slower
    than float32 (`auto_precision`). On a GPU or TPU `"auto"` trains in
    float32, as before: mixed precision there is a choice of the user
    (`precision="bfloat16"`), since the gain and the right half type
    depend on the accelerator (this package measures CPUs).
    `KERAS_SENTEMB_PRECISION` pins `"auto"` (`float32` keeps float32; `int8`,
    an encoding precision, trains in float32). An explicit `"float32"` is
    float32 everywhere; an explicit `"bfloat16"` falls back to float32 on a
    CPU without native bfloat16 (`native_bfloat16.effective_precision`,
    with a notice).

    Args:
        precision: str or None. `"auto"`, `"float32"` or `"bfloat16"`;
            None is `"auto"`.
        flags: iterable of str or None. CPU flags to decide on (a test fakes a
            CPU with them); `None` reads this CPU's.

    Returns:
        `(str, str)`: `"float32"` or `"bfloat16"`, and the reason in words.

    Examples:

    ```python
    resolve_training_precision("auto")
    # ("bfloat16", "auto: the CPU computes bfloat16 natively (amx_bf16, avx512_bf16)")
    ```
    """
    from keras_sentemb.kernels.native_bfloat16 import effective_precision

    precision = check_training_precision(precision)
    if precision == "auto":
        computes, why = auto_precision(flags)
        why = f"auto: {why}"
        if computes not in PRECISIONS:  # a pin to int8: an encoding precision
            computes, why = "float32", f"{why}, which training computes in float32"
        if pinned_precision() is None:  # decided on the CPU's flags already
            return computes, why
    else:
        computes, why = precision, "asked for"
    if computes == "bfloat16" and effective_precision("bfloat16") == "float32":
        return "float32", f"{why}; bfloat16 is only emulated on this CPU"
    return computes, why


def check_encode_precision(precision):
    """`None` -> `"auto"`; else one of `ENCODE_PRECISIONS`, or a clear error."""
    return _one_of(precision, list(ENCODE_PRECISIONS), "auto")


def pinned_precision():
    """The precision `KERAS_SENTEMB_PRECISION` pins `"auto"` to, or None when unset.

    Raises:
        ValueError: the variable holds something else than a precision.
    """
    value = os.environ.get(PIN_ENV, "").strip()
    if not value:
        return None
    if value not in ENCODE_PRECISIONS[1:]:
        raise ValueError(f"{PIN_ENV}={value!r}: expected one of {list(ENCODE_PRECISIONS[1:])}.")
    return value


def auto_precision(flags=None):
    """`(precision, why)`: what `"auto"` computes in on this host.

    bfloat16 on a CPU-only host whose CPU computes it natively (AVX512-BF16,
    AMX, Arm BF16): as fast as the CPU allows while every vector stays within
    cosine `BFLOAT16_MIN_COSINE` of float32's. float32 elsewhere: on CPUs
    without native bfloat16 (emulated, it is slower than float32), and on
    GPUs and TPUs (the behaviour there is unchanged). `KERAS_SENTEMB_PRECISION`
    pins it.

    Args:
        flags: iterable of str or None. CPU flags to decide on (a test fakes a
            CPU with them); `None` reads this CPU's.
    """
    # Here, not at the top: they load TensorFlow, which `reproducible`'s callers
    # (evaluation of any encoder) need not.
    from keras_sentemb.kernels.cpu_threads import has_accelerator
    from keras_sentemb.kernels.native_bfloat16 import NATIVE_BFLOAT16_FLAGS
    from keras_sentemb.kernels.native_bfloat16 import cpu_flags

    pinned = pinned_precision()
    if pinned is not None:
        return pinned, f"{PIN_ENV}={pinned}"
    if has_accelerator():
        return "float32", "a GPU or TPU computes float32 by default"
    flags = cpu_flags() if flags is None else frozenset(f.lower() for f in flags)
    native = sorted(NATIVE_BFLOAT16_FLAGS & (flags or frozenset()))
    if native:
        return "bfloat16", f"the CPU computes bfloat16 natively ({', '.join(native)})"
    if flags is None:
        return "float32", "the CPU's flags could not be read"
    return "float32", "the CPU has no native bfloat16 (avx512_bf16 / amx_bf16)"


def resolve_encode_precision(precision):
    """The precision an encode computes in: `"auto"` resolved, then `effective_precision`.

    `"bfloat16"` asked for on a CPU without native bfloat16 computes float32
    (with a one-line notice; `native_bfloat16`).
    """
    from keras_sentemb.kernels.native_bfloat16 import effective_precision

    precision = check_encode_precision(precision)
    if precision == "auto":
        precision = auto_precision()[0]
    return effective_precision(precision)


def reproducible(encode, kwargs):
    """`kwargs` for `encode`, with `precision="float32"` where it takes one and none is given.

    What evaluation and training compute from vectors (scores, dev selection,
    a fitted whitening, a teacher's targets, mined negatives) is encoded in
    float32, so that it does not depend on the CPU; `encode` itself defaults
    to `"auto"`.

    Args:
        encode: the `encode` callable that will be called.
        kwargs: dict of the keyword arguments for it.

    Returns:
        a new dict.
    """
    kwargs = dict(kwargs)
    if "precision" in kwargs:
        return kwargs
    try:
        parameters = inspect.signature(encode).parameters
    except (TypeError, ValueError):
        return kwargs
    if "precision" in parameters:
        kwargs["precision"] = "float32"
    return kwargs
