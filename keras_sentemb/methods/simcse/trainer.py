"""SimCSE: contrastive learning with dropout noise or NLI / paraphrase supervision."""

import keras

from keras_sentemb.losses.info_nce import info_nce_loss
from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.losses.paraphrase import paraphrase_loss
from keras_sentemb.methods.simcse.config import PAPER_POOLING
from keras_sentemb.methods.simcse.config import SimCSEConfig
from keras_sentemb.trainers.base_trainer import BaseTrainer
from keras_sentemb.trainers.training_head import TrainingHead


@keras.saving.register_keras_serializable(package="keras_sentemb")
class SimCSE(TrainingHead, BaseTrainer):
    """SimCSE trainer: InfoNCE with in-batch negatives.

    - `"unsup"`: every sentence is encoded twice, in two passes of the
      batch; the encoder's own dropout makes the two views differ. Each
      first view must find its second view among the batch (InfoNCE,
      temperature 0.05). Two passes rather than one over the doubled batch:
      the same loss, and the passes are independent, so TensorFlow runs them
      side by side (on a CPU host each pass's activations also stay closer
      to the cache): 4-5 % faster per step with TensorFlow's default
      threads, 7-10 % with the cores split between the passes
      (`keras_sentemb.kernels.cpu_threads.configure_train_threads`).
    - `"sup"`: `(anchor, positive, hard negative)` triplets, e.g. (premise,
      entailment, contradiction) or a sentence and its back-translation; the
      positive is the second column, every third column of the batch a
      negative (`hard_negative_weight` adds to each anchor's logit of its own
      hard negative).
    - `"pairs"`: user-supplied `(sentence, positive)` pairs without hard
      negatives, e.g. a sentence and its back-translation (the
      "Contrastive (BT)" baseline of the SG paper): each sentence must find
      its own positive among the batch's positives (InfoNCE).
    - `"paraphrase"`: `(sentence1, sentence2, label)` pairs as in the CS224N
      multitask report (`keras_sentemb.losses.paraphrase_loss`).

    With `mlp="train"` (the paper's unsupervised setting, with [CLS]
    pooling) a `ProjectionMLP` sits on the pooled vector during training
    only; the kept encoder has no head.

    Inputs of `fit`: dict batches `{"sentence": packed}` (unsup),
    `{"sent0", "sent1", "hard_neg"}` (sup), `{"sent0", "sent1"}` (pairs) or `{"sentence1", "sentence2":
    packed, "label": int [B]}` (paraphrase).

    The defaults are the method's (`SimCSEConfig`, in `config.py` beside
    this module): the paper's [CLS] pooling, and its `mlp="auto"` resolved
    for that pooling (`"train"`).

    Args:
        encoder: `SentenceEncoder`. Trained in place; kept as `.encoder`.
        config: `SimCSEConfig` (or a dict of its options). The method's
            options: `mode`, `temperature`, `mlp` (`"auto"` is resolved for
            `pooling`; `"keep"` means the head is already the encoder's
            projection, so the trainer adds none), `hard_negative_weight`,
            `negative_weight`, `negative_margin`. Defaults to the method's.
        pooling: str. The pooling trained. Defaults to the paper's [CLS].
        mini_batch_size: int or None. GradCache chunk size (see
            `BaseTrainer`): batches of any size in the memory of this many
            rows. Defaults to `None` (off).
        **kwargs: single options overriding `config`'s (`mode="sup"`), and
            Keras `Model` arguments.

    Examples:

    ```python
    encoder = SentenceEncoder.from_preset("default")
    trainer = SimCSE(encoder, pooling="mean", mlp="none")
    trainer.compile(optimizer=keras.optimizers.Adam(3e-5))
    trainer.fit(dataset, steps_per_epoch=1000)   # {"sentence": packed} batches
    ```

    References:
        - [Gao et al., 2021. SimCSE: Simple Contrastive Learning of Sentence
          Embeddings](https://arxiv.org/abs/2104.08821).
    """

    config_class = SimCSEConfig

    def __init__(self, encoder, config=None, pooling=PAPER_POOLING, **kwargs):
        super().__init__(encoder, config=config, **kwargs)
        self.build_training_head(encoder, pooling, "simcse_mlp")
        self.positive_tracker = keras.metrics.Mean(name="positive_loss")
        self.negative_tracker = keras.metrics.Mean(name="negative_loss")

    @property
    def mode(self):
        return self.config.mode

    @property
    def temperature(self):
        return self.config.temperature

    def extra_metrics(self):
        if self.mode != "paraphrase":
            return []
        return [self.positive_tracker, self.negative_tracker]

    def get_config(self):
        config = super().get_config()
        config["pooling"] = self.pooling
        return config

    def embed_batch(self, data, training=True):
        """The pooled (and MLP-projected) vectors of every column of the batch."""
        if self.mode == "unsup":
            # Two independent passes: each draws its own dropout masks.
            x = data["sentence"]
            return {"first": self.embed(x, training), "second": self.embed(x, training)}
        columns = {
            "sup": ("sent0", "sent1", "hard_neg"),
            "pairs": ("sent0", "sent1"),
        }.get(self.mode, ("sentence1", "sentence2"))
        return {key: self.embed(data[key], training) for key in columns}

    def loss_from_embeddings(self, embeddings, data, training=True):
        z = embeddings
        if self.mode == "unsup":
            return LossOutput(info_nce_loss(z["first"], z["second"], temperature=self.temperature))
        if self.mode == "pairs":
            return LossOutput(info_nce_loss(z["sent0"], z["sent1"], temperature=self.temperature))
        if self.mode == "sup":
            return LossOutput(info_nce_loss(
                z["sent0"], z["sent1"], hard_negatives=z["hard_neg"],
                temperature=self.temperature,
                hard_negative_weight=self.config.hard_negative_weight,
            ))
        loss, parts = paraphrase_loss(
            z["sentence1"], z["sentence2"], data["label"], self.temperature,
            self.config.negative_weight, self.config.negative_margin,
        )
        return LossOutput(loss, parts)
