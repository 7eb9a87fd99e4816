"""`STSRegression`: cosine regression of sentence pairs onto target scores."""

import keras

from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.losses.regression import cosine_mse_loss
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.trainers.base_trainer import BaseTrainer


@keras.saving.register_keras_serializable(package="keras_sentemb")
class STSRegression(BaseTrainer):
    """Regresses the cosine similarity of sentence pairs onto target labels.

    The objective of sentence-transformers' `CosineSimilarityLoss`: both
    sentences are encoded by the same encoder (dropout on in training),
    pooled with the encoder's pooling (or `pooling`), and the loss is the
    mean squared error between their cosine similarity and the pair's
    target. Contrastive Tension (section 5.2) uses it with model-specific
    targets: gold scores mapped linearly onto `[M, 1]`, M being the starting
    model's mean cosine on the least similar STS-B training pairs, so the
    model is not pushed to make unrelated sentences orthogonal (see
    `fit_sts_regression`).

    Batches are dicts `{"sentence1": packed, "sentence2": packed, "label":
    float [B]}` (packed = `encoder.preprocess` output).

    Args:
        encoder: `SentenceEncoder`. The encoder to fine-tune.
        pooling: str or None. Pooling in training. Defaults to `None` (the
            encoder's).

    Examples:

    ```python
    trainer = STSRegression(SentenceEncoder.from_preset("default"))
    trainer.compile(optimizer=keras.optimizers.AdamW(2e-5))
    trainer.fit(dataset, steps_per_epoch=200)
    ```

    References:
        - [Carlsson et al., 2021. Semantic Re-tuning with Contrastive
          Tension](https://openreview.net/forum?id=Ov_sMNau-PF), section 5.2.
        - [Reimers & Gurevych, 2019](https://arxiv.org/abs/1908.10084)
    """

    def __init__(self, encoder, pooling=None, **kwargs):
        super().__init__(encoder, **kwargs)
        self.pooling = parse_pooling(pooling or encoder.pooling, encoder.num_layers)

    def get_config(self):
        config = super().get_config()
        config["pooling"] = self.pooling
        return config

    def embed(self, inputs, training):
        return self.encoder.sentence_vectors(inputs, self.pooling, training=training)

    def compute_loss_terms(self, data, training=True):
        u = self.embed(data["sentence1"], training)
        v = self.embed(data["sentence2"], training)
        return LossOutput(cosine_mse_loss(u, v, data["label"]))
