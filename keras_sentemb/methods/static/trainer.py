"""The static method's trainer: a `StaticEncoder`'s table against a frozen teacher, or on pairs."""

import keras
import tensorflow as tf

from keras_sentemb.losses.info_nce import info_nce_loss
from keras_sentemb.losses.matryoshka import MatryoshkaLoss
from keras_sentemb.losses.matryoshka import check_matryoshka


def cosine_distance(predicted, target):
    """Mean `1 - cos(predicted_i, target_i)` over the batch (float32)."""
    predicted = tf.math.l2_normalize(tf.cast(predicted, tf.float32), axis=-1)
    target = tf.math.l2_normalize(tf.cast(target, tf.float32), axis=-1)
    return tf.reduce_mean(1.0 - tf.reduce_sum(predicted * target, axis=-1))


class StaticTrainer(keras.Model):
    """Trains a `StaticEncoder`'s table against a frozen teacher, or on pairs.

    The batches are the teacher's packed token ids (the static encoder
    shares its vocabulary and ignores the special tokens). Objectives:

    - `"distill"`: `1 - cos(static(s), P(teacher(s)))`, where `P` maps the
      teacher's vectors into the table's space (the distillation's PCA);
      the teacher's sentence vectors are the targets, as in model2vec's
      tokenlearn.
    - `"contrastive"`: InfoNCE with `P(teacher(s))` as each sentence's
      positive and the batch's other targets as negatives.
    - `"pairs"`: InfoNCE on `(static(a), static(b))` pairs with in-batch
      negatives (sentence-transformers' `MultipleNegativesRankingLoss`).

    Args:
        student: `StaticEncoder`.
        teacher: `SentenceEncoder` or None (`"pairs"` needs none).
        objective: str. One of `OBJECTIVES`.
        temperature: float. InfoNCE's temperature.
    """

    def __init__(self, student, teacher, objective="distill", temperature=0.05, **kwargs):
        super().__init__(**kwargs)
        self.encoder = student
        self.teacher = teacher
        if teacher is not None:
            teacher.trainable = False
        self.objective = objective
        self.temperature = float(temperature)
        self._loss = self.base_loss
        self.built = True  # its encoders are built (a backup saves it before any call)

    def candidates(self):
        """The encoders the dev selection scores."""
        return {"static": self.encoder}

    def select(self, name):
        """Nothing to switch: one candidate."""

    def set_matryoshka(self, dims, weights=None):
        """Sum the loss over the first `d` dimensions for each `d` in `dims`."""
        dims, weights = check_matryoshka(dims, weights, self.encoder.output_dim)
        self._loss = MatryoshkaLoss(self.base_loss, dims, weights,
                                    full_dim=self.encoder.output_dim)

    def targets(self, data):
        """The teacher's vectors of a batch (given, or of its packed inputs), in the table's space."""
        if "target" in data:  # encoded once before training (data held in memory)
            vectors = tf.cast(data["target"], tf.float32)
        else:
            vectors = tf.stop_gradient(tf.cast(self.teacher(data["sentence"], training=False),
                                               tf.float32))
        if self.encoder.pca is not None:
            mean, components = self.encoder.pca
            vectors = tf.matmul(vectors - mean, components)
        return vectors

    def embed(self, data):
        """`{"predicted", "target"}` of a batch."""
        if self.objective == "pairs":
            return {"predicted": self.encoder(data["sent0"]),
                    "target": self.encoder(data["sent1"])}
        return {"predicted": self.encoder(data["sentence"]), "target": self.targets(data)}

    def base_loss(self, embeddings):
        predicted, target = embeddings["predicted"], embeddings["target"]
        if self.objective == "distill":
            return cosine_distance(predicted, target)
        return info_nce_loss(predicted, target, temperature=self.temperature)

    def train_step(self, data):
        variables = self.encoder.trainable_variables
        with tf.GradientTape() as tape:
            loss = tf.cast(self._loss(self.embed(data)), tf.float32)
        gradients = tape.gradient(loss, variables)
        finite = tf.math.is_finite(loss)
        self.optimizer.apply_gradients(zip(gradients, variables))
        return {"loss": loss, "nonfinite": 1.0 - tf.cast(finite, tf.float32)}
