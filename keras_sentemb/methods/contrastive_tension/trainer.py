"""`ContrastiveTension`: two towers that learn to agree on identical sentences."""

import keras
import tensorflow as tf

from keras_sentemb import validation
from keras_sentemb.methods.contrastive_tension.config import ContrastiveTensionConfig
from keras_sentemb.methods.contrastive_tension.config import PAPER_POOLING
from keras_sentemb.methods.contrastive_tension.config import parse_negatives
from keras_sentemb.losses.contrastive_tension import contrastive_tension_in_batch_loss
from keras_sentemb.losses.contrastive_tension import contrastive_tension_loss
from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.losses.similarity import l2_normalize
from keras_sentemb.models.logit_scale import LogitScale
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.trainers.base_trainer import BaseTrainer



@keras.saving.register_keras_serializable(package="keras_sentemb")
class ContrastiveTension(BaseTrainer):
    """Contrastive Tension (CT): two independent towers, both trained.

    Both towers start from the same encoder. For the `"kN"` objective each
    batch holds groups of one `(s, s)` pair (label 1) and N pairs of two
    different random sentences (label 0); tower 1 encodes the left
    sentences, tower 2 the right ones, both pooled with `pooling` (the
    paper's masked mean of the last layer). The logit of a pair is the raw
    dot product of the two vectors (`logits="dot"`, the paper's setting) and
    the loss is binary cross-entropy from logits, averaged over the batch.
    With `logits="cosine"` the logit is cosine similarity times a learnable
    `LogitScale` (initialised at `logit_scale`, clamped to `[1, 100]`),
    which keeps the vector norms out of the objective.

    With `negatives="in_batch"` every row is an `(s, s)` pair; the scores are
    cosine(tower1(s_i), tower2(s_j)) times a learnable scale (initialised to
    20) and the loss is the symmetric cross-entropy over rows and columns,
    with candidates gathered across replicas.

    As in the official implementation the towers run with dropout off
    (`dropout=False`); `dropout=True` turns it on.

    Inputs of `fit`: dicts `{"left": packed, "right": packed, "labels":
    float [B]}` (see `keras_sentemb.data.ct_sampler`).

    The defaults are the method's (`ContrastiveTensionConfig`, in `config.py`
    beside this module), with the paper's mean pooling.

    Args:
        encoder: `SentenceEncoder`. Both towers start from it; tower 1 is
            this object, tower 2 an independent copy.
        config: `ContrastiveTensionConfig` (or a dict of its options). The
            method's options the towers use: `negatives` (`"k7"`, any `"kN"`,
            or `"in_batch"`), `logits` (`"dot"` or `"cosine"` for `kN`) and
            `dropout` (the towers in training mode). Defaults to the method's.
        logit_scale: float. Initial scale of cosine logits. Defaults to `20.0`.
        pooling: str. The towers' pooling. Defaults to the paper's mean.
        mini_batch_size: int or None. GradCache chunk size (see
            `BaseTrainer`; useful with `negatives="in_batch"`). Defaults to
            `None` (off).
        **kwargs: single options overriding `config`'s
            (`negatives="in_batch"`), and Keras `Model` arguments.

    Examples:

    ```python
    encoder = SentenceEncoder.from_preset("default")
    ct = ContrastiveTension(encoder)
    ct.compile(optimizer=keras.optimizers.RMSprop(ct_learning_rate_schedule()))
    ct.fit(ct_dataset, steps_per_epoch=100, epochs=4)
    trained = ct.encoder
    ```

    References:
        - [Carlsson et al., 2021](https://openreview.net/forum?id=Ov_sMNau-PF)
    """

    config_class = ContrastiveTensionConfig

    def __init__(self, encoder, config=None, logit_scale=20.0, pooling=PAPER_POOLING, **kwargs):
        super().__init__(encoder, config=config, **kwargs)
        self.mode, self.k = parse_negatives(self.config.negatives)
        self.initial_logit_scale = validation.positive_float(logit_scale, "logit_scale")
        self.pooling = parse_pooling(pooling, encoder.num_layers)
        self.tower1 = encoder
        self.tower2 = encoder.clone(name=f"{encoder.name}_tower2")
        self.logit_scale = None
        if self.mode == "in_batch" or self.config.logits == "cosine":
            self.logit_scale = LogitScale(self.initial_logit_scale, name="logit_scale")

    def candidates(self):
        return {"tower1": self.tower1, "tower2": self.tower2}

    def embed(self, tower, inputs, training):
        return tower.sentence_vectors(
            inputs, self.pooling, training=False, dropout=training and self.config.dropout
        )

    def embed_batch(self, data, training=True):
        """Tower 1's vectors of the left sentences, tower 2's of the right ones."""
        return {
            "left": self.embed(self.tower1, data["left"], training),
            "right": self.embed(self.tower2, data["right"], training),
        }

    def loss_from_embeddings(self, embeddings, data, training=True):
        reps_1, reps_2 = embeddings["left"], embeddings["right"]
        if self.mode == "in_batch":
            return LossOutput(contrastive_tension_in_batch_loss(
                reps_1, reps_2, self.logit_scale.log_scale
            ))
        if self.config.logits == "cosine":
            root = tf.sqrt(self.logit_scale())
            reps_1 = l2_normalize(reps_1) * root
            reps_2 = l2_normalize(reps_2) * root
        return LossOutput(contrastive_tension_loss(reps_1, reps_2, data["labels"]))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "encoder": keras.saving.serialize_keras_object(self.tower1),
                "logit_scale": self.initial_logit_scale,
                "pooling": self.pooling,
            }
        )
        return config

