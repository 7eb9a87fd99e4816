"""Layer normalisation in training as one fused kernel forward and one backward (XLA).

Keras' `LayerNormalization` is a chain of TensorFlow ops (moments, rsqrt,
scale and shift), and autodiff adds a longer chain for the gradient; in
mixed precision each end is a `Cast` as well. A BERT-like encoder runs
`2 * layers + 1` of them per pass. Here the forward pass is one XLA-compiled
loop (statistics and output in float32, bfloat16 read and written through
`bfloat16_bits`) and the backward pass another, which returns the input's
gradient and, per block of 16 rows, the partial sums of the scale's and the
offset's gradients (TensorFlow adds the blocks up: XLA's CPU code was slower
at reducing these whole columns in one loop). Forward + backward on a `[64, 32, 384]` activation,
one core: 2.3-2.9 -> 1.4 ms in bfloat16, 2.6-3.1 -> 1.5 ms in float32.

The values are Keras' to float rounding, except that under mixed precision
the scale and offset are used as stored (float32) where Keras' layer, called
inside an autocast scope, rounds them to bfloat16 first; their gradients come
back as float32 without a cast.

Used where a layer is being trained or evaluated in a graph that computes
gradients. Forward-only graphs (`encode`'s, `kernel_policy.GraphKind`) take
oneDNN's layer normalisation kernel instead where TensorFlow's oneDNN kernels
are on (`compat.onednn_layer_norm`, op `layer_norm_encode`): one pass where
Keras' layer runs seven ops, and no XLA compile per batch shape; on a
`[2048, 384]` float32 activation, 2 cores, 1.1-1.6 ms -> 0.67 ms. Exported
float32 and bfloat16 graphs keep Keras' ops (declared plain: they must also
run where oneDNN is off); int8 serving graphs, which need oneDNN anyway, take
oneDNN's kernel. `KERAS_SENTEMB_PLAIN_LAYER_NORM=1` keeps Keras' ops everywhere. Installed by
`SentenceEncoder` on every plain `LayerNormalization` of the backbone (last
axis, scale and offset, no RMS scaling).
"""

import keras
import tensorflow as tf

from keras_sentemb import compat
from keras_sentemb.kernels import policy as kernel_policy
from keras_sentemb.kernels.bfloat16_bits import narrow, widen
from keras_sentemb.kernels.layer_calls import is_patched, patch_calls

# Set to "1" to keep Keras' layer normalisation everywhere (`kernel_policy.ENVIRONMENT`).
DISABLE_ENV = "KERAS_SENTEMB_PLAIN_LAYER_NORM"

# Rows per partial sum of the scale / offset gradients (`block_sums`).
BLOCK_ROWS = 16

# Input dtypes the kernels take (statistics in float32; wider inputs keep Keras' layer).
_DTYPES = (tf.float32, tf.bfloat16, tf.float16)


@tf.function(jit_compile=True, reduce_retracing=True, autograph=False)
def _forward(x, gamma, beta, epsilon, out_dtype):
    xf = widen(x)
    mean = tf.reduce_mean(xf, axis=-1, keepdims=True)
    centred = xf - mean
    rstd = tf.math.rsqrt(tf.reduce_mean(centred * centred, axis=-1, keepdims=True) + epsilon)
    return narrow(centred * rstd * gamma + beta, out_dtype), mean, rstd


@tf.function(jit_compile=True, reduce_retracing=True, autograph=False)
def _backward(x, gamma, mean, rstd, dy):
    xf, dyf = widen(x), widen(dy)
    xhat = (xf - mean) * rstd
    g = dyf * gamma
    dx = rstd * (g - tf.reduce_mean(g, axis=-1, keepdims=True)
                 - xhat * tf.reduce_mean(g * xhat, axis=-1, keepdims=True))
    return narrow(dx, x.dtype), block_sums(dyf * xhat), block_sums(dyf)


def block_sums(t):
    """Column sums of `t`'s rows (`[..., width]` flattened) in blocks of `BLOCK_ROWS` rows.

    The caller adds the `[blocks, width]` result up with one TensorFlow
    `reduce_sum`. On the model's `[rows, 384]` activations this made the
    backward kernel about 40 % faster than one reduction over all rows
    (float32 and bfloat16). Zero rows pad the last block.
    """
    width = tf.shape(t)[-1]
    rows = tf.reshape(t, [-1, width])
    pad = tf.math.floormod(-tf.shape(rows)[0], BLOCK_ROWS)  # a compile-time constant for XLA
    rows = tf.pad(rows, [[0, pad], [0, 0]])
    return tf.reduce_sum(tf.reshape(rows, [-1, BLOCK_ROWS, width]), axis=1)


def layer_norm(x, gamma, beta, epsilon, dtype=None):
    """Layer normalisation of `x` over its last axis, fused forward and backward.

    Args:
        x: floating tensor `[..., width]` (known width).
        gamma, beta: tensors `[width]` (scale, offset), used in float32.
        epsilon: float, added to the variance.
        dtype: the output dtype; defaults to `x.dtype`.

    Returns:
        a tensor like `x` (of `dtype`); differentiable in `x`, `gamma` and `beta`.
    """
    x = tf.convert_to_tensor(x)
    if x.shape[-1] is None:
        raise ValueError("layer_norm needs a known last dimension")
    dtype = tf.as_dtype(dtype or x.dtype)

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        y, mean, rstd = _forward(x, gamma, beta, float(epsilon), dtype)

        def grad(dy):
            dx, dgamma, dbeta = _backward(x, gamma, mean, rstd, dy)
            return dx, tf.reduce_sum(dgamma, axis=0), tf.reduce_sum(dbeta, axis=0)

        return y, grad

    return normalize(x, tf.cast(gamma, tf.float32), tf.cast(beta, tf.float32))


def _fusable(layer):
    if not isinstance(layer, keras.layers.LayerNormalization):
        return False
    axis = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    return layer.center and layer.scale and not layer.rms_scaling and len(axis) == 1


def _last_axis(layer, inputs):
    axis = layer.axis[0] if isinstance(layer.axis, (list, tuple)) else layer.axis
    return axis in (-1, len(inputs.shape) - 1)


def _fused_call(self, inputs):
    if (isinstance(inputs, tf.Tensor) and inputs.dtype in _DTYPES and _last_axis(self, inputs)
            and inputs.shape[-1] is not None and inputs.shape.rank in (2, 3)
            and kernel_policy.decide("layer_norm_encode", kernel_policy.policy_of(self))):
        with compat.no_autocast():
            gamma, beta = tf.convert_to_tensor(self.gamma), tf.convert_to_tensor(self.beta)
        x = tf.cast(inputs, self.compute_dtype)
        return compat.onednn_layer_norm(x, gamma, beta, self.epsilon)
    if (isinstance(inputs, tf.Tensor) and inputs.dtype in _DTYPES and _last_axis(self, inputs)
            and inputs.shape[-1] is not None
            and kernel_policy.decide("layer_norm", kernel_policy.policy_of(self))):
        with compat.no_autocast():
            gamma, beta = tf.convert_to_tensor(self.gamma), tf.convert_to_tensor(self.beta)
        return layer_norm(inputs, gamma, beta, self.epsilon, dtype=self.compute_dtype)
    return type(self).call(self, inputs)


def install_fused_layer_norm(model, policy=None):
    """Make every plain `keras.layers.LayerNormalization` of `model` use `layer_norm`.

    Patches the layer objects (class and config unchanged, so saving and
    cloning are unaffected); whether a traced graph takes the kernel is
    decided then by `policy` (default "auto", see `kernels`). Idempotent
    (installing again binds the new policy). Returns how many were patched.
    """
    policy = kernel_policy.KernelPolicy.of(policy)
    return patch_calls(model, _fusable, _fused_call, policy)


def is_fused(layer):
    """Whether `layer` runs the fused layer norm (`install_fused_layer_norm`)."""
    return is_patched(layer, _fused_call)
