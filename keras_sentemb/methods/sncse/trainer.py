"""SNCSE: unsupervised SimCSE with negated sentences as soft negatives (a margin loss)."""

import keras
import tensorflow as tf

from keras_sentemb.losses.info_nce import info_nce_loss
from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.losses.similarity import l2_normalize
from keras_sentemb.methods.sncse.config import PAPER_POOLING
from keras_sentemb.methods.sncse.config import SNCSEConfig
from keras_sentemb.trainers.base_trainer import BaseTrainer
from keras_sentemb.trainers.training_head import TrainingHead


def row_cosines(a, b):
    """`[b]` float32: the cosine of each row of `a` with the same row of `b`."""
    return tf.reduce_sum(l2_normalize(a) * l2_normalize(b), axis=-1)


def bidirectional_margin_loss(anchors, positives, negated, alpha=0.1, beta=0.3):
    """SNCSE's BML: keeps `cos(h, h_neg) - cos(h, h+)` within `[-beta, -alpha]`.

    With `gap_i = cos(h_i, h_neg_i) - cos(h_i, h+_i)`, the loss is the mean
    over the rows of `relu(gap_i + alpha) + relu(-gap_i - beta)`: the
    negation must be less similar to the sentence than its positive by at
    least `alpha`, and by no more than `beta` (it is a *soft* negative).

    Args:
        anchors: float `[b, d]`. The sentences' embeddings (`h`).
        positives: float `[b, d]`. Their positives' embeddings (`h+`).
        negated: float `[b, d]`. Their negations' embeddings (`h_neg`).
        alpha: float. The lower margin.
        beta: float. The upper margin.

    Returns:
        `(loss, gap)`: the float32 scalar loss and the `[b]` gaps.
    """
    gap = row_cosines(anchors, negated) - row_cosines(anchors, positives)
    per_row = tf.nn.relu(gap + alpha) + tf.nn.relu(-gap - beta)
    return tf.reduce_mean(per_row), gap


def sncse_loss(anchors, positives, negated, temperature=0.05, alpha=0.1, beta=0.3,
               weight=1e-3):
    """InfoNCE of the anchors against the batch's positives, plus `weight` x BML.

    Returns:
        `(loss, parts)`: the float32 scalar loss and a dict of its parts
        (`info_nce`, `bml`, `negation_gap`: the mean gap).
    """
    contrastive = info_nce_loss(anchors, positives, temperature=temperature)
    bml, gap = bidirectional_margin_loss(anchors, positives, negated, alpha, beta)
    loss = contrastive + tf.cast(weight, tf.float32) * bml
    return loss, {"info_nce": contrastive, "bml": bml, "negation_gap": tf.reduce_mean(gap)}


@keras.saving.register_keras_serializable(package="keras_sentemb")
class SNCSE(TrainingHead, BaseTrainer):
    """SNCSE trainer: SimCSE's dropout views, and each sentence's negation as a soft negative.

    Each batch holds the sentences (`"sentence"`) and their negations
    (`"negated"`, made in the data pipeline, see
    `keras_sentemb.methods.sncse.negation`). The sentences go through the
    encoder twice (two independent dropout passes, as unsupervised SimCSE),
    the negations once; with `mlp="train"` all three through the
    training-only MLP head. The loss is InfoNCE of the first views against
    the batch's second views (`temperature`), plus `bml_weight` times the
    bidirectional margin loss (`bidirectional_margin_loss`) on the gap
    `cos(h, h_neg) - cos(h, h+)` between each sentence's similarity to its
    negation and to its second view, kept within `[-bml_beta, -bml_alpha]`.
    The negation is no InfoNCE candidate.

    Inputs of `fit`: dict batches `{"sentence": packed, "negated": packed}`.

    Args:
        encoder: `SentenceEncoder`. Trained in place; kept as `.encoder`.
        config: `SNCSEConfig` (or a dict of its options): `temperature`,
            `bml_alpha`, `bml_beta`, `bml_weight`, `mlp`. Defaults to the
            method's.
        pooling: str. The pooling trained. Defaults to [CLS] (see the
            method's docstring: the official code pools a prompt's [MASK]).
        mini_batch_size: int or None. GradCache chunk size (see
            `BaseTrainer`). Defaults to `None` (off).
        **kwargs: single options overriding `config`'s, and Keras `Model`
            arguments.

    Examples:

    ```python
    encoder = SentenceEncoder.from_preset("default")
    trainer = SNCSE(encoder, pooling="mean", mlp="none")
    trainer.compile(optimizer=keras.optimizers.AdamW(1e-5))
    trainer.fit(dataset, steps_per_epoch=1000)   # {"sentence", "negated"} batches
    ```

    References:
        - [Wang et al., 2022. SNCSE: Contrastive Learning for Unsupervised
          Sentence Embedding with Soft Negative
          Samples](https://arxiv.org/abs/2201.05979).
    """

    config_class = SNCSEConfig

    def __init__(self, encoder, config=None, pooling=PAPER_POOLING, **kwargs):
        super().__init__(encoder, config=config, **kwargs)
        self.build_training_head(encoder, pooling, "sncse_mlp")
        self.info_nce_tracker = keras.metrics.Mean(name="info_nce")
        self.bml_tracker = keras.metrics.Mean(name="bml")
        self.gap_tracker = keras.metrics.Mean(name="negation_gap")

    @property
    def temperature(self):
        return self.config.temperature

    def extra_metrics(self):
        return [self.info_nce_tracker, self.bml_tracker, self.gap_tracker]

    def get_config(self):
        config = super().get_config()
        config["pooling"] = self.pooling
        return config

    def embed_batch(self, data, training=True):
        """Two dropout views of the sentences and one of their negations."""
        x = data["sentence"]
        return {"first": self.embed(x, training), "second": self.embed(x, training),
                "negated": self.embed(data["negated"], training)}

    def loss_from_embeddings(self, embeddings, data, training=True):
        c = self.config
        loss, parts = sncse_loss(embeddings["first"], embeddings["second"],
                                 embeddings["negated"], self.temperature, c.bml_alpha,
                                 c.bml_beta, c.bml_weight)
        return LossOutput(loss, parts)
