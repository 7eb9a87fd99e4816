"""`MaskedLanguageModel`: BERT's masked-language-model objective on any backbone."""

import keras
import keras_hub
import tensorflow as tf

from keras_sentemb import validation
from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.losses.masked_language_model import masked_token_loss
from keras_sentemb.methods.masked_language_model.config import MaskedLanguageModelConfig
from keras_sentemb.trainers.base_trainer import BaseTrainer
from keras_sentemb.trainers.lm_head import masked_lm_logits


def mask_tokens(inputs, seed, mask_rate, mask_token_id, vocabulary_size, special_ids):
    """BERT's 80/10/10 masking of packed inputs, a pure function of `seed`.

    Each real, non-special token is selected with probability `mask_rate`;
    a selected token becomes `[MASK]` (80%), a random token (10%) or stays
    (10%). The selected positions of each row are returned first (padded to
    the row maximum of the batch with weight 0), as keras-hub's
    `MaskedLMHead` expects.

    Args:
        inputs: dict with `token_ids`, `padding_mask` (`[B, T]`).
        seed: int tensor of shape `[2]` (stateless; e.g. (seed, step)).
        mask_rate: float. Defaults in the pipeline to `0.15`.
        mask_token_id: int.
        vocabulary_size: int.
        special_ids: list of int. Never selected ([CLS], [SEP], [PAD]).

    Returns:
        `(masked_inputs, mask_positions [B, K], mask_ids [B, K],
        mask_weights [B, K])`.
    """
    token_ids = tf.convert_to_tensor(inputs["token_ids"])
    real = tf.cast(inputs["padding_mask"], tf.bool)
    for special in special_ids:
        real = tf.logical_and(real, tf.not_equal(token_ids, special))
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 3)
    draw = tf.random.stateless_uniform(tf.shape(token_ids), seed=seeds[0])
    selected = tf.logical_and(real, draw < mask_rate)
    action = tf.random.stateless_uniform(tf.shape(token_ids), seed=seeds[1])
    random_ids = tf.random.stateless_uniform(
        tf.shape(token_ids), seed=seeds[2], maxval=vocabulary_size, dtype=tf.int32
    )
    masked = tf.where(tf.logical_and(selected, action < 0.8), mask_token_id, token_ids)
    masked = tf.where(
        tf.logical_and(selected, tf.logical_and(action >= 0.8, action < 0.9)), random_ids, masked
    )
    # Selected positions first (stable order), K = the largest count in the batch.
    count = tf.reduce_sum(tf.cast(selected, tf.int32), axis=1)
    k = tf.maximum(tf.reduce_max(count), 1)
    order = tf.argsort(tf.cast(tf.logical_not(selected), tf.int32), axis=1, stable=True)
    positions = order[:, :k]
    weights = tf.cast(tf.gather(selected, positions, batch_dims=1), tf.float32)
    ids = tf.gather(token_ids, positions, batch_dims=1)
    return dict(inputs, token_ids=masked), positions, ids, weights


@keras.saving.register_keras_serializable(package="keras_sentemb")
class MaskedLanguageModel(BaseTrainer):
    """Masked-language-model training of a `SentenceEncoder`'s backbone.

    Batches are packed sentences; each step masks them (BERT's 80/10/10
    rule, `mask_tokens`, keyed by the step so a resumed run masks the same
    tokens) and trains a keras-hub `MaskedLMHead` (a dense + LayerNorm
    transform, output weights tied to the token embedding) to predict the
    selected tokens with softmax cross-entropy. The head is not part of the
    kept encoder.

    Used to adapt an encoder to a domain before a contrastive method, and to
    build an un-tuned start (the documentation's `untuned-minilm` is the
    default model after 500 such steps).

    Inputs of `fit`: dicts `{"sentence": packed}`.

    Args:
        encoder: `SentenceEncoder`. Trained in place.
        config: `MaskedLanguageModelConfig` (or a dict of its options; in
            `config.py` beside this module). `mask_rate` is the share of
            tokens selected. Defaults to the method's.
        seed: int. Masking seed. Defaults to `0`.
        **kwargs: single options overriding `config`'s (`mask_rate=0.3`),
            and Keras `Model` arguments.

    References:
        - [Devlin et al., 2019. BERT](https://arxiv.org/abs/1810.04805)
    """

    config_class = MaskedLanguageModelConfig

    def __init__(self, encoder, config=None, seed=0, **kwargs):
        super().__init__(encoder, config=config, **kwargs)
        self.mask_rate = self.config.mask_rate
        self.seed = validation.non_negative_int(seed, "seed")
        self.vocabulary_size = int(encoder.backbone.vocabulary_size)
        self.head = keras_hub.layers.MaskedLMHead(
            vocabulary_size=self.vocabulary_size,
            token_embedding=encoder.adapter.token_embedding,
            intermediate_activation="gelu",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            dtype=encoder.backbone.dtype_policy,
            name="mlm_head",
        )
        self.head.build((None, None, encoder.hidden_dim), (None, None))
        self.accuracy_tracker = keras.metrics.Mean(name="accuracy")

    # Read from the tokenizer when masking: a trainer rebuilt by `from_config`
    # gets its tokenizer's vocabulary (an asset) only after construction.
    @property
    def mask_token_id(self):
        return int(self.encoder.tokenizer.mask_token_id)

    @property
    def special_ids(self):
        tokenizer = self.encoder.tokenizer
        return sorted({int(tokenizer.start_token_id), int(tokenizer.end_token_id),
                       int(tokenizer.pad_token_id)})

    def extra_metrics(self):
        return [self.accuracy_tracker]

    def compute_loss_terms(self, data, training=True):
        seed = tf.stack([tf.constant(self.seed, tf.int64),
                         tf.cast(self.optimizer.iterations, tf.int64)])
        inputs, positions, ids, weights = mask_tokens(
            data["sentence"], seed, self.mask_rate, self.mask_token_id,
            self.vocabulary_size, self.special_ids,
        )
        states, _ = self.encoder.forward(inputs, training=training)
        logits = masked_lm_logits(self.head, states[-1], positions)
        loss, accuracy = masked_token_loss(logits, ids, weights)
        return LossOutput(loss, {"accuracy": accuracy})

    def get_config(self):
        config = super().get_config()
        config["seed"] = self.seed
        return config
