"""The pooled sentence vector of the SimCSE family, through an MLP head that only training uses.

SimCSE pools the encoder's hidden states and, with `mlp="train"` (the
papers' setting with [CLS] pooling; see `resolve_training_mlp`), passes the
vector through a `ProjectionMLP` in training only: the saved encoder has no
head. ESimCSE and SNCSE train their vectors the same way.
"""

from keras_sentemb import validation
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.models.projection_mlp import ProjectionMLP


def resolve_training_mlp(mlp, pooling):
    """`"auto"` -> `"train"` with [CLS] or a prompt's [MASK] (the papers' settings), else `"none"`.

    A projection MLP used in training only (SimCSE, the parallel-pairs
    method, PromptBERT) belongs to the papers' one-token vectors of a raw
    backbone; on a model's own mean pooling it would train a head that is
    then thrown away. `"keep"` (a head trained and kept as the encoder's
    projection) passes through.
    """
    validation.choice(mlp, "mlp", ("auto", "train", "none", "keep"))
    if mlp == "auto":
        return "train" if pooling in ("cls", "mask") else "none"
    return mlp


class TrainingHead:
    """`pooling`, `mlp` and `embed` of a trainer whose config has `mlp` (a mixin of `BaseTrainer`).

    `build_training_head` (in `__init__`, after `BaseTrainer.__init__`) sets
    `self.pooling` and `self.mlp` (a built `ProjectionMLP` named `name`, or
    None); the head's name is part of the trainer's checkpoints.
    """

    def build_training_head(self, encoder, pooling, name):
        self.pooling = parse_pooling(pooling, encoder.num_layers)
        self.mlp = None
        if resolve_training_mlp(self.config.mlp, self.pooling) == "train":
            self.mlp = ProjectionMLP(encoder.output_dim, name=name)
            self.mlp.build((None, encoder.output_dim))

    def through_head(self, vectors, training):
        """`vectors` through the MLP head in training (unchanged otherwise, or without one)."""
        return self.mlp(vectors) if self.mlp is not None and training else vectors

    def embed(self, inputs, training, view=None):
        """Pooled vectors (through the MLP head in training), the encoder's dropout on in training.

        `view`: a layer of `keras_sentemb.augment` applied in training (None: none).
        """
        return self.through_head(
            self.encoder.sentence_vectors(inputs, self.pooling, training=training, view=view),
            training)
