"""TSDAE's decoder: the encoder's layers made causal, reading the sentence vector only.

As sentence-transformers' `DenoisingAutoEncoderLoss` builds it (a
Hugging Face `...LMHeadModel` with `is_decoder=True` and
`add_cross_attention=True`, tied to the encoder): the decoder runs the
encoder's embeddings and Transformer layers (`tie_decoder=True`: the very
same weights) with a causal mask on its self-attention, and in each layer,
between self-attention and feed-forward, a cross-attention to the sentence
vector, its one key and value. An LM head (dense, GELU, LayerNorm, then
the token embedding's transpose and a bias) predicts the next token.

With one key, the cross-attention's softmax is 1 whatever the query: its
output is the value projection of the sentence vector, through the output
projection, the same at every position. The query and key projections of
the reference have no effect on the loss (their gradient is zero) and are
left out; the attention weight still takes its dropout in training (each
head and position keeps the value with probability 1 - rate, scaled).
"""

import keras
import keras_hub
import tensorflow as tf

from keras_sentemb import compat
from keras_sentemb.kernels.fused_gelu import gelu_form
from keras_sentemb.trainers.lm_head import masked_lm_logits


@keras.saving.register_keras_serializable(package="keras_sentemb")
class VectorCrossAttention(keras.layers.Layer):
    """Cross-attention to one vector per row, then the residual and LayerNorm.

    `call(x, memory)`: `x` `[B, T, H]`, `memory` `[B, H]`; returns
    `LayerNorm(x + dropout(W_o(attention_dropout(1) * W_v memory)))`.
    """

    def __init__(self, hidden_dim, num_heads, dropout=0.1, layer_norm_epsilon=1e-12,
                 kernel_initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.hidden_dim, self.num_heads = int(hidden_dim), int(num_heads)
        self.rate, self.layer_norm_epsilon = float(dropout), float(layer_norm_epsilon)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        dense = dict(kernel_initializer=self.kernel_initializer, dtype=self.dtype_policy)
        self.value_dense = keras.layers.Dense(self.hidden_dim, name="value", **dense)
        self.output_dense = keras.layers.Dense(self.hidden_dim, name="attention_output", **dense)
        self.dropout = keras.layers.Dropout(self.rate, dtype=self.dtype_policy)
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="layer_norm", dtype=self.dtype_policy)

    def build(self, input_shape, memory_shape=None):
        self.value_dense.build((None, self.hidden_dim))
        self.output_dense.build((None, None, self.hidden_dim))
        self.layer_norm.build((None, None, self.hidden_dim))

    def call(self, x, memory, training=False):
        value = tf.cast(self.value_dense(tf.cast(memory, self.compute_dtype)), x.dtype)
        length = tf.shape(x)[1]
        heads = tf.reshape(value, [-1, 1, self.num_heads, self.hidden_dim // self.num_heads])
        weight = tf.ones([tf.shape(x)[0], length, self.num_heads, 1], x.dtype)
        if training and self.rate > 0.0:
            weight = self.dropout(weight, training=True)
        context = tf.reshape(weight * heads, [-1, length, self.hidden_dim])
        attended = self.dropout(self.output_dense(context), training=training)
        return self.layer_norm(x + attended)

    def get_config(self):
        return {**super().get_config(), "hidden_dim": self.hidden_dim,
                "num_heads": self.num_heads, "dropout": self.rate,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer)}


def causal_mask(padding_mask):
    """`[B, T, T]` bool: position i attends to the real positions j <= i."""
    length = tf.shape(padding_mask)[1]
    lower = tf.linalg.band_part(tf.ones([length, length], tf.bool), -1, 0)
    return tf.logical_and(lower[None], tf.cast(padding_mask, tf.bool)[:, None, :])


class Decoder(keras.layers.Layer):
    """TSDAE's decoder over a `SentenceEncoder`'s layers (`body`).

    Args:
        body: `SentenceEncoder` whose embeddings and Transformer layers the
            decoder runs: the trained encoder itself (tied) or a copy.
        seed: int. Initialisation of the cross-attention and the LM head.
    """

    def __init__(self, body, seed=0, **kwargs):
        super().__init__(dtype=body.backbone.dtype_policy, **kwargs)
        self.body = body
        backbone = body.backbone
        layers = body.adapter.transformer_layers
        if any(getattr(layer, "normalize_first", False) for layer in layers):
            raise ValueError("TSDAE's decoder supports post-LayerNorm backbones (BERT, "
                             "RoBERTa); this backbone normalizes first.")
        epsilon = float(compat.transformer_parts(layers[0]).attention_norm.epsilon)
        # The LM head's transform computes the backbone's GELU (Hugging Face's `hidden_act`).
        activation = (compat.keras_hub_gelu_approximate() if gelu_form(layers) == "tanh"
                      else "gelu")
        init = lambda i: keras.initializers.TruncatedNormal(stddev=0.02, seed=seed + i)  # noqa: E731
        self.cross = [
            VectorCrossAttention(body.hidden_dim, int(backbone.num_heads),
                                 dropout=float(backbone.dropout), layer_norm_epsilon=epsilon,
                                 kernel_initializer=init(i), dtype=backbone.dtype_policy,
                                 name=f"cross_attention_{i}")
            for i in range(len(layers))
        ]
        for block in self.cross:
            block.build((None, None, body.hidden_dim))
        self.lm_head = keras_hub.layers.MaskedLMHead(
            vocabulary_size=int(backbone.vocabulary_size),
            token_embedding=body.adapter.token_embedding,
            intermediate_activation=activation,
            layer_norm_epsilon=epsilon,
            kernel_initializer=init(len(layers)),
            dtype=backbone.dtype_policy,
            name="lm_head",
        )
        self.lm_head.build((None, None, body.hidden_dim), (None, None))

    def call(self, inputs, memory, training=False):
        """Next-token logits (float32 `[B, T, vocabulary]`) of `inputs` given `memory` `[B, H]`."""
        adapter = self.body.adapter
        mask = inputs["padding_mask"]
        x = adapter.embed(inputs["token_ids"], tf.zeros_like(inputs["token_ids"]))
        x = adapter.dropout(x, training=training)
        attention_mask = causal_mask(mask)
        for layer, cross in zip(adapter.transformer_layers, self.cross):
            part = compat.transformer_parts(layer)
            attended = part.attention(query=x, value=x, attention_mask=attention_mask,
                                      training=training)
            x = part.attention_norm(x + part.attention_dropout(attended, training=training))
            x = cross(x, memory, training=training)
            fed = part.output(part.intermediate(x))
            x = part.output_norm(x + part.output_dropout(fed, training=training))
        return tf.cast(masked_lm_logits(self.lm_head, x), tf.float32)
