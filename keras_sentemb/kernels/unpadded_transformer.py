"""A Transformer layer in training on the real tokens only: padding rows skip the arithmetic.

A training batch is padded to its longest sentence (or its length bucket). On
wiki sentences, 19.5 % of a batch's rows are padding at max length 32 (batch 64)
and 48 % at max length 75 (batch 16). keras-hub's `TransformerEncoder` runs every
per-token op on them: the Q, K, V, attention-output and feed-forward matmuls
(nearly all of a step's arithmetic, forward and backward), the layer norms, the
GELU and the dropouts. Nothing they compute reaches a sentence vector: keys at
padding are masked, and pooling skips padding rows.

`unpadded_call` computes the same layer on the rows of the real tokens:

- the real tokens' rows of `[batch * length, width]` are gathered into a
  `[rows, width]` matrix; `rows` is their count rounded up to a multiple of
  1/16 of `batch * length` (at least 64), so that the XLA-compiled kernels
  (GELU, layer norm, dropout) see a few row counts instead of one per batch;
  the extra rows repeat the first token and are dropped at the end;
- Q, K and V as one matmul against the three kernels side by side (the query
  scaled by 1 / sqrt(head_dim) as Keras scales it), scattered into
  `[batch, heads, length, head_dim]` for the scores; keys at padding masked as
  Keras' softmax masks them; the attention probabilities go through the
  attention layer's own Dropout; the context is gathered back to rows;
- the output projection, the layer's own dropouts, residual adds, layer norms
  and feed-forward Dense layers on the rows (so the fused GELU, layer norm and
  dropout kernels run on them as they do in keras-hub's layer);
- the rows are scattered back to `[batch, length, width]`: padding positions
  are zero (keras-hub's layer leaves values there that nothing reads).

Values and gradients at real tokens equal keras-hub's to float rounding
(tests/models/test_unpadded_transformer.py); dropout draws other random
numbers (the tensors have other shapes), at the same rates. It applies in
graphs that may compute gradients (`kernel_policy.GraphKind`, not `forward_only`:
`encode` already batches sentences of similar length), to the plain keras-hub
layer `fused_transformer.supports` accepts, with a padding mask and no
attention mask, outside graphs that XLA compiles as a whole (`jit_compile=True`,
TPUs: the count of real tokens is known only when the graph runs); elsewhere
keras-hub's own call runs. `kernel_policy.KernelPolicy`'s
`unpadded` op and `KERAS_SENTEMB_PLAIN_TRANSFORMER=1` switch it off.
"""

import math

import keras
import keras_hub
import tensorflow as tf

from keras_sentemb import compat
from keras_sentemb.kernels import policy as kernel_policy

# The row count is rounded up to a multiple of batch * length / ROW_STEPS (at least MIN_ROW_STEP).
ROW_STEPS = 16
MIN_ROW_STEP = 64


def _plain(layer, kind):
    """A `kind` layer with a bias and float weights (no quantization, no LoRA)."""
    return (isinstance(layer, kind) and getattr(layer, "bias", None) is not None
            and getattr(layer, "quantization_mode", None) is None
            and not getattr(layer, "lora_enabled", False))


def supports(layer):
    """Whether `fused_call` computes what `layer` (a keras-hub TransformerEncoder) does."""
    if not isinstance(layer, keras_hub.layers.TransformerEncoder):
        return False
    try:
        parts = compat.transformer_parts(layer)
    except AttributeError:
        return False
    attention = parts.attention
    if type(attention) is not keras.layers.MultiHeadAttention:
        return False
    options = compat.attention_options(attention)
    return (not options["use_gate"]
            and options["sliding_window"] is None
            and tuple(attention.attention_axes or (1,)) == (1,)
            and options["output_shape"] is None
            and attention.key_dim is not None
            and attention.key_dim == attention.value_dim
            and all(_plain(dense, keras.layers.EinsumDense) for dense in
                    (attention.query_dense, attention.key_dense, attention.value_dense,
                     attention.output_dense))
            and _plain(parts.output, keras.layers.Dense)
            and keras.activations.get(parts.output.activation) is keras.activations.linear)


def use_unpadded(layer, inputs, padding_mask, attention_mask, return_attention_scores):
    """Whether `unpadded_call` runs `layer` on these inputs in the graph being traced."""
    return (not return_attention_scores and padding_mask is not None and attention_mask is None
            and isinstance(inputs, tf.Tensor) and inputs.shape.rank == 3
            and inputs.shape[-1] is not None
            and kernel_policy.decide("unpadded", kernel_policy.policy_of(layer))
            # The real tokens' count is known only when the graph runs.
            and not compat.in_xla_compiled_graph())


def mask_bias(padding_mask, attention_mask, dtype):
    """[batch, 1, 1 or length, length]: 0 where a key may be attended to, a large negative else."""
    keep = tf.cast(padding_mask, tf.bool)[:, tf.newaxis, tf.newaxis, :]
    if attention_mask is not None:
        keep = tf.logical_and(keep, tf.cast(attention_mask, tf.bool)[:, tf.newaxis])
    large_negative = -3e4 if dtype == tf.float16 else -1e9
    return tf.where(keep, tf.zeros([], dtype), tf.constant(large_negative, dtype))


def qkv_projection(attention, dtype):
    """(kernel [width, 3 * heads * head_dim], bias): Q, K, V side by side, the query pre-scaled."""
    query_kernel = tf.cast(attention.query_dense.kernel, dtype)  # [width, heads, head_dim]
    width = query_kernel.shape[0]
    scale = tf.cast(1.0 / math.sqrt(float(attention.key_dim)), dtype)  # as Keras scales the query

    def flat(tensor, shape):
        return tf.reshape(tf.cast(tensor, dtype), shape)

    kernel = tf.concat([flat(query_kernel * scale, [width, -1]),
                        flat(attention.key_dense.kernel, [width, -1]),
                        flat(attention.value_dense.kernel, [width, -1])], axis=1)
    bias = tf.concat([flat(attention.query_dense.bias, [-1]) * scale,
                      flat(attention.key_dense.bias, [-1]),
                      flat(attention.value_dense.bias, [-1])], axis=0)
    return kernel, bias


def attend(qkv, batch, length, bias, heads, head_dim):
    """The attention context of projected rows `qkv` ([batch * length, 3 * width]), as rows.

    `qkv` holds each token's query (already scaled by 1 / sqrt(head_dim)), key and
    value side by side; `bias` is `mask_bias`'s. Returns `[batch * length, width]`.
    """
    qkv = tf.transpose(tf.reshape(qkv, [batch, length, 3, heads, head_dim]), [2, 0, 3, 1, 4])
    scores = tf.matmul(qkv[0], qkv[1], transpose_b=True) + bias  # [batch, heads, length, length]
    context = tf.matmul(tf.nn.softmax(scores), qkv[2])
    return tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, heads * head_dim])


def dense_rows(dense, rows):
    """`dense` (an EinsumDense or Dense with a bias, no activation) on `rows` [n, in] -> [n, out]."""
    kernel = tf.cast(dense.kernel, rows.dtype)
    kernel = tf.reshape(kernel, [-1, kernel.shape[-1]]) if kernel.shape.rank == 3 else kernel
    return tf.nn.bias_add(tf.matmul(rows, kernel), tf.cast(dense.bias, rows.dtype))


class _Rows:
    """Where the real tokens of a `[batch, length]` padding mask sit among the flat rows."""

    def __init__(self, padding_mask):
        keep = tf.reshape(tf.cast(padding_mask, tf.bool), [-1])
        self.total = tf.size(keep)
        self.positions = tf.cast(tf.where(keep)[:, 0], tf.int32)  # [count]
        self.count = tf.shape(self.positions)[0]
        step = tf.maximum(MIN_ROW_STEP, self.total // ROW_STEPS)
        rows = tf.minimum(self.total, (self.count + step - 1) // step * step)
        self.gather_at = tf.concat(
            [self.positions, tf.zeros([rows - self.count], tf.int32)], axis=0)

    def gather(self, flat):
        """[batch * length, d] -> [rows, d]: the real tokens' rows, then filler rows."""
        return tf.gather(flat, self.gather_at)

    def scatter(self, rows):
        """[rows, d] -> [batch * length, d]: each real token's row in place, zeros elsewhere."""
        # Split, not sliced: a slice's gradient (StridedSliceGrad) is a slow op on a CPU.
        real, _ = tf.split(rows, tf.stack([self.count, tf.shape(rows)[0] - self.count]))
        return tf.scatter_nd(self.positions[:, tf.newaxis], real,
                             tf.stack([self.total, rows.shape[-1]]))


def _attention_rows(attention, x, where, batch, length, bias, training):
    """Self-attention output projection of the real-token rows `x` ([rows, width])."""
    kernel, qkv_bias = qkv_projection(attention, x.dtype)
    heads, head_dim = attention.num_heads, attention.key_dim
    qkv = where.scatter(tf.nn.bias_add(tf.matmul(x, kernel), qkv_bias))
    query, key, value = tf.unstack(  # each [batch, heads, length, head_dim]
        tf.transpose(tf.reshape(qkv, [batch, length, 3, heads, head_dim]), [2, 0, 3, 1, 4]))
    probabilities = tf.nn.softmax(tf.matmul(query, key, transpose_b=True) + bias)
    dropout = compat.attention_probability_dropout(attention)
    if dropout is not None:
        probabilities = dropout(probabilities, training=training)
    context = tf.matmul(probabilities, value)  # [batch, heads, length, head_dim]
    context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, heads * head_dim])
    return dense_rows(attention.output_dense, where.gather(context))


def unpadded_call(layer, inputs, padding_mask, training=None):
    """`layer`'s forward pass on `inputs` [batch, length, width], real tokens only (see above)."""
    shape = tf.shape(inputs)
    batch, length, width = shape[0], shape[1], inputs.shape[-1]
    parts = compat.transformer_parts(layer)
    where = _Rows(padding_mask)
    x = where.gather(tf.reshape(inputs, [-1, width]))
    residual = x
    if layer.normalize_first:
        x = parts.attention_norm(x)
    x = _attention_rows(parts.attention, x, where, batch, length,
                        mask_bias(padding_mask, None, x.dtype), training)
    x = parts.attention_dropout(x, training=training) + residual
    if not layer.normalize_first:
        x = parts.attention_norm(x)
    residual = x
    if layer.normalize_first:
        x = parts.output_norm(x)
    x = parts.output(parts.intermediate(x))
    x = parts.output_dropout(x, training=training) + residual
    if not layer.normalize_first:
        x = parts.output_norm(x)
    return tf.reshape(where.scatter(x), shape)
