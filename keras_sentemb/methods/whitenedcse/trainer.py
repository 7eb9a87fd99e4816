"""WhitenedCSE: SimCSE's dropout views, each whitened by shuffled groups, several positives."""

import keras

from keras_sentemb.losses.info_nce import info_nce_loss
from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.methods.whitenedcse.config import PAPER_POOLING
from keras_sentemb.methods.whitenedcse.config import WhitenedCSEConfig
from keras_sentemb.methods.whitenedcse.whitening import ShuffledGroupWhitening
from keras_sentemb.trainers.base_trainer import BaseTrainer
from keras_sentemb.trainers.training_head import TrainingHead


def whitenedcse_loss(views, temperature=0.05):
    """The sum over the positives of InfoNCE of the first view against that positive.

    Args:
        views: list of float `[b, d]`: the first view, then the positives.
        temperature: float.

    Returns:
        `(loss, parts)`: the float32 scalar loss and `{"info_nce_k": ...}`,
        one InfoNCE per positive (`k` from 1).
    """
    parts = {f"info_nce_{k}": info_nce_loss(views[0], positive, temperature=temperature)
             for k, positive in enumerate(views[1:], start=1)}
    return sum(parts.values()), parts


@keras.saving.register_keras_serializable(package="keras_sentemb")
class WhitenedCSE(TrainingHead, BaseTrainer):
    """WhitenedCSE trainer: `1 + positives` dropout views, each whitened by shuffled groups.

    Each batch of sentences (`"sentence"`) goes through the encoder
    `1 + positives` times, each pass with its own dropout masks. In training
    each view's pooled vectors are whitened over the batch by
    `ShuffledGroupWhitening` (a new channel permutation for every view, so
    the views differ by their grouping as well as by dropout), then pass the
    training-only MLP head when there is one. The loss is the sum, over the
    positives, of InfoNCE of the first view against the batch's views of
    that positive (`temperature`). The kept encoder has neither the
    whitening nor the head. With a `"positive"` in the batch (ESimCSE's
    word repetition, `dup_rate`), the positives are dropout views of it.

    Inputs of `fit`: dict batches `{"sentence": packed}` (and `"positive"`).

    Args:
        encoder: `SentenceEncoder`. Trained in place; kept as `.encoder`.
        config: `WhitenedCSEConfig` (or a dict of its options):
            `temperature`, `positives`, `group_size`, `shuffle`, `epsilon`,
            `dup_rate` (read by the data pipeline), `mlp`. Defaults to the method's.
        pooling: str. The pooling trained. Defaults to the paper's [CLS].
        seed: int or None. Seed of the whitening's channel permutations.
        **kwargs: single options overriding `config`'s, and Keras `Model`
            arguments.

    Examples:

    ```python
    encoder = SentenceEncoder.from_preset("default")
    trainer = WhitenedCSE(encoder, pooling="mean", mlp="none")
    trainer.compile(optimizer=keras.optimizers.AdamW(3e-5))
    trainer.fit(dataset, steps_per_epoch=1000)   # {"sentence": packed} batches
    ```

    References:
        - [Zhuo et al., 2023. WhitenedCSE: Whitening-based Contrastive
          Learning of Sentence Embeddings](https://arxiv.org/abs/2305.17746).
    """

    config_class = WhitenedCSEConfig

    def __init__(self, encoder, config=None, pooling=PAPER_POOLING, seed=None, **kwargs):
        super().__init__(encoder, config=config, **kwargs)
        self.seed = seed
        self.build_training_head(encoder, pooling, "whitenedcse_mlp")
        c = self.config
        self.whitening = ShuffledGroupWhitening(c.group_size, c.shuffle, c.epsilon, seed=seed,
                                                name="shuffled_group_whitening")
        self.whitening.build((None, encoder.output_dim))
        self.info_nce_trackers = [keras.metrics.Mean(name=f"info_nce_{k}")
                                  for k in range(1, c.positives + 1)]

    @property
    def temperature(self):
        return self.config.temperature

    def extra_metrics(self):
        return list(self.info_nce_trackers)

    def get_config(self):
        config = super().get_config()
        config["pooling"] = self.pooling
        config["seed"] = self.seed
        return config

    def embed_view(self, inputs, training):
        """One dropout view: pooled, whitened over the batch and through the head in training."""
        vectors = self.encoder.sentence_vectors(inputs, self.pooling, training=training)
        return self.through_head(self.whitening(vectors, training=training), training)

    def embed_batch(self, data, training=True):
        """`1 + positives` independent views: the sentences', then their positives' (the
        repeated copies when the batch has them, else the sentences again)."""
        positive = data.get("positive", data["sentence"])
        return {f"view_{k}": self.embed_view(data["sentence"] if k == 0 else positive, training)
                for k in range(self.config.positives + 1)}

    def loss_from_embeddings(self, embeddings, data, training=True):
        views = [embeddings[f"view_{k}"] for k in range(self.config.positives + 1)]
        return LossOutput(*whitenedcse_loss(views, self.temperature))
