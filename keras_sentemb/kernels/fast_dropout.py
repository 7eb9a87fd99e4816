"""Dropout masks from 16-bit random integers, two per 32-bit draw, for CPU speed.

Keras' dropout (`tf.nn.experimental.stateless_dropout`) draws one uniform
float of the input's dtype per element, compares it with the rate and selects.
On the CPU the draw is the costly part: a Transformer's training step runs 19
dropouts (embeddings, and per layer the attention probabilities, the attention
output and the feed-forward output), and in bfloat16 each draw is slower still
(the float is built in float32 and converted). Here one 32-bit Philox draw
(`StatelessRandomUniformFullIntV2`, the same generator) gives two 16-bit
integers; an element is kept when its integer is at least
`round(rate * 65536)`. Half the random numbers, no float conversion, and the
mask is a bool tensor that the gradient reuses. A dropout plus its gradient
costs about 20 % less in float32 and 55 % less in bfloat16 than Keras' on a
`[128, 32, 384]` activation.

For float32 and bfloat16 the masking itself is one XLA kernel each way
(`_masked_by_words`): it reads the random words, compares their halves with
the level and scales or zeroes the activation (the incoming gradient) in one
pass, bfloat16 through `bfloat16_bits`, instead of a comparison, a product,
a zeros tensor and a select as separate ops. Same masks; the product is
computed in float32 and rounded once. Graphs declared plain (the SavedModel
and LiteRT exports', `kernel_policy.GraphKind`) keep the separate ops (no XLA in
served graphs).

What changes: the drop probability is `round(rate * 65536) / 65536` (0.1
becomes 0.1000061; Keras' bfloat16 dropout compares a bfloat16 uniform, whose
steps are 1/256), kept values are scaled by the exact inverse of the keep
probability (in float32, where Keras' bfloat16 dropout multiplies by the
scale rounded to bfloat16: 1.109 instead of 1.111 at rate 0.1), and the masks
are another (equally random) function of the seed. The seeds come from each
layer's own `SeedGenerator`, so a resumed run and GradCache's replayed chunks
draw the same masks as before.

`SentenceEncoder` installs it on every `keras.layers.Dropout` of its backbone
without a `noise_shape`; `KERAS_SENTEMB_PLAIN_DROPOUT=1` keeps Keras' own.
"""

import keras
import tensorflow as tf

from keras_sentemb.kernels import policy as kernel_policy
from keras_sentemb.kernels.bfloat16_bits import narrow, widen
from keras_sentemb.kernels.layer_calls import is_patched
from keras_sentemb.kernels.layer_calls import patch_calls

# Set to "1" to keep Keras' dropout everywhere (`kernel_policy.ENVIRONMENT`).
DISABLE_ENV = "KERAS_SENTEMB_PLAIN_DROPOUT"

_LEVELS = 1 << 16


def drop_threshold(rate):
    """The 16-bit level below which an element is dropped: `round(rate * 65536)`.

    Capped at 65535 (a rate above 1 - 2**-17 still keeps 1 element in 65536).
    """
    return min(int(round(float(rate) * _LEVELS)), _LEVELS - 1)


def _int32_seed(seed):
    # Keras' seed state is int64 (a TensorFlow placement constraint); the
    # stateless ops take int32. Same mapping as Keras' TensorFlow backend.
    seed = tf.convert_to_tensor(seed)
    if seed.dtype == tf.int32:
        return seed
    return tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)


def random_uint16(shape, seed):
    """Uniform 16-bit integers of `shape`, two from each 32-bit Philox draw."""
    shape = tf.convert_to_tensor(shape, tf.int32)
    size = tf.reduce_prod(shape)
    words = tf.random.stateless_uniform(
        [(size + 1) // 2], _int32_seed(seed), dtype=tf.uint32, minval=None, maxval=None
    )
    halves = tf.reshape(tf.bitcast(words, tf.uint16), [-1])
    return tf.reshape(halves[:size], shape)


def dropout(x, rate, seed):
    """Inverted dropout of `x`: zeros with probability ~`rate`, the rest scaled.

    Args:
        x: a floating tensor.
        rate: float in `(0, 1)`.
        seed: `[2]` integer tensor (stateless seed).

    Returns:
        a tensor like `x`. Its gradient is the incoming gradient masked and
        scaled the same way.
    """
    threshold = drop_threshold(rate)
    scale = _LEVELS / (_LEVELS - threshold)
    if not kernel_policy.xla_allowed() or x.dtype not in (tf.float32, tf.bfloat16):
        keep = random_uint16(tf.shape(x), seed) >= tf.constant(threshold, tf.uint16)
        return _masked(x, keep, scale)
    size = tf.size(x)
    words = tf.random.stateless_uniform(
        [(size + 1) // 2], _int32_seed(seed), dtype=tf.uint32, minval=None, maxval=None
    )
    return _masked_by_words(x, words, threshold, scale)


def _masked(x, keep, scale):
    @tf.custom_gradient
    def masked(x):
        s = tf.cast(scale, x.dtype)

        def grad(dy):
            return tf.where(keep, dy * s, tf.zeros_like(dy))

        return tf.where(keep, x * s, tf.zeros_like(x)), grad

    return masked(x)


@tf.function(jit_compile=True, reduce_retracing=True, autograph=False)
def _apply_mask(x, words, threshold, scale):
    """`x` scaled where its 16-bit level (from `words`) is at least `threshold`, else 0."""
    levels = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[: tf.size(x)]
    keep = tf.reshape(levels, tf.shape(x)) >= tf.constant(threshold, tf.uint16)
    return narrow(tf.where(keep, widen(x) * scale, 0.0), x.dtype)


def _masked_by_words(x, words, threshold, scale):
    """The masking as one XLA kernel each way, reading the random words directly.

    Same masks as `_masked`; the product is taken in float32 with the exact
    scale and rounded once (`_masked` multiplies a bfloat16 input by the
    scale rounded to bfloat16). No mask, zeros or product as separate
    tensors: one pass over the activation each way.
    """

    @tf.custom_gradient
    def masked(x):
        def grad(dy):
            return _apply_mask(dy, words, threshold, scale)

        return _apply_mask(x, words, threshold, scale), grad

    return masked(x)


def _fast_call(self, inputs, training=False):
    if (training and 0 < self.rate < 1 and self.noise_shape is None
            and kernel_policy.decide("dropout", kernel_policy.policy_of(self))):
        return dropout(inputs, self.rate, self.seed_generator.next())
    return type(self).call(self, inputs, training=training)


def install_fast_dropout(model, policy=None):
    """Make every `keras.layers.Dropout` inside `model` use `dropout`; returns how many.

    Patches the layer objects (their class and config are unchanged, so
    saving and cloning are unaffected); whether a traced graph takes the
    16-bit masks is decided then by `policy` (default "auto", see `kernels`).
    Idempotent (installing again binds the new policy).
    """
    policy = kernel_policy.KernelPolicy.of(policy)
    return patch_calls(model, lambda layer: isinstance(layer, keras.layers.Dropout), _fast_call,
                       policy)


def _is_fast(layer):
    return is_patched(layer, _fast_call)
