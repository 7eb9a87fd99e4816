"""TensorFlow's oneDNN kernels on AVX2-only CPUs, where TensorFlow leaves them off.

TensorFlow's x86 builds carry two CPU paths for the ops a Transformer spends
its time in: Eigen's, and oneDNN's (its matmul with the bias fused as one
inner product, its batched matmuls, softmax and layer-norm kernels, and the
graph rewrites that pick them). `TF_ENABLE_ONEDNN_OPTS`, read once when
TensorFlow is imported, chooses; unset, TensorFlow turns oneDNN on only on
CPUs with AVX-512 VNNI / BF16 or AMX. On an AVX2-only CPU it stays off, and
there it is faster. Measured on a 2-core AVX2-only AMD EPYC (Zen 3 class),
TensorFlow 2.21, off / on:

| | off (TensorFlow's default there) | on |
|---|---|---|
| `keras-sentemb encode` of 26,000 wiki sentences, median of 2 (s) | 127.59 | 125.73 |
| CT K = 7 training, batch 16, max length 75 (steps/s) | 1.173 | 1.511 |
| SimCSE training, batch 64, max length 32 (steps/s) | 0.523 | 0.594 |

The vectors agree to float rounding (oneDNN sums in another order).

`enable_onednn_opts()` sets `TF_ENABLE_ONEDNN_OPTS=1` on such a CPU before
TensorFlow is imported. The command line and the recipes call it
before TensorFlow starts; importing the package does not (it changes
nothing in the host program), so a library user on such a CPU sets the
variable before importing TensorFlow, or calls this first. A value the user
set is kept, and so is everything once TensorFlow is imported. Other CPUs keep
TensorFlow's default: on AVX-512 hosts with BF16 it is already on, and the
rest were not measured. `onednn_status()` (shown by `kernel_report()`) says
what this process runs.
"""

import os
import sys

from keras_sentemb.kernels import policy as kernel_policy
from keras_sentemb.kernels.policy import ONEDNN_ENV as ENV
from keras_sentemb.kernels.policy import ONEDNN_FOR as TURN_ON_FOR
from keras_sentemb.kernels.policy import onednn_status  # noqa: F401  (part of this module's API)


def enable_onednn_opts(isa=None):
    """Set `TF_ENABLE_ONEDNN_OPTS=1` where it measured faster and nothing decided yet.

    Does nothing when the variable is set already (the user's choice), when
    TensorFlow is already imported (the value is read once, at import), or on
    a CPU outside `TURN_ON_FOR`.

    Args:
        isa: str or None. The CPU's instruction-set class; defaults to
            `kernel_policy.cpu_isa()`.

    Returns:
        bool: whether the variable was set.
    """
    if ENV in os.environ or "tensorflow" in sys.modules:
        return False
    if (kernel_policy.cpu_isa() if isa is None else isa) not in TURN_ON_FOR:
        return False
    os.environ[ENV] = "1"
    kernel_policy.ONEDNN_SET_HERE.append(True)
    return True
