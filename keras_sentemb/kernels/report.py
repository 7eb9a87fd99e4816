"""`kernel_report()`: which kernel, precision and int8 path an encode takes on this CPU, and why.

Importing this module loads no TensorFlow; the precision and int8 entries
read TensorFlow's state only once it is imported.
"""

import os

from keras_sentemb.kernels import policy as kernel_policy


class KernelReport(dict):
    """`kernel_report()`'s answer: a dict that prints as a small table."""

    def __str__(self):
        lines = [f"kernels on this CPU ({self['isa']}):"]
        for op, entry in self["ops"].items():
            lines.append(f"  {op:12s} {entry['kernel']:6s} {entry['why']}")
        onednn = self["onednn"]
        state = {True: "on", False: "off", None: "-"}[onednn["enabled"]]
        lines.append(f"  {'oneDNN':12s} {state:6s} {onednn['why']}")
        precision = self["precision"]
        lines.append(f"  {'precision':12s} {precision['computes']:8s} {precision['why']}")
        training = self["training"]
        computes = "mixed bfloat16" if training["computes"] == "bfloat16" else training["computes"]
        lines.append(f"  {'training':12s} {computes:8s} {training['why']}")
        int8 = self["int8"]
        lines.append(f"  {'int8':12s} {'yes' if int8['available'] else 'no':8s} {int8['why']}")
        return "\n".join(lines)


def precision_status(precision=None):
    """`{"asked", "computes", "why"}`: what an encode in `precision` computes in here, and why.

    `precision` defaults to `"auto"` (`keras_sentemb.kernels.precision.auto_precision`).
    """
    from keras_sentemb.kernels import precision as precisions
    from keras_sentemb.kernels.native_bfloat16 import falls_back

    asked = precisions.check_encode_precision(precision)
    if asked == "auto":
        computes, why = precisions.auto_precision()
        why = f"auto: {why}"
    elif asked == "bfloat16" and falls_back():
        computes, why = "float32", "asked for bfloat16, which this CPU only emulates"
    else:
        computes, why = asked, "asked for"
    return {"asked": asked, "computes": computes, "why": why}


def training_precision_status(precision=None):
    """`{"asked", "computes", "why"}`: what a `fit_*` run in `precision` computes in here, and why.

    `precision` defaults to `"auto"`, the default of every `fit_*`
    (`keras_sentemb.kernels.precision.resolve_training_precision`):
    `"bfloat16"` means mixed precision (bfloat16 compute, float32 weights,
    optimizer state, layer norms, similarities and losses).
    """
    from keras_sentemb.kernels import precision as precisions

    asked = precisions.check_training_precision(precision)
    computes, why = precisions.resolve_training_precision(asked)
    return {"asked": asked, "computes": computes, "why": why}


def int8_status():
    """`{"available", "why"}`: whether int8 encoding runs here (TensorFlow's oneDNN kernels)."""
    import sys

    if "tensorflow" not in sys.modules:
        return {"available": None, "why": "TensorFlow not imported yet"}
    from keras_sentemb.kernels.int8_transformer import int8_available

    available, why = int8_available()
    return {"available": available, "why": why}


def kernel_report(policy=None, isa=None, precision=None, training_precision=None):
    """Which kernel each op uses on this CPU, and why.

    For each op of `KernelPolicy` (the fused Transformer layer, the GELU in
    training and in encoding, the layer norm, the dropout): `"fused"` or
    `"plain"`, and the reason: an environment override
    (`KERAS_SENTEMB_PLAIN_*=1`), the policy's explicit choice, or the measured
    table row of this CPU's instruction set (`kernel_policy.MEASURED`, from
    `benchmarks/kernel_choice.py`). Where an op applies at all (e.g. the fused
    Transformer layer only in encoding) is in `applies`.

    Args:
        policy: a `KernelPolicy`, `"auto"`, `"fused"`, `"plain"`, a dict op ->
            choice, or a `SentenceEncoder` (its policy). Defaults to `"auto"`.
        isa: str or None. `"avx512"`, `"avx2"` or `"other"`, to see another CPU
            class's choices. Defaults to this CPU's (`kernel_policy.cpu_isa()`).
        precision: str or None. The precision an encode asks for (`"auto"`,
            `"float32"`, `"bfloat16"`, `"int8"`), for the `precision` entry.
            Defaults to `"auto"`.
        training_precision: str or None. The precision a training run asks
            for (`"auto"`, `"float32"`, `"bfloat16"`), for the `training`
            entry. Defaults to `"auto"` (the default of every `fit_*`).

    Returns:
        a dict (`KernelReport`; `print` shows it as a table): `isa`,
        `cpu_flags_read` (whether the CPU flags could be read), `ops`, op ->
        `{"kernel": "fused" | "plain", "why": str, "applies": str}`, and
        `onednn`, `{"enabled": bool or None, "why": str}`: whether TensorFlow's
        oneDNN kernels run in this process (`onednn_status`); `precision`,
        `{"asked", "computes", "why"}`: what an encode computes in here
        (`precision_status`); `training`, `{"asked", "computes", "why"}`: what a
        training run computes in here (`training_precision_status`); `int8`,
        `{"available", "why"}` (`int8_status`).

    Examples:

    ```python
    import keras_sentemb
    print(keras_sentemb.kernel_report())
    keras_sentemb.kernel_report()["ops"]["layer_norm"]["kernel"]  # "fused" or "plain"
    ```
    """
    if policy is not None and not isinstance(policy, (kernel_policy.KernelPolicy, str, dict)):
        policy = getattr(policy, "kernels", policy)
    policy = kernel_policy.KernelPolicy.of(policy)
    if isa is not None and isa not in kernel_policy.MEASURED:
        raise ValueError(
            f"`isa` must be one of {sorted(kernel_policy.MEASURED)}, received {isa!r}.")
    isa = kernel_policy.cpu_isa() if isa is None else isa
    ops = {}
    for op, what in kernel_policy.OPS.items():
        kernel, why = policy.choice(op, isa)
        no_xla = os.environ.get(kernel_policy.NO_XLA_ENV, "") == "1"
        if kernel == "fused" and op in kernel_policy.NEEDS_XLA and no_xla:
            kernel = "plain"
            why = f"environment {kernel_policy.NO_XLA_ENV}=1 (no XLA-compiled kernels)"
        ops[op] = {"kernel": kernel, "why": why, "applies": what}
    enabled, why = kernel_policy.onednn_status()
    return KernelReport(isa=isa, cpu_flags_read=kernel_policy.cpu_flag_set() is not None, ops=ops,
                        onednn={"enabled": enabled, "why": why},
                        precision=precision_status(precision),
                        training=training_precision_status(training_precision),
                        int8=int8_status())
