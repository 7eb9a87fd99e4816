"""Whether bfloat16 is fast here, and the precision to use when it is not.

bfloat16 speeds a CPU up only when it computes bfloat16 natively: x86 with
AVX512-BF16 (`avx512_bf16`) or AMX (`amx_bf16`), Arm with the BF16 extension
(`bf16`). Elsewhere TensorFlow emulates it, several times slower than
float32. So `precision="bfloat16"` (encoding and training) falls back to
float32 by itself on a CPU-only host without such flags, with a one-line
notice; on GPUs/TPUs and native CPUs it stays bfloat16.
`KERAS_SENTEMB_BFLOAT16=force` keeps bfloat16 anyway (emulated).
"""

import os
import sys

from keras_sentemb.kernels.cpu_threads import has_accelerator
from keras_sentemb.kernels.policy import cpu_flag_set

# /proc/cpuinfo flags (x86 "flags", Arm "Features") that mean native bfloat16 math.
NATIVE_BFLOAT16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
CPUINFO = "/proc/cpuinfo"

_notified = False


def cpu_flags(path=None):
    """The CPU's feature flags from `/proc/cpuinfo`, or `None` where it cannot be read.

    Args:
        path: str or None. The cpuinfo file. Defaults to `None`:
            `/proc/cpuinfo`.

    Returns:
        a frozenset of flag names (lower case), or `None`.
    """
    return cpu_flag_set(CPUINFO if path is None else path)


def has_native_bfloat16(flags=None):
    """Whether bfloat16 math runs natively: an accelerator, or a CPU with bf16 flags.

    A CPU whose flags cannot be read (no `/proc/cpuinfo`) counts as native:
    the caller's choice is kept where nothing says it is slow.

    Args:
        flags: iterable of str or None. CPU flags; `None` reads `cpu_flags()`.
            Defaults to `None`.

    Returns:
        bool.
    """
    if has_accelerator():
        return True
    flags = cpu_flags() if flags is None else frozenset(f.lower() for f in flags)
    if flags is None:
        return True
    return bool(NATIVE_BFLOAT16_FLAGS & flags)


def falls_back():
    """Whether `"bfloat16"` computes float32 here (emulated and not forced)."""
    return os.environ.get("KERAS_SENTEMB_BFLOAT16") != "force" and not has_native_bfloat16()


def effective_precision(precision):
    """`precision`, or `"float32"` for `"bfloat16"` on a CPU without native bfloat16.

    Prints a one-line notice to stderr the first time it falls back.
    `KERAS_SENTEMB_BFLOAT16=force` keeps bfloat16.

    Args:
        precision: str. `"float32"` or `"bfloat16"` (already validated).

    Returns:
        str, the precision to compute in.

    Examples:

    ```python
    effective_precision("bfloat16")  # "float32" on an AVX2-only CPU
    ```
    """
    global _notified
    if precision != "bfloat16" or not falls_back():
        return precision
    if not _notified:
        _notified = True
        print(
            "keras_sentemb: this CPU has no native bfloat16 (avx512_bf16 / amx_bf16), where "
            "bfloat16 is emulated and slow; computing in float32 "
            "(KERAS_SENTEMB_BFLOAT16=force keeps bfloat16).",
            file=sys.stderr,
        )
    return "float32"
