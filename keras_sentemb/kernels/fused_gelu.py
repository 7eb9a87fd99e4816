"""GELU as one fused kernel forward and one backward (XLA), for CPU speed.

keras-hub's Transformer layers apply GELU as a chain of element-wise
TensorFlow ops (`x ** 3`, multiply, add, `tanh`, ...; the `erf` form for the
exact GELU), and autodiff adds a longer chain for the gradient. Each op is a
pass over the `[batch, length, intermediate_dim]` feed-forward activation, the
largest tensor of the model. PyTorch runs one `gelu` and one `gelu_backward`
kernel instead. Here the forward and the gradient are each one small
XLA-compiled function (a single fused loop), joined by `tf.custom_gradient`;
the matrix multiplies around them stay on TensorFlow's own (oneDNN) kernels.
On one AVX2 core this makes `encode` about 12 % faster (README, "Speed").

The values equal keras-hub's to float rounding (a few 1e-6): the same
formulas, evaluated in another order. Half-precision inputs (bfloat16,
float16) are computed in float32 inside the kernel and rounded once at the
end: XLA's CPU code for bfloat16 arithmetic converts every operand, and ran
the kernels 4x (forward) to 7x (backward) slower than float32; computing in
float32 within the fused loop costs one conversion each way and is also the
more exact result. For bfloat16 those two conversions are integer operations
on the bits (`bfloat16_bits`, bit-identical to `tf.cast`), which vectorise
where XLA's own conversion does not: mixed-bfloat16 training's GELU kernels
then run about 2x faster than with XLA's conversion, and faster than float32.

In training, the feed-forward layer's bias add joins the kernel too
(`bias_gelu`: GELU(z + bias) forward; backward the gradient of z and the
bias' gradient summed in float32), so neither a separate bias add nor a
separate bias-gradient reduction runs: forward + backward on a `[2048, 1536]`
activation, one core, 3.5 -> 2.3 ms in bfloat16, 4.3 -> 3.1 ms in float32.

Forward-only graphs (`encode`'s, declared `kernel_policy.declare_graph(forward_only=True)`) take
another route:
the feed-forward layer runs as a 2-D matmul, `bias_add` and TensorFlow's own
GELU, the pattern TensorFlow's graph optimizer turns into one oneDNN matmul
with bias and GELU fused into it (no extra pass over the activation, no XLA
compile per batch shape): bfloat16 encoding 10 % faster. In float32 the exact
GELU takes that route too: on one AVX2 core the fused matmul + bias + exact
GELU of a `[2048, 384] x [384, 1536]` batch takes 30.6 ms, the matmul then the
XLA kernel 30.8 ms, and nothing is compiled per shape. The tanh approximation
keeps the XLA kernel in float32: oneDNN's tanh-GELU post-op took 40.5 ms there.

`SentenceEncoder` installs the fused activation on every Transformer layer
whose feed-forward activation is keras-hub's GELU (tanh approximation, as
BERT) or Keras' exact GELU (as RoBERTa). `FusedGelu` falls back to the
original function in graphs declared plain (`kernel_policy.declare_graph(plain=True)`),
as the SavedModel and LiteRT exports declare theirs, so that exported graphs
contain no XLA-compiled calls (TF Serving builds need not have XLA). `KERAS_SENTEMB_PLAIN_GELU=1` does the same everywhere.
"""

import math

import keras
import tensorflow as tf

from keras_sentemb import compat
from keras_sentemb.kernels import policy as kernel_policy
from keras_sentemb.kernels.bfloat16_bits import narrow, widen
from keras_sentemb.kernels.layer_calls import bind_call
from keras_sentemb.kernels.layer_calls import unbind_call

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)

# Set to "1" to run keras-hub's own GELU, and no XLA-compiled kernel, everywhere
# (e.g. where XLA is missing; `kernel_policy.ENVIRONMENT`).
DISABLE_ENV = "KERAS_SENTEMB_PLAIN_GELU"


def _wide(x):
    """float32 for half-precision tensors (see the module docstring), else `x` as is."""
    return widen(x) if x.dtype in (tf.bfloat16, tf.float16) else x


def _tanh_arg(x):
    c = tf.cast(_SQRT_2_OVER_PI, x.dtype)
    return c * (x + tf.cast(_CUBIC, x.dtype) * x * x * x)


def _gelu(x, approximate):
    """GELU of `x` in `x`'s dtype (keras-hub's tanh approximation or the exact erf form)."""
    if approximate:
        return 0.5 * x * (1.0 + tf.tanh(_tanh_arg(x)))
    return 0.5 * x * (1.0 + tf.math.erf(x * tf.cast(_INV_SQRT_2, x.dtype)))


def _gelu_derivative(x, approximate):
    """d GELU(x) / dx in `x`'s dtype."""
    if approximate:
        t = tf.tanh(_tanh_arg(x))
        c = tf.cast(_SQRT_2_OVER_PI, x.dtype)
        slope = c * (1.0 + tf.cast(3.0 * _CUBIC, x.dtype) * x * x)
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * slope
    cdf = 0.5 * (1.0 + tf.math.erf(x * tf.cast(_INV_SQRT_2, x.dtype)))
    pdf = tf.cast(_INV_SQRT_2PI, x.dtype) * tf.exp(-0.5 * x * x)
    return cdf + x * pdf


@tf.function(jit_compile=True, reduce_retracing=True, autograph=False)
def _gelu_forward(x, approximate):
    return narrow(_gelu(_wide(x), approximate), x.dtype)


@tf.function(jit_compile=True, reduce_retracing=True, autograph=False)
def _gelu_backward(x, dy, approximate):
    return narrow(_wide(dy) * _gelu_derivative(_wide(x), approximate), dy.dtype)


@tf.function(jit_compile=True, reduce_retracing=True, autograph=False)
def _bias_gelu_forward(z, bias, approximate):
    return narrow(_gelu(_wide(z) + bias, approximate), z.dtype)


@tf.function(jit_compile=True, reduce_retracing=True, autograph=False)
def _bias_gelu_backward(z, bias, dy, approximate):
    dz = _wide(dy) * _gelu_derivative(_wide(z) + bias, approximate)
    # One reduction over all rows: here (a wide activation) 3x faster in bfloat16 than
    # partial sums per block of rows, which the layer norm kernel uses.
    return narrow(dz, z.dtype), tf.reduce_sum(tf.reshape(dz, [-1, tf.shape(dz)[-1]]), axis=0)


def bias_gelu(z, bias, approximate):
    """GELU(z + bias) as one fused kernel forward and one backward.

    Args:
        z: floating tensor `[..., width]` (a matmul's output).
        bias: tensor `[width]`, added in float32 (or in `z`'s dtype when wider).
        approximate: bool. The tanh approximation (True) or the exact form.

    Returns:
        a tensor like `z`; the bias' gradient comes back in the bias' dtype,
        summed in float32.
    """
    z = tf.convert_to_tensor(z)
    bias = tf.convert_to_tensor(bias)
    wide = tf.float32 if z.dtype in (tf.bfloat16, tf.float16) else z.dtype

    @tf.custom_gradient
    def fused(z, bias_wide):
        def grad(dy):
            return _bias_gelu_backward(z, bias_wide, dy, bool(approximate))

        return _bias_gelu_forward(z, bias_wide, bool(approximate)), grad

    return fused(z, tf.cast(bias, wide))


def _fused(approximate):
    @tf.custom_gradient
    def gelu(x):
        def grad(dy):
            return _gelu_backward(x, dy, approximate)

        return _gelu_forward(x, approximate), grad

    return gelu


fused_gelu_approximate = _fused(True)
fused_gelu_approximate.__doc__ = "GELU, tanh approximation, fused (see the module docstring)."
fused_gelu_exact = _fused(False)
fused_gelu_exact.__doc__ = "GELU, exact (erf) form, fused (see the module docstring)."


class FusedGelu:
    """A feed-forward activation: fused GELU where the kernel policy says so, else `original`.

    Args:
        original: the layer's own activation function (kept for plain graphs
            and for `unfuse_gelu`).
        approximate: bool. Whether `original` is the tanh approximation.
        policy: a `kernel_policy.KernelPolicy` (or what `KernelPolicy.of` takes).
            Its `gelu` (graphs with gradients) or `gelu_encode` (forward-only
            graphs) decides, through `kernel_policy.decide`. Defaults to "auto".
    """

    def __init__(self, original, approximate, policy=None):
        self.original = original
        self.approximate = bool(approximate)
        self.policy = kernel_policy.KernelPolicy.of(policy)
        self._fused = fused_gelu_approximate if approximate else fused_gelu_exact
        self.__name__ = f"fused_{getattr(original, '__name__', 'gelu')}"

    def __call__(self, x):
        if (not isinstance(x, (tf.Tensor, tf.Variable)) or not x.dtype.is_floating
                or not kernel_policy.decide(_gelu_op(), self.policy)):
            return self.original(x)
        if kernel_policy.graph_kind().forward_only:
            # Nothing differentiates a forward-only graph: the forward kernel alone. Wrapped
            # in `tf.custom_gradient`, each trace would register a gradient in TensorFlow's
            # process-wide registry that holds the graph, and so the encoder, forever.
            return _gelu_forward(x, self.approximate)
        return self._fused(x)

    def __repr__(self):
        kind = "tanh approximation" if self.approximate else "exact"
        return f"FusedGelu({kind})"


def _gelu_op():
    """The policy op of a GELU traced now: `gelu_encode` in forward-only graphs, else `gelu`."""
    return "gelu_encode" if kernel_policy.graph_kind().forward_only else "gelu"


def _gelu_kind(activation):
    """True (tanh approximation), False (exact) or None (not a GELU we know)."""
    if isinstance(activation, FusedGelu):
        return None
    if activation is compat.keras_hub_gelu_approximate():
        return True
    if activation is keras.activations.gelu:
        return False
    return None


def _dense_call(self, inputs, training=None):
    """`Dense.call` with the GELU fused, in one of two forms.

    In a forward-only graph, for the exact GELU in every precision and for the tanh
    approximation in half precision: the 2-D matmul + bias + GELU pattern that oneDNN
    fuses (the float32 tanh approximation keeps the XLA kernel: oneDNN's post-op for it
    is slower; see the module docstring).
    Elsewhere (training): the matmul, then the bias add and the GELU as one XLA
    kernel each way (`bias_gelu`), which also sums the bias' gradient: no
    separate bias add forward or bias gradient backward.
    """
    if (isinstance(self.activation, FusedGelu) and self.bias is not None
            and getattr(self, "quantization_mode", None) is None
            and not getattr(self, "lora_enabled", False)
            and isinstance(inputs, tf.Tensor) and inputs.dtype.is_floating):
        op, policy = _gelu_op(), self.activation.policy
        if op == "gelu":
            if kernel_policy.decide(op, policy):
                return _matmul_then_bias_gelu(self, inputs)
        elif ((inputs.dtype in (tf.bfloat16, tf.float16) or not self.activation.approximate)
              and kernel_policy.decide(op, policy, xla=False)):
            return _matmul_bias_gelu(self, inputs)
    return type(self).call(self, inputs, training=training)


def _matmul_then_bias_gelu(dense, inputs):
    """Training's form: the 2-D matmul, then `bias_gelu` (one XLA kernel each way)."""
    return _on_rows(dense, inputs, lambda z, bias: bias_gelu(
        z, bias, dense.activation.approximate))


def _matmul_bias_gelu(dense, inputs):
    """`encode`'s form (exact GELU, or half precision): matmul + `bias_add` + GELU, which oneDNN fuses."""
    return _on_rows(dense, inputs, lambda z, bias: tf.nn.gelu(
        tf.nn.bias_add(z, tf.cast(bias, z.dtype)), approximate=dense.activation.approximate))


def _on_rows(dense, inputs, bias_and_activation):
    """`dense`'s matmul on the inputs as 2-D rows, `bias_and_activation(z, bias)`, reshaped back.

    The bias is read as stored (float32 under mixed precision); the kernel in the
    compute dtype.
    """
    kernel = tf.convert_to_tensor(dense.kernel)
    with compat.no_autocast():
        bias = tf.convert_to_tensor(dense.bias)
    rows = tf.reshape(tf.cast(inputs, kernel.dtype), [-1, kernel.shape[0]])
    x = bias_and_activation(tf.matmul(rows, kernel), bias)
    return tf.reshape(x, tf.concat([tf.shape(inputs)[:-1], [kernel.shape[1]]], axis=0))


# The GELU forms a feed-forward layer can compute: keras-hub's BERT builds the tanh
# approximation, its RoBERTa and Hugging Face's `hidden_act="gelu"` the exact (erf) form.
GELU_FORMS = ("exact", "tanh")
# Hugging Face `hidden_act` values -> the GELU form they compute.
HF_HIDDEN_ACT = {"gelu": "exact", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh",
                 "gelu_fast": "tanh"}


def check_gelu_form(form):
    """`form` if it is `None` or one of `GELU_FORMS`, else a one-line `ValueError`."""
    if form is not None and form not in GELU_FORMS:
        raise ValueError(f"`feedforward_gelu` must be one of {GELU_FORMS} or None. "
                         f"Received: feedforward_gelu={form!r}.")
    return form


def gelu_form(transformer_layers):
    """`"exact"` or `"tanh"`: the GELU form the feed-forward layers compute (`None` if not GELU)."""
    forms = set()
    for dense in _feedforward_denses(transformer_layers):
        activation = dense.activation
        kind = activation.approximate if isinstance(activation, FusedGelu) else _gelu_kind(
            activation)
        forms.add(None if kind is None else GELU_FORMS[int(kind)])
    return forms.pop() if len(forms) == 1 else None


def set_gelu_form(transformer_layers, form):
    """Make every feed-forward GELU compute `form` (`"exact"` or `"tanh"`); returns how many.

    A checkpoint declares which GELU it was trained with (Hugging Face's
    `hidden_act`); keras-hub builds BERT with the tanh approximation whatever
    the checkpoint says. A fused activation keeps its kernel policy.

    Raises:
        ValueError: `form` is not a GELU form, or a feed-forward activation is
            not a GELU (nothing is changed then).
    """
    if check_gelu_form(form) is None:
        raise ValueError("`set_gelu_form` needs a GELU form: 'exact' or 'tanh'.")
    denses = list(_feedforward_denses(transformer_layers))
    for dense in denses:
        activation = dense.activation
        if not isinstance(activation, FusedGelu) and _gelu_kind(activation) is None:
            raise ValueError(f"`feedforward_gelu` applies to GELU feed-forward layers; "
                             f"this backbone's activation is {activation!r}.")
    approximate = form == "tanh"
    function = compat.keras_hub_gelu_approximate() if approximate else keras.activations.gelu
    for dense in denses:
        activation = dense.activation
        if isinstance(activation, FusedGelu):
            dense.activation = FusedGelu(function, approximate, activation.policy)
        else:
            dense.activation = function
    return len(denses)


def _feedforward_denses(transformer_layers):
    for layer in transformer_layers:
        dense = compat.feedforward_intermediate(layer)
        if dense is not None:
            yield dense


def fuse_gelu(transformer_layers, policy=None):
    """Install `FusedGelu` on the layers' feed-forward activations; returns how many.

    Only keras-hub's GELU (tanh approximation) and Keras' exact GELU are
    replaced; any other activation is left alone. Which form runs is decided
    while a graph is traced, by `policy` (default "auto"). Idempotent
    (installing again binds the new policy).
    """
    policy = kernel_policy.KernelPolicy.of(policy)
    count = 0
    for dense in _feedforward_denses(transformer_layers):
        if isinstance(dense.activation, FusedGelu):
            dense.activation.policy = policy
        kind = _gelu_kind(dense.activation)
        if kind is not None:
            dense.activation = FusedGelu(dense.activation, approximate=kind, policy=policy)
            bind_call(dense, _dense_call)
            count += 1
    return count


def unfuse_gelu(transformer_layers):
    """Put the original activations back; returns how many."""
    count = 0
    for dense in _feedforward_denses(transformer_layers):
        if isinstance(dense.activation, FusedGelu):
            dense.activation = dense.activation.original
            unbind_call(dense)
            count += 1
    return count
