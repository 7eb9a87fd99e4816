"""int8 inference of a Transformer layer: oneDNN's quantized matrix multiplies, calibrated ranges.

Nearly all of an encoder's arithmetic is in four matrix multiplies per
Transformer layer: the query / key / value projection, the attention output,
and the feed-forward layer's two. `int8_call` runs each of them as oneDNN's
int8 matrix multiply with its bias, its activation, its residual add and the
conversion of its output fused in (`compat.quantized_matmul`, TensorFlow's
`_QuantizedMatMul`, the op Intel's Neural Compressor writes into quantized
graphs); the attention scores, the softmax and the layer norms stay float32:

- the weights are int8, one scale per output column (symmetric, `round(127 *
  w / max |column|)`);
- the activations entering each matrix multiply are uint8 over a fixed range
  per layer and site (`MIN_FIRST`: an offset and a scale), measured once on
  calibration sentences (`calibrate`): static quantization. Fixed ranges let
  oneDNN keep its prepared kernels between batches (a range per batch would
  make it prepare them again for every batch) and let the feed-forward layer
  pass its GELU output to the second matrix multiply as uint8, never
  written out in float32;
- the residual adds after the attention output and the feed-forward output
  are fused into those matrix multiplies.

The quantized graph is made of TensorFlow ops only (`QuantizeV2`,
`_QuantizedMatMul`, the float ops around them): `encode(precision="int8")`
runs it, and a SavedModel exported with `precision="int8"` holds the same
graph for TF Serving. Its int8 kernels run where TensorFlow's oneDNN
kernels are on: by default on x86 CPUs with AVX512-VNNI, AVX512-BF16 or
AMX, and with `TF_ENABLE_ONEDNN_OPTS=1` on the others (the command line sets
it on AVX2-only CPUs). `int8_available()` tells.

A site's calibration range is its smallest and largest value over the real
tokens of each calibration batch, averaged over the batches. On the default
model (STS-B dev, float32 86.72) that kept 86.70 with 128 calibration
sentences; ranges holding only the central 99.99 % of each batch's values
(clipping the outlier dimensions BERT layers have) kept 86.39, 99.9 % 83.49.
"""

import numpy as np
import tensorflow as tf

from keras_sentemb import compat
from keras_sentemb.kernels import policy as kernel_policy
from keras_sentemb.kernels import unpadded_transformer
from keras_sentemb.kernels.fused_gelu import gelu_form

# Where a layer quantizes its activations: the input of the Q/K/V projection, of
# the attention output projection, of the feed-forward layer, and the feed-forward
# activation's output (the second feed-forward matrix multiply's input).
SITES = ("qkv", "out", "inter", "ffout")
# The feed-forward activations the fused kernel computes: form -> its name there.
ACTIVATIONS = {"exact": "GeluExact", "tanh": "GeluApproximate"}
# Where a quantized layer keeps its weights: an attribute of the layer object.
WEIGHTS_ATTRIBUTE = "_keras_sentemb_int8"


def int8_available():
    """`(available, why)`: whether int8 inference runs in this process, and why not."""
    if not compat.onednn_enabled():
        return False, ("int8 inference runs on TensorFlow's oneDNN kernels, which are off in "
                       "this process: set TF_ENABLE_ONEDNN_OPTS=1 before TensorFlow is imported")
    return True, "TensorFlow's oneDNN int8 kernels"


def feedforward_activation(layer):
    """The fused kernel's name for `layer`'s feed-forward activation, or None."""
    return ACTIVATIONS.get(gelu_form([layer]))


def quantize_kernel(kernel):
    """`(int8 [k, m], column maxima float32 [m])`: symmetric per-column quantization."""
    kernel = np.asarray(kernel, np.float32)
    column_max = np.maximum(np.abs(kernel).max(axis=0), np.finfo(np.float32).tiny)
    quantized = np.clip(np.rint(kernel / column_max * 127.0), -127, 127).astype(np.int8)
    return quantized, column_max.astype(np.float32)


def _site_denses(layer):
    """site -> (float32 kernel [k, m], bias [m]) of the layer's four matrix multiplies."""
    parts = compat.transformer_parts(layer)
    attention = parts.attention
    kernel, bias = unpadded_transformer.qkv_projection(attention, tf.float32)

    def flat(dense):
        kernel = tf.convert_to_tensor(dense.kernel)
        kernel = tf.reshape(kernel, [-1, kernel.shape[-1]]) if kernel.shape.rank == 3 else kernel
        return tf.cast(kernel, tf.float32), tf.cast(tf.reshape(dense.bias, [-1]), tf.float32)

    return {"qkv": (kernel, bias), "out": flat(attention.output_dense),
            "inter": flat(parts.intermediate), "ffout": flat(parts.output)}


class Int8Weights(tf.Module):
    """One Transformer layer's int8 kernels, column ranges, biases and activation ranges.

    Args:
        layer: a keras-hub `TransformerEncoder` (float32 weights).
        ranges: dict site -> `(low, high)`: the calibrated range of each of `SITES`.
        name: str or None. The module's name.
    """

    def __init__(self, layer, ranges, name=None):
        super().__init__(name=name)
        self.activation = feedforward_activation(layer)
        for site, (kernel, bias) in _site_denses(layer).items():
            quantized, column_max = quantize_kernel(kernel.numpy())
            low, high = (float(v) for v in ranges[site])
            # MIN_FIRST ranges hold zero (TensorFlow's QuantizeV2 widens them to).
            low, high = min(low, 0.0), max(high, 0.0)
            setattr(self, f"{site}_kernel", tf.Variable(quantized, trainable=False,
                                                        name=f"{site}_kernel"))
            setattr(self, f"{site}_column_max", tf.Variable(column_max, trainable=False,
                                                            name=f"{site}_column_max"))
            setattr(self, f"{site}_bias", tf.Variable(bias, trainable=False, name=f"{site}_bias"))
            setattr(self, f"{site}_range", tf.Variable([low, high], trainable=False,
                                                       name=f"{site}_range"))

    def ranges(self):
        """site -> `(low, high)` as Python floats."""
        return {site: tuple(float(v) for v in getattr(self, f"{site}_range").numpy())
                for site in SITES}


def supports_int8(layer):
    """Whether `int8_call` computes what `layer` does (the plain keras-hub layer, GELU)."""
    return unpadded_transformer.supports(layer) and feedforward_activation(layer) is not None


def attach(layer, weights):
    """Bind `weights` (an `Int8Weights`, or None to detach) to `layer`; not tracked by Keras."""
    if weights is None:
        layer.__dict__.pop(WEIGHTS_ATTRIBUTE, None)
    else:
        object.__setattr__(layer, WEIGHTS_ATTRIBUTE, weights)


def weights_of(layer):
    """The `Int8Weights` bound to `layer`, or None."""
    return layer.__dict__.get(WEIGHTS_ATTRIBUTE) if hasattr(layer, "__dict__") else None


# ----------------------------------------------------------------- the layer
def _layer_rows(layer, inputs, padding_mask, attention_mask, ops):
    """`layer`'s forward pass (inference) with its matrix multiplies done by `ops`."""
    shape = tf.shape(inputs)
    batch, length, width = shape[0], shape[1], inputs.shape[-1]
    bias = unpadded_transformer.mask_bias(padding_mask, attention_mask, inputs.dtype)
    parts = compat.transformer_parts(layer)
    attention = parts.attention
    x = tf.reshape(inputs, [-1, width])
    residual = x
    if layer.normalize_first:
        x = parts.attention_norm(x)
    context = unpadded_transformer.attend(ops.project(x), batch, length, bias,
                                          attention.num_heads, attention.key_dim)
    x = ops.project_out(context, residual)
    if not layer.normalize_first:
        x = parts.attention_norm(x)
    residual = x
    if layer.normalize_first:
        x = parts.output_norm(x)
    x = ops.feedforward(x, residual)
    if not layer.normalize_first:
        x = parts.output_norm(x)
    return tf.reshape(x, shape)


def _quantize(x, site_range):
    """`(quint8 x, min, max)`: `x` over its calibrated range, `MIN_FIRST` mode."""
    return tf.raw_ops.QuantizeV2(input=x, min_range=site_range[0], max_range=site_range[1],
                                 T=tf.quint8, mode="MIN_FIRST")


class _Int8Ops:
    """The quantized matrix multiplies of one layer."""

    def __init__(self, weights):
        self.w = weights

    def _operands(self, site):
        column_max = tf.convert_to_tensor(getattr(self.w, f"{site}_column_max"))
        return (tf.bitcast(getattr(self.w, f"{site}_kernel"), tf.qint8),
                tf.convert_to_tensor(getattr(self.w, f"{site}_bias")),
                (-column_max, column_max))

    def _matmul(self, x, site, fused_ops, **kwargs):
        xq, low, high = _quantize(x, getattr(self.w, f"{site}_range"))
        kernel, bias, column_range = self._operands(site)
        return compat.quantized_matmul(xq, kernel, bias, (low, high), column_range, fused_ops,
                                       name=f"int8_{site}", **kwargs)

    def project(self, x):
        return self._matmul(x, "qkv", ("BiasAdd", "Dequantize"))

    def project_out(self, context, residual):
        return self._matmul(context, "out", ("BiasAdd", "Add", "Dequantize"), addend=residual)

    def feedforward(self, x, residual):
        ffout_range = getattr(self.w, "ffout_range")
        hidden, low, high = self._matmul(
            x, "inter", ("BiasAdd", self.w.activation, "Requantize"),
            out_range=(ffout_range[0], ffout_range[1]))
        kernel, bias, column_range = self._operands("ffout")
        return compat.quantized_matmul(hidden, kernel, bias, (low, high), column_range,
                                       ("BiasAdd", "Add", "Dequantize"), addend=residual,
                                       name="int8_ffout")


def int8_call(layer, inputs, padding_mask, attention_mask=None):
    """`layer`'s forward pass (inference) on float32 `inputs` `[batch, length, width]`, in int8.

    Only in a graph being traced (`use_int8` asks for a graph declared int8).
    """
    return _layer_rows(layer, inputs, padding_mask, attention_mask, _Int8Ops(weights_of(layer)))


def use_int8(layer, inputs, padding_mask, training, return_attention_scores):
    """Whether `layer` runs `int8_call` on these inputs: a graph declared int8, int8 weights."""
    return (not training and not return_attention_scores and padding_mask is not None
            and isinstance(inputs, tf.Tensor) and inputs.dtype == tf.float32
            and inputs.shape.rank == 3 and kernel_policy.graph_kind().int8
            and weights_of(layer) is not None)


# ----------------------------------------------------------------- calibration
class _CalibrationOps:
    """The float32 matrix multiplies of one layer, recording each site's range on the real tokens."""

    def __init__(self, layer, keep):
        self.denses = _site_denses(layer)
        self.approximate = feedforward_activation(layer) == ACTIVATIONS["tanh"]
        self.keep = keep
        self.ranges = {}

    def _record(self, x, site):
        keep = self.keep[:, tf.newaxis]
        self.ranges[site] = tf.stack([tf.reduce_min(tf.where(keep, x, x.dtype.max)),
                                      tf.reduce_max(tf.where(keep, x, x.dtype.min))])

    def _dense(self, x, site):
        self._record(x, site)
        kernel, bias = self.denses[site]
        return tf.nn.bias_add(tf.matmul(x, kernel), bias)

    def project(self, x):
        return self._dense(x, "qkv")

    def project_out(self, context, residual):
        return self._dense(context, "out") + residual

    def feedforward(self, x, residual):
        hidden = tf.nn.gelu(self._dense(x, "inter"), approximate=self.approximate)
        return self._dense(hidden, "ffout") + residual


def calibration_ranges(embed, layers, batches):
    """Each Transformer layer's site ranges, from float32 forward passes over `batches`.

    Args:
        embed: callable. Token ids `[batch, length]` (int32 tensor) -> the
            embedding output `[batch, length, width]` that the first layer
            takes (a float32 encoder's `adapter.embed`).
        layers: list of the float32 Transformer layers that follow it, each
            `supports_int8`.
        batches: iterable of `(token_ids, padding_mask)` int32 arrays.

    Returns:
        list (one per layer) of dict site -> `(low, high)`: the mean over the
        batches of each batch's range.
    """
    spec = tf.TensorSpec([None, None], tf.int32)

    @tf.function(input_signature=[spec, spec], autograph=False)
    def ranges_of(token_ids, padding_mask):
        kernel_policy.declare_graph(forward_only=True)
        x = embed(token_ids)
        keep = tf.reshape(tf.cast(padding_mask, tf.bool), [-1])
        out = []
        for layer in layers:
            ops = _CalibrationOps(layer, keep)
            x = _layer_rows(layer, x, padding_mask, None, ops)
            out.append(tf.stack([ops.ranges[site] for site in SITES]))
        return tf.stack(out)  # [layers, sites, 2]

    sums, count = 0.0, 0
    for token_ids, padding_mask in batches:
        sums = sums + ranges_of(token_ids, padding_mask).numpy().astype(np.float64)
        count += 1
    if count == 0:
        raise ValueError("int8 calibration needs at least one sentence.")
    mean = sums / count
    return [{site: (float(mean[i, j, 0]), float(mean[i, j, 1])) for j, site in enumerate(SITES)}
            for i in range(len(layers))]
