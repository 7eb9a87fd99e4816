"""PromptBERT: the template's [MASK] state as the vector, two templates as the positive pair."""

import keras
import tensorflow as tf

from keras_sentemb.losses.info_nce import info_nce_loss
from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.methods.prompt_bert.config import PAPER_POOLING
from keras_sentemb.methods.prompt_bert.config import PromptBERTConfig
from keras_sentemb.models.pooling import MASK_POOLING
from keras_sentemb.models.pooling import token_state
from keras_sentemb.trainers.base_trainer import BaseTrainer
from keras_sentemb.trainers.training_head import TrainingHead


def template_inputs(prompt, start_id, end_id, lengths):
    """The template alone, once per sentence length `0 .. lengths - 1`, positions as with a sentence.

    Row `l` is `[start, *prefix, *suffix, end]` with the positions the
    template's tokens have around a sentence of `l` tokens: the prefix at
    `0 .. len(prefix)`, the suffix and end token shifted by `l`.
    """
    ids = [start_id, *prompt.prefix, *prompt.suffix, end_id]
    lead = 1 + len(prompt.prefix)
    base = tf.range(len(ids), dtype=tf.int32)[tf.newaxis, :]
    shift = tf.range(lengths, dtype=tf.int32)[:, tf.newaxis]
    positions = base + tf.where(base >= lead, shift, tf.zeros_like(shift))
    token_ids = tf.tile(tf.constant([ids], tf.int32), [lengths, 1])
    return {"token_ids": token_ids, "padding_mask": tf.ones_like(token_ids),
            "position_ids": positions}


@keras.saving.register_keras_serializable(package="keras_sentemb")
class PromptBERT(TrainingHead, BaseTrainer):
    """PromptBERT trainer (unsupervised): template views, template denoising, InfoNCE.

    Each batch holds every sentence framed in the encoder's template
    (`"sentence"`: `encoder.prompt`, e.g. `This sentence of "[X]" means
    [MASK] .`) and in the positive's template (`"positive"`, e.g. `This
    sentence : "[X]" means [MASK] .`). Each goes through the encoder with
    dropout on; its vector is the last layer at the template's [MASK]
    (`pooling="mask"`). With `denoise`, the [MASK] state of the template
    alone is subtracted: the template's tokens without the sentence, at the
    positions they have around a sentence of that length, run with dropout
    and gradients (the template's own bias, Jiang et al. section 4.2). With
    `mlp="train"`, a tanh MLP head follows in training only. The sentence
    must find its positive among the batch's positives: InfoNCE at
    `temperature`. The saved encoder keeps the first template and [MASK]
    pooling, without denoising, as the paper evaluates.

    Another pooling (`pooling="mean"`, ...) trains that vector of the two
    templates' views; denoising then has no [MASK] to act on and is skipped.

    Inputs of `fit`: dict batches `{"sentence": packed, "positive": packed}`.

    Args:
        encoder: `SentenceEncoder` whose `prompt` is the first template.
            Trained in place; kept as `.encoder`.
        config: `PromptBERTConfig` (or a dict of its options). Defaults to
            the method's.
        pooling: str. The pooling trained. Defaults to `"mask"`.
        **kwargs: single options overriding `config`'s, and Keras `Model`
            arguments.

    References:
        - [Jiang et al., 2022. PromptBERT: Improving BERT Sentence Embeddings
          with Prompts](https://arxiv.org/abs/2201.04337).
    """

    config_class = PromptBERTConfig

    def __init__(self, encoder, config=None, pooling=PAPER_POOLING, **kwargs):
        super().__init__(encoder, config=config, **kwargs)
        if encoder.prompt_template != self.config.template:
            encoder.prompt = self.config.template
        self.build_training_head(encoder, pooling, "promptbert_mlp")
        if self.pooling == MASK_POOLING:
            for template in (self.config.template, self.config.positive_template):
                encoder._check_mask_pooling(self.pooling, template)

    @property
    def positive_prompt(self):
        """The positive's `Prompt` (tokenized on first use, as the encoder's own)."""
        prompt = self.__dict__.get("_positive_prompt")
        if prompt is None:
            prompt = self.encoder.make_prompt(self.config.positive_template)
            object.__setattr__(self, "_positive_prompt", prompt)
        return prompt

    def get_config(self):
        config = super().get_config()
        config["pooling"] = self.pooling
        return config

    def _vector(self, inputs, prompt, training, dropout):
        states, padding_mask = self.encoder.forward(inputs, training=training, dropout=dropout)
        if self.pooling != MASK_POOLING:
            return self.encoder.pool(states, padding_mask, self.pooling)
        vectors = token_state(states[-1], padding_mask, prompt.mask_index)
        if self.config.denoise and training:
            lengths = tf.reduce_sum(tf.cast(padding_mask, tf.int32), axis=1) - (2 + prompt.extra)
            vectors = vectors - tf.gather(
                self._template_states(prompt, inputs, training, dropout), lengths)
        return vectors

    def _template_states(self, prompt, inputs, training, dropout):
        """The [MASK] state of the template alone, one row per sentence length the batch can hold."""
        width = tf.shape(inputs["token_ids"])[1]
        lengths = width - (2 + prompt.extra) + 1
        alone = template_inputs(prompt, self.encoder.start_token_id, self.encoder.end_token_id,
                                lengths)
        states, padding_mask = self.encoder.forward(alone, training=training, dropout=dropout)
        return token_state(states[-1], padding_mask, prompt.mask_index)

    def embed_one(self, inputs, prompt, training, dropout=None):
        """The vectors of packed `inputs` framed in `prompt` (denoised and through the MLP in
        training); `dropout` defaults to `training`."""
        vectors = self.encoder.head(self._vector(inputs, prompt, training, dropout),
                                    normalize=False)
        return self.through_head(tf.cast(vectors, "float32"), training)

    def embed_batch(self, data, training=True, dropout=None):
        """The vectors of the sentences and of their positives (through the MLP in training)."""
        return {"sentence": self.embed_one(data["sentence"], self.encoder.prompt, training,
                                           dropout),
                "positive": self.embed_one(data["positive"], self.positive_prompt, training,
                                           dropout)}

    def loss_from_embeddings(self, embeddings, data, training=True):
        return LossOutput(info_nce_loss(embeddings["sentence"], embeddings["positive"],
                                        temperature=self.config.temperature))
