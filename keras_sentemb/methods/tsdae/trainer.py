"""`TSDAE`: a denoising auto-encoder whose decoder sees only the sentence vector."""

import keras
import tensorflow as tf

from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.methods.tsdae.config import PAPER_POOLING
from keras_sentemb.methods.tsdae.config import TSDAEConfig
from keras_sentemb.methods.tsdae.decoder import Decoder
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.trainers.base_trainer import BaseTrainer


def reconstruction_loss(logits, targets):
    """Mean next-token cross-entropy over the real tokens of `targets` after the first.

    `logits[:, i]` predicts `targets["token_ids"][:, i + 1]`; the padding
    is ignored (as the reference's `ignore_index=pad_token_id`).

    Args:
        logits: float `[B, T - 1, vocabulary]`.
        targets: packed inputs `[B, T]`.

    Returns:
        `(loss, accuracy)`, float32 scalars.
    """
    labels = targets["token_ids"][:, 1:]
    weights = tf.cast(targets["padding_mask"][:, 1:], tf.float32)
    logits = tf.cast(logits, tf.float32)
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    total = tf.maximum(tf.reduce_sum(weights), 1.0)
    hits = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=labels.dtype), labels),
                   tf.float32)
    return tf.reduce_sum(losses * weights) / total, tf.reduce_sum(hits * weights) / total


@keras.saving.register_keras_serializable(package="keras_sentemb")
class TSDAE(BaseTrainer):
    """TSDAE trainer: reconstruct each sentence from the vector of its noisy copy.

    The encoder embeds the sentence with words deleted (`"noisy"`, made in
    the data pipeline); a decoder (see `decoder.py`) whose only view of the
    input is that vector reconstructs the original sentence (`"sentence"`)
    token by token, with teacher forcing. Loss: the mean cross-entropy of
    the next token over the sentence's real tokens. The decoder is not
    part of the kept encoder.

    Inputs of `fit`: dict batches `{"noisy": packed, "sentence": packed}`.

    Args:
        encoder: `SentenceEncoder`. Trained in place; kept as `.encoder`.
        config: `TSDAEConfig` (or a dict of its options). Defaults to the
            method's.
        pooling: str. The sentence vector trained. Defaults to the paper's
            [CLS].
        seed: int. Initialisation of the decoder's own weights.
        **kwargs: single options overriding `config`'s, and Keras `Model`
            arguments.

    References:
        - [Wang, Reimers and Gurevych, 2021. TSDAE: Using Transformer-based
          Sequential Denoising Auto-Encoder for Unsupervised Sentence
          Embedding Learning](https://arxiv.org/abs/2104.06979).
    """

    config_class = TSDAEConfig

    def __init__(self, encoder, config=None, pooling=PAPER_POOLING, seed=0, **kwargs):
        super().__init__(encoder, config=config, **kwargs)
        self.pooling = parse_pooling(pooling, encoder.num_layers)
        self.seed = int(seed)
        body = encoder if self.config.tie_decoder else encoder.clone("tsdae_decoder_body")
        self.decoder = Decoder(body, seed=self.seed, name="tsdae_decoder")
        self.accuracy_tracker = keras.metrics.Mean(name="accuracy")

    def extra_metrics(self):
        return [self.accuracy_tracker]

    def grad_cache_unsupported(self):
        return "TSDAE's loss is per sentence (no in-batch negatives): GradCache does not apply"

    def logits(self, data, training=True):
        """The decoder's next-token logits of `data["sentence"]` from `data["noisy"]`'s vectors."""
        memory = self.encoder.sentence_vectors(data["noisy"], self.pooling, training=training)
        target = data["sentence"]
        inputs = {"token_ids": target["token_ids"][:, :-1],
                  "padding_mask": target["padding_mask"][:, :-1]}
        return self.decoder(inputs, memory, training=training)

    def compute_loss_terms(self, data, training=True):
        loss, accuracy = reconstruction_loss(self.logits(data, training), data["sentence"])
        return LossOutput(loss, {"accuracy": accuracy})

    def get_config(self):
        config = super().get_config()
        config.update(pooling=self.pooling, seed=self.seed)
        return config
