"""Which kernel each op of a `SentenceEncoder` runs: `KernelPolicy`, decided in one place.

The encoder can run seven ops either as a fused kernel of this package or as
the plain TensorFlow / Keras / keras-hub ops (oneDNN's kernels on a CPU):

| op | fused form | where it applies |
|---|---|---|
| `transformer` | a Transformer layer's forward pass in fewer, larger ops (`fused_transformer`) | encoding (forward-only graphs) |
| `gelu` | bias add + GELU as one XLA kernel forward and one backward (`fused_gelu`) | graphs that compute gradients |
| `gelu_encode` | oneDNN's fused matmul + bias + GELU (exact GELU; the tanh approximation in half precision); the float32 tanh approximation as one XLA kernel (`fused_gelu`) | encoding (forward-only graphs) |
| `layer_norm` | layer normalisation as one XLA kernel each way (`fused_layer_norm`) | graphs that compute gradients |
| `layer_norm_encode` | oneDNN's layer normalisation kernel (`fused_layer_norm`) | encoding, where TensorFlow's oneDNN kernels are on; int8 serving graphs |
| `dropout` | masks from 16-bit random integers, the masking as one XLA kernel (`fast_dropout`) | training |
| `unpadded` | a Transformer layer on the real tokens' rows only, padding rows skipped (`unpadded_transformer`) | graphs that compute gradients |

A `KernelPolicy` says, per op, `"fused"`, `"plain"` or `"auto"`. An encoder
holds one (`SentenceEncoder(..., kernels=...)`, `from_preset(..., kernels=...)`,
default `"auto"`), `install_kernels` binds it to the backbone's layers, and
while a graph is traced every op asks `decide(op, policy)`, which answers in
this order:

1. the documented environment overrides (`ENVIRONMENT`): `KERAS_SENTEMB_PLAIN_GELU=1`
   turns every XLA-compiled kernel off (both GELU forms and the layer norm; dropout
   keeps its 16-bit masks, applied by separate ops), `KERAS_SENTEMB_PLAIN_LAYER_NORM=1`,
   `KERAS_SENTEMB_PLAIN_DROPOUT=1` and `KERAS_SENTEMB_PLAIN_TRANSFORMER=1` one op each;
2. the kind of the graph being traced (`GraphKind`), which the function that builds
   the graph declares as its first line (`declare_graph`) and which is recorded on
   that graph: a `plain` graph (the LiteRT export's serving function) uses no
   XLA-compiled call, every op plain except dropout's 16-bit masks; a `serving`
   graph (the SavedModel's, forward-only) uses no XLA-compiled call either, but the
   encoding kernels made of TensorFlow ops (the fused Transformer layer, oneDNN's
   matmul + bias + GELU pattern) apply, and oneDNN's own ops only where the graph
   needs oneDNN anyway (int8); `transformer`, `gelu_encode` and `layer_norm_encode`
   apply only in a `forward_only` graph (`encode`'s), `gelu` and `layer_norm` only
   outside one. An undeclared graph, and eager execution, is a graph that may
   compute gradients (training);
3. the policy's explicit `"fused"` / `"plain"`;
4. `"auto"`: the row of `MEASURED` for this CPU's instruction set (`cpu_isa()`: AVX-512,
   AVX2 or other, from the CPU flags read once).

`kernel_report()` (in `report.py`; also `keras_sentemb.kernel_report()` and `--verbose` on
`keras-sentemb encode` / `train`) lists each op's choice on this CPU and why.
Besides the policy and the environment, a trace reads only the declared kind
of the graph it builds: a property of that graph, not of the thread or the
process, so graphs traced one after another or side by side in several
threads each see their own.
"""

import dataclasses
import functools
import os

CHOICES = ("auto", "fused", "plain")

# The ops a policy chooses for, and what their fused form is (see the module docstring).
OPS = {
    "transformer": "fused Transformer layer in encoding (forward-only graphs)",
    "gelu": "bias + GELU as one XLA kernel each way (training graphs)",
    "gelu_encode": "GELU in encoding: oneDNN matmul+bias+GELU (exact, or half) / XLA (float32 tanh)",
    "layer_norm": "layer normalisation as one XLA kernel each way (training graphs)",
    "layer_norm_encode": "layer normalisation in encoding as oneDNN's kernel (oneDNN on)",
    "dropout": "dropout masks from 16-bit random integers (training)",
    "unpadded": "Transformer layers on the real tokens only, padding skipped (training graphs)",
}

# The documented environment overrides: variable -> the ops it makes plain. The GELU
# switch also turns every XLA-compiled kernel off (`xla_allowed`).
ENVIRONMENT = {
    "KERAS_SENTEMB_PLAIN_GELU": ("gelu", "gelu_encode", "layer_norm"),
    "KERAS_SENTEMB_PLAIN_LAYER_NORM": ("layer_norm", "layer_norm_encode"),
    "KERAS_SENTEMB_PLAIN_DROPOUT": ("dropout",),
    "KERAS_SENTEMB_PLAIN_TRANSFORMER": ("transformer", "unpadded"),
}
NO_XLA_ENV = "KERAS_SENTEMB_PLAIN_GELU"

_FUSED_EVERYWHERE = {op: "fused" for op in OPS}

# What "auto" means per instruction set: fused where the fused kernel measured faster than
# the plain TensorFlow / oneDNN ops on that instruction set (benchmarks/kernel_choice.py:
# forward + backward for the training kernels, forward for the encoding ones; realistic
# shapes, batch 16-64, length 32-75, width 384; interleaved repeats, medians).
MEASURED = {
    # Not measured by benchmarks/kernel_choice.py: the behaviour these kernels were
    # introduced with (measured end to end on AVX-512 hosts, docs/performance.md).
    # `unpadded` removes arithmetic (fewer rows through the same matmuls) rather than
    # reordering it: fused on every CPU by construction.
    "avx512": dict(_FUSED_EVERYWHERE),
    # A real AVX2-only AMD EPYC (Zen 3 class, 2 cores shared with other work): every fused
    # kernel measured faster than the plain ops. plain / fused, geometric mean over the two
    # shapes, float32, two runs: gelu 1.16x / 1.32x, gelu_encode 1.19x / 1.09x, layer_norm
    # 1.65x / 1.73x, dropout 1.72x / 1.76x, transformer 1.30x / 1.11x (1.83x / 1.68x in
    # bfloat16) (benchmarks/results/kernel_choice_avx2.json, kernel_choice_avx2_run1.json);
    # unpadded 2.02x (kernel_choice_avx2_unpadded.json).
    "avx2": dict(_FUSED_EVERYWHERE),
    # Not measured (Arm, older x86, unknown): the behaviour before this table.
    "other": dict(_FUSED_EVERYWHERE),
}
MEASURED_SOURCE = {
    "avx512": "not measured by benchmarks/kernel_choice.py; fused as introduced",
    "avx2": "benchmarks/kernel_choice.py on an AVX2-only AMD EPYC",
    "other": "not measured; fused as introduced",
}

CPUINFO = "/proc/cpuinfo"


def cpu_flag_set(path=None):
    """The CPU's feature flags (lower case) from `/proc/cpuinfo`, or `None` where unreadable."""
    try:
        with open(CPUINFO if path is None else path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip().lower() in ("flags", "features"):
                    return frozenset(value.lower().split())
    except OSError:
        return None
    return None


def isa_of(flags):
    """`"avx512"` (has `avx512f`), `"avx2"` (has `avx2`) or `"other"` for a set of CPU flags."""
    flags = frozenset(flags or ())
    if "avx512f" in flags:
        return "avx512"
    if "avx2" in flags:
        return "avx2"
    return "other"


def _isa_cap():
    """`"avx2"` when the process caps vector code at AVX2 (oneDNN's and XLA's limits), else None."""
    onednn = (os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or "")
    xla = os.environ.get("XLA_FLAGS", "")
    if onednn.upper().startswith("AVX2") and "--xla_cpu_max_isa=AVX2" in xla:
        return "avx2"
    return None


@functools.lru_cache(maxsize=1)
def _detected_isa():
    return isa_of(cpu_flag_set())


def cpu_isa():
    """The instruction-set class `"auto"` reads `MEASURED` with: `"avx512"`, `"avx2"` or `"other"`.

    From the CPU flags (read once). A process whose oneDNN and XLA vector code are both
    capped at AVX2 (`ONEDNN_MAX_CPU_ISA=AVX2` and `XLA_FLAGS=--xla_cpu_max_isa=AVX2`, an
    emulation of an AVX2 CPU on an AVX-512 one) counts as `"avx2"`.
    """
    detected = _detected_isa()
    cap = _isa_cap()
    return cap if cap and detected == "avx512" else detected


@dataclasses.dataclass(frozen=True)
class KernelPolicy:
    """Which kernel each op runs: `"fused"`, `"plain"` or `"auto"` (per CPU, `MEASURED`).

    Args:
        transformer: str. The fused Transformer layer in encoding.
            Defaults to `"auto"`.
        gelu: str. The fused bias + GELU kernels in training graphs. Defaults to `"auto"`.
        gelu_encode: str. The fused GELU in encoding graphs. Defaults to `"auto"`.
        layer_norm: str. The fused layer norm kernels in training graphs. Defaults to `"auto"`.
        dropout: str. The 16-bit-mask dropout. Defaults to `"auto"`.
        unpadded: str. Transformer layers in training graphs on the real tokens
            only. Defaults to `"auto"`.
        layer_norm_encode: str. oneDNN's layer norm kernel in encoding graphs
            (where TensorFlow's oneDNN kernels are on). Defaults to `"auto"`.

    Examples:

    ```python
    SentenceEncoder.from_preset("default", kernels=KernelPolicy(dropout="plain"))
    SentenceEncoder.from_preset("default", kernels="plain")  # every op plain
    ```
    """

    transformer: str = "auto"
    gelu: str = "auto"
    gelu_encode: str = "auto"
    layer_norm: str = "auto"
    dropout: str = "auto"
    unpadded: str = "auto"
    layer_norm_encode: str = "auto"

    def __post_init__(self):
        for op in OPS:
            value = getattr(self, op)
            if value not in CHOICES:
                raise ValueError(
                    f"KernelPolicy: `{op}` must be one of {list(CHOICES)}, received {value!r}."
                )

    @classmethod
    def of(cls, value):
        """A policy from a `KernelPolicy`, `None` / `"auto"`, `"fused"`, `"plain"` or a dict."""
        if isinstance(value, cls):
            return value
        if value is None:
            return cls()
        if isinstance(value, str):
            if value not in CHOICES:
                raise ValueError(
                    f"`kernels` must be one of {list(CHOICES)}, a dict or a KernelPolicy; "
                    f"received {value!r}."
                )
            return cls(**{op: value for op in OPS})
        if isinstance(value, dict):
            unknown = sorted(set(value) - set(OPS))
            if unknown:
                raise ValueError(
                    f"`kernels` names unknown ops {unknown}; the ops are {list(OPS)}."
                )
            return cls(**value)
        raise ValueError(
            "`kernels` must be 'auto', 'fused', 'plain', a dict of op -> choice or a "
            f"KernelPolicy; received {type(value).__name__}."
        )

    def to_config(self):
        """`"auto"` when every op is `"auto"`, else a dict op -> choice (JSON, `of` reads it)."""
        config = dataclasses.asdict(self)
        return "auto" if all(v == "auto" for v in config.values()) else config

    @property
    def is_auto(self):
        return all(getattr(self, op) == "auto" for op in OPS)

    def choice(self, op, isa=None):
        """`("fused" | "plain", why)` for `op` on a CPU of class `isa` (default: this CPU).

        The environment overrides and the policy's own value; the graph's kind is
        `decide`'s.
        """
        for name, ops in ENVIRONMENT.items():
            if op in ops and os.environ.get(name, "") == "1":
                return "plain", f"environment {name}=1"
        value = getattr(self, op)
        if value != "auto":
            return value, "policy"
        isa = cpu_isa() if isa is None else isa
        return MEASURED[isa][op], f"table, {isa} row ({MEASURED_SOURCE[isa]})"


DEFAULT = KernelPolicy()

# ------------------------------------------------------------------- graph kinds
@dataclasses.dataclass(frozen=True)
class GraphKind:
    """What a traced graph is for; `decide` reads it from the graph being traced.

    Args:
        forward_only: bool. The graph never runs backward (encoding): the
            encoding kernels (`transformer`, `gelu_encode`) apply, the training
            ones (`gelu`, `layer_norm`) do not. Defaults to `False`.
        plain: bool. The graph is exported: no XLA-compiled kernel (TF Serving
            builds need not have XLA; converters want plain ops); every op is
            plain except dropout's 16-bit masks, applied by separate ops.
            Defaults to `False`.
        int8: bool. The graph computes in int8: Transformer layers that hold
            int8 weights (`int8_transformer`) run their int8 form. Defaults to
            `False`.
        serving: bool. The graph is a SavedModel's serving function: no
            XLA-compiled kernel (TF Serving builds need not have XLA); the
            encoding kernels that are TensorFlow ops apply when it is also
            `forward_only`; oneDNN's own ops (`layer_norm_encode`) only when it
            is `int8`, since float graphs must also run where oneDNN is off.
            Defaults to `False`.
    """

    forward_only: bool = False
    plain: bool = False
    int8: bool = False
    serving: bool = False


# The kind of an undeclared graph and of eager execution: a graph that may compute gradients.
UNDECLARED = GraphKind()
# Where a declared graph keeps its kind: an attribute of the graph object itself.
_KIND_ATTRIBUTE = "_keras_sentemb_graph_kind"


def _graph_being_built():
    """The graph ops are added to now, or `None` under eager execution."""
    import tensorflow as tf  # here: importing this module (`kernel_report` reads it) loads no TensorFlow

    return None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()


def declare_graph(forward_only=False, plain=False, int8=False, serving=False):
    """Declare the kind of the graph being traced now; the first line of a traced function.

    The kind is recorded on the graph itself (the `FuncGraph` that `tf.function`
    traces), so it holds for every op that graph and the graphs nested in it
    (`tf.cond` branches, loop bodies, inner `tf.function`s) add, and for no
    other graph: nothing per thread, nothing that outlives the graph. An
    undeclared graph is `UNDECLARED`: one that may compute gradients, XLA
    kernels allowed. Under eager execution (e.g. `tf.config.run_functions_eagerly`)
    there is no graph to declare: the call does nothing, ops run as `UNDECLARED`.
    An inner `tf.function` that declares nothing takes the kind of the graph it
    is first traced in, and TensorFlow reuses that trace wherever it is called
    again with the same input signature.

    Args:
        forward_only: bool. See `GraphKind`. Defaults to `False`.
        plain: bool. See `GraphKind`. Defaults to `False`.
        int8: bool. See `GraphKind`. Defaults to `False`.
        serving: bool. See `GraphKind`. Defaults to `False`.

    Returns:
        the `GraphKind` declared.

    Raises:
        ValueError: the graph was already declared as another kind.

    Examples:

    ```python
    @tf.function
    def encode(inputs):
        declare_graph(forward_only=True)
        return encoder(inputs, training=False)
    ```
    """
    kind = GraphKind(forward_only=bool(forward_only), plain=bool(plain), int8=bool(int8),
                     serving=bool(serving))
    graph = _graph_being_built()
    if graph is None:
        return kind
    declared = getattr(graph, _KIND_ATTRIBUTE, None)
    if declared is not None and declared != kind:
        raise ValueError(f"This graph is already declared as {declared}; cannot declare {kind}.")
    setattr(graph, _KIND_ATTRIBUTE, kind)
    return kind


def graph_kind():
    """The kind of the graph being traced now: its own declaration or its nearest outer graph's.

    `UNDECLARED` where no graph up the chain declared one, and under eager execution.
    """
    graph = _graph_being_built()
    while graph is not None:
        kind = getattr(graph, _KIND_ATTRIBUTE, None)
        if kind is not None:
            return kind
        graph = getattr(graph, "outer_graph", None)
    return UNDECLARED


def xla_allowed():
    """Whether XLA-compiled kernels may be used here (not in an exported graph, no GELU override)."""
    kind = graph_kind()
    return not (kind.plain or kind.serving) and os.environ.get(NO_XLA_ENV, "") != "1"


def compiles_per_shape(concrete_function):
    """Whether a traced graph calls an XLA-compiled function.

    XLA compiles such a function once for every input shape it meets, so a
    graph run on many batch shapes pays one compilation per shape; a graph
    without one runs any shape at no extra cost.
    """
    from keras_sentemb import compat

    return compat.calls_xla_compiled_function(concrete_function)


# Ops that exist only in forward-only graphs (True) or only in gradient graphs (False).
_FORWARD_ONLY = {"transformer": True, "gelu_encode": True, "gelu": False, "layer_norm": False,
                 "unpadded": False, "layer_norm_encode": True}
NEEDS_XLA = ("gelu", "gelu_encode", "layer_norm")


def decide(op, policy=None, xla=True):
    """Whether `op` runs its fused kernel in the graph being traced now, under `policy`.

    In the order of the module docstring: the environment, the graph's kind
    (`graph_kind()`), the policy, the measured table. `xla=False` asks for the
    form of `op` made of TensorFlow ops (`gelu_encode`'s oneDNN matmul + bias +
    GELU pattern), which needs no XLA.
    """
    if op not in OPS:
        raise ValueError(f"Unknown kernel op {op!r}; the ops are {list(OPS)}.")
    policy = DEFAULT if policy is None else policy
    kind = graph_kind()
    if op in _FORWARD_ONLY and _FORWARD_ONLY[op] != kind.forward_only:
        return False
    if kind.plain and op != "dropout":
        return False
    # oneDNN's own ops: where oneDNN runs, and in serving graphs only those that need it anyway.
    if op == "layer_norm_encode" and (not _onednn_on() or (kind.serving and not kind.int8)):
        return False
    if op in NEEDS_XLA and xla and not xla_allowed():
        return False
    return policy.choice(op)[0] == "fused"


def _onednn_on():
    from keras_sentemb import compat

    return compat.onednn_enabled()


# ------------------------------------------------------------- binding to layers
# The policy a patched layer (or a FusedGelu activation) reads while traced; set by
# `attach`, not tracked by Keras (not a weight, not part of the layer's config).
POLICY_ATTRIBUTE = "_keras_sentemb_kernels"


def attach(obj, policy):
    setattr(obj, POLICY_ATTRIBUTE, KernelPolicy.of(policy))  # a plain value: Keras tracks nothing


def policy_of(obj):
    """The policy `attach` bound to `obj`, else the default ("auto" everywhere)."""
    return obj.__dict__.get(POLICY_ATTRIBUTE, DEFAULT) if hasattr(obj, "__dict__") else DEFAULT


# ------------------------------------------------------------------------ oneDNN
# TensorFlow's switch for its oneDNN CPU kernels, read once when TensorFlow is imported
# (`onednn_opts` sets it where it measured faster).
ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"
# Instruction-set classes (`cpu_isa()`) where oneDNN measured faster and TensorFlow leaves it off.
ONEDNN_FOR = ("avx2",)
# Non-empty once `onednn_opts.enable_onednn_opts` set the variable in this process.
ONEDNN_SET_HERE = []


def onednn_status():
    """`(enabled, why)`: whether TensorFlow's oneDNN kernels run in this process, and why.

    `enabled` is `None` while TensorFlow is not imported (nothing is decided yet).
    """
    import sys

    value = os.environ.get(ONEDNN_ENV)
    if "tensorflow" not in sys.modules:
        enabled, why = None, "TensorFlow not imported yet"
    else:
        from keras_sentemb import compat

        enabled = compat.onednn_enabled()
        why = (f"{ONEDNN_ENV}={value}" if value is not None
               else "TensorFlow's default for this CPU")
        if ONEDNN_SET_HERE and value == "1":
            why += " (set for this CPU, where it measured faster)"
    if enabled is False and cpu_isa() in ONEDNN_FOR:
        why += f"; {ONEDNN_ENV}=1 before importing TensorFlow is faster on this CPU"
    return enabled, why
