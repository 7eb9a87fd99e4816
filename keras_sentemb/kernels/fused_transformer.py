"""A Transformer layer's forward pass in fewer, larger ops, for encoding.

keras-hub's `TransformerEncoder` runs self-attention through Keras'
`MultiHeadAttention`: three einsum projections, each followed by its own bias
add, a separate multiply that scales the query, scores and context by einsum,
the padding mask as a select before and after the softmax, then the output
projection, its bias and the residual add as separate passes; the feed-forward
block ends the same way. Forward-only, the per-op cost of these small passes
is a large share of the time: in bfloat16 the matmuls are fast and the rest is
not; in float32 on an AVX2-only CPU the transposes around the einsums alone
took 7 % of a forward pass.

`fused_call` computes the same function on the rows of the 2-D
`[batch * length, width]` matrix:

- Q, K and V as one matmul against the three kernels side by side, with
  1 / sqrt(head_dim) folded into the query kernel and bias, and the bias
  added by `bias_add` (oneDNN fuses it into the matmul);
- the heads split by one transpose, scores and context by batched matmuls,
  the padding as an additive bias built once per layer (-1e9, -3e4 in float16,
  where Keras' softmax uses the same numbers);
- the attention output and the feed-forward output as a matmul with its
  bias fused in (oneDNN) and the residual added to the rows;
- the layer norms and the feed-forward intermediate layer are the layer's own
  (with the fused GELU of `fused_gelu`).

Measured on a 2-core AVX512-BF16 CPU, `keras-sentemb encode --precision
bfloat16` of 3,000 wiki sentences as the command runs it (two batches side by
side, 2,048 tokens each): 800 -> 848 sentences/s (docs/performance.md);
float32 there gained 1 %. On a 2-core AVX2-only CPU, float32, one batch of
32 x 64 tokens on one core: 607 -> 583 ms (transposes 50 -> 19 ms, the
projections 509 -> 499 ms); `encode` of 8,000 wiki sentences as the command
runs it: 41.7 -> 38.6 s (`benchmarks/kernel_choice.py` has the per-layer
figures).

It runs only in forward-only graphs (`encode`'s, `kernel_policy.GraphKind`;
training keeps keras-hub's layer, whose dropout and gradients it would
otherwise have to reproduce), on float32, bfloat16 or float16 inputs, with a padding mask, and when the layer is the plain keras-hub
layer it expects (no gate, no sliding window, no quantization or LoRA, biases
on); otherwise it calls keras-hub's own. Values equal keras-hub's to rounding
(cosine > 0.9999 in bfloat16, relative error ~1e-6 in float32). One defined
difference: a row whose every key is masked (a batch row of pure padding)
averages the values where Keras returns zeros; such rows are padding and
never reach a sentence vector. `KERAS_SENTEMB_PLAIN_TRANSFORMER=1` keeps
keras-hub's layer everywhere.
"""

import keras
import keras_hub
import tensorflow as tf

from keras_sentemb import compat
from keras_sentemb.kernels import int8_transformer
from keras_sentemb.kernels import policy as kernel_policy
from keras_sentemb.kernels import unpadded_transformer
from keras_sentemb.kernels.layer_calls import bind_call
from keras_sentemb.kernels.layer_calls import unbind_call
from keras_sentemb.kernels.unpadded_transformer import supports

# Set to "1" to run keras-hub's Transformer layer everywhere (`kernel_policy.ENVIRONMENT`).
DISABLE_ENV = "KERAS_SENTEMB_PLAIN_TRANSFORMER"

# Input dtypes it runs on (float64 keeps keras-hub's layer).
_DTYPES = (tf.float32, tf.bfloat16, tf.float16)


def _use_fused(layer, inputs, padding_mask, training, return_attention_scores):
    return (not training and not return_attention_scores and padding_mask is not None
            and isinstance(inputs, tf.Tensor) and inputs.dtype in _DTYPES
            and inputs.shape.rank == 3 and inputs.shape[-1] is not None
            and kernel_policy.decide("transformer", kernel_policy.policy_of(layer)))


def _attention(attention, rows, batch, length, bias, residual):
    """Self-attention of `rows` ([batch * length, width]) plus `residual`, as rows."""
    kernel, qkv_bias = unpadded_transformer.qkv_projection(attention, rows.dtype)
    qkv = tf.nn.bias_add(tf.matmul(rows, kernel), qkv_bias)
    context = unpadded_transformer.attend(qkv, batch, length, bias, attention.num_heads,
                                          attention.key_dim)
    return unpadded_transformer.dense_rows(attention.output_dense, context) + residual


def fused_call(layer, inputs, padding_mask, attention_mask=None):
    """`layer`'s forward pass (inference) on `inputs` [batch, length, width], fused as above."""
    shape = tf.shape(inputs)
    batch, length, width = shape[0], shape[1], inputs.shape[-1]
    bias = unpadded_transformer.mask_bias(padding_mask, attention_mask, inputs.dtype)
    parts = compat.transformer_parts(layer)
    x = tf.reshape(inputs, [-1, width])
    residual = x
    if layer.normalize_first:
        x = parts.attention_norm(x)
    x = _attention(parts.attention, x, batch, length, bias, residual)
    if not layer.normalize_first:
        x = parts.attention_norm(x)
    residual = x
    if layer.normalize_first:
        x = parts.output_norm(x)
    x = unpadded_transformer.dense_rows(parts.output, parts.intermediate(x)) + residual
    if not layer.normalize_first:
        x = parts.output_norm(x)
    return tf.reshape(x, shape)


def _layer_call(self, inputs, padding_mask=None, attention_mask=None, training=None,
                return_attention_scores=False):
    """keras-hub's `TransformerEncoder.call`, or `int8_call` / `fused_call` / `unpadded_call`."""
    if int8_transformer.use_int8(self, inputs, padding_mask, training, return_attention_scores):
        return int8_transformer.int8_call(self, inputs, padding_mask, attention_mask)
    # `supports` again: LoRA or quantization may have been enabled since install.
    if _use_fused(self, inputs, padding_mask, training, return_attention_scores) and supports(self):
        return fused_call(self, inputs, padding_mask, attention_mask)
    if (unpadded_transformer.use_unpadded(self, inputs, padding_mask, attention_mask,
                                          return_attention_scores) and supports(self)):
        return unpadded_transformer.unpadded_call(self, inputs, padding_mask, training)
    return type(self).call(self, inputs, padding_mask=padding_mask, attention_mask=attention_mask,
                           training=training, return_attention_scores=return_attention_scores)


def install_fused_transformer(transformer_layers, policy=None):
    """Lets each supported layer take `fused_call` in forward-only graphs.

    Whether it does is decided while a graph is traced, by `policy` (a
    `kernel_policy.KernelPolicy`; default "auto") through `kernel_policy.decide`.
    Returns how many layers it was installed on. Idempotent; installing
    again binds the new policy.
    """
    policy = kernel_policy.KernelPolicy.of(policy)
    count = 0
    for layer in transformer_layers:
        if supports(layer):
            bind_call(layer, _layer_call, policy)
            count += 1
    return count


def uninstall_fused_transformer(transformer_layers):
    """Puts keras-hub's own `call` back; returns how many layers had the fused one."""
    count = 0
    for layer in transformer_layers:
        if unbind_call(layer):
            count += 1
    return count
