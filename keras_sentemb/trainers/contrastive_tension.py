"""`ContrastiveTension`: two towers that learn to agree on identical sentences."""

import math

import keras
import tensorflow as tf

from keras_sentemb.losses.contrastive_tension import contrastive_tension_in_batch_loss
from keras_sentemb.losses.contrastive_tension import contrastive_tension_loss
from keras_sentemb.losses.similarity import l2_normalize
from keras_sentemb.trainers.base_trainer import BaseTrainer
from keras_sentemb.trainers.ct_schedule import CTLearningRateSchedule

NEGATIVES = ("k7", "in_batch")
LOGITS = ("dot", "cosine")


def parse_negatives(negatives):
    """`"k7"` (any `"kN"`) or `"in_batch"` -> (mode, K)."""
    if negatives == "in_batch":
        return "in_batch", 0
    if isinstance(negatives, str) and negatives[:1] == "k" and negatives[1:].isdigit():
        k = int(negatives[1:])
        if k >= 1:
            return "k", k
    raise ValueError(
        f"`negatives` must be 'kN' (N >= 1 random negative pairs per positive, "
        f"the paper uses 'k7') or 'in_batch'; received {negatives!r}."
    )


class ContrastiveTension(BaseTrainer):
    """Contrastive Tension (CT): two independent towers, both trained.

    Both towers start from the same encoder. For the `"kN"` objective each
    batch holds groups of one `(s, s)` pair (label 1) and N pairs of two
    different random sentences (label 0); tower 1 encodes the left
    sentences, tower 2 the right ones, both with masked mean pooling of the
    last layer. The logit of a pair is the raw dot product of the two
    vectors (`logits="dot"`, the paper's setting) and the loss is binary
    cross-entropy from logits, averaged over the batch. With
    `logits="cosine"` the logit is cosine similarity times a learnable scale
    (stored as a log, initialised at `log(logit_scale)`, clamped to
    `[0, log(100)]`), which keeps the vector norms out of the objective.

    With `negatives="in_batch"` every row is an `(s, s)` pair; the scores are
    cosine(tower1(s_i), tower2(s_j)) times a learnable scale (initialised to
    20) and the loss is the symmetric cross-entropy over rows and columns,
    with candidates gathered across replicas.

    As in the official implementation the towers run with dropout off
    (`dropout=False`); `dropout=True` turns it on.

    Args:
        encoder: `SentenceEncoder`. Both towers start from it; tower 1 is
            this object, tower 2 an independent copy.
        negatives: str. `"k7"` (or any `"kN"`) or `"in_batch"`. Defaults to
            `"k7"`.
        logits: str. `"dot"` or `"cosine"` for the `kN` objective. Defaults to
            `"dot"`.
        logit_scale: float. Initial scale of cosine logits. Defaults to `20.0`.
        dropout: bool. Run the towers in training mode (dropout on). Defaults
            to `False`.

    Examples:

    ```python
    encoder = SentenceEncoder.from_preset("default")
    ct = ContrastiveTension(encoder)
    ct.compile()  # RMSprop with CT's step schedule
    ct.fit(ct_dataset, steps_per_epoch=100, epochs=4)
    trained = ct.encoder
    ```

    References:
        - [Carlsson et al., 2021](https://openreview.net/forum?id=Ov_sMNau-PF)
    """

    def __init__(
        self,
        encoder,
        negatives="k7",
        logits="dot",
        logit_scale=20.0,
        dropout=False,
        **kwargs,
    ):
        super().__init__(encoder, **kwargs)
        self.negatives = negatives
        self.mode, self.k = parse_negatives(negatives)
        if logits not in LOGITS:
            raise ValueError(f"`logits` must be one of {LOGITS}, received {logits!r}.")
        if not logit_scale > 0:
            raise ValueError(f"`logit_scale` must be > 0, received {logit_scale!r}.")
        self.logits = logits
        self.dropout = bool(dropout)
        self.tower1 = encoder
        self.tower2 = encoder.clone(name=f"{encoder.name}_tower2")
        self.max_log_scale = math.log(100.0)
        self.log_scale = None
        if self.mode == "in_batch" or logits == "cosine":
            self.log_scale = self.add_weight(
                name="log_logit_scale",
                shape=(),
                initializer=keras.initializers.Constant(math.log(logit_scale)),
                trainable=True,
            )

    def default_optimizer(self, learning_rate=None):
        """RMSprop with CT's step schedule (`kN`), AdamW for in-batch."""
        if self.mode == "in_batch":
            return keras.optimizers.AdamW(
                learning_rate=learning_rate or 2e-5, weight_decay=0.01
            )
        return keras.optimizers.RMSprop(
            learning_rate=CTLearningRateSchedule(learning_rate or 1e-5)
        )

    def compile(self, optimizer=None, **kwargs):
        optimizer = optimizer or self.default_optimizer()
        if self.log_scale is not None and hasattr(optimizer, "exclude_from_weight_decay"):
            # Before the optimizer is built (BaseTrainer.compile builds it).
            optimizer.exclude_from_weight_decay(var_list=[self.log_scale])
        super().compile(optimizer=optimizer, **kwargs)

    def candidate_encoders(self):
        return {"tower1": self.tower1, "tower2": self.tower2}

    def select_encoder(self, name):
        self.encoder = self.candidate_encoders()[name]

    def embed(self, tower, inputs, training):
        states = tower.hidden_states(inputs, training=training and self.dropout)
        return tower.pool(states, inputs["padding_mask"], "mean")

    def compute_contrastive_loss(self, data, training=True):
        reps_1 = self.embed(self.tower1, data["left"], training)
        reps_2 = self.embed(self.tower2, data["right"], training)
        if self.mode == "in_batch":
            return contrastive_tension_in_batch_loss(reps_1, reps_2, self.log_scale)
        labels = data["labels"]
        if self.logits == "cosine":
            scale = tf.exp(self.log_scale)
            reps_1 = l2_normalize(reps_1) * tf.sqrt(scale)
            reps_2 = l2_normalize(reps_2) * tf.sqrt(scale)
        return contrastive_tension_loss(reps_1, reps_2, labels)

    def train_step(self, data):
        logs = super().train_step(data)
        if self.log_scale is not None:
            self.log_scale.assign(
                tf.clip_by_value(self.log_scale, 0.0, self.max_log_scale)
            )
        return logs

    def get_config(self):
        return {
            "negatives": self.negatives,
            "logits": self.logits,
            "dropout": self.dropout,
        }
