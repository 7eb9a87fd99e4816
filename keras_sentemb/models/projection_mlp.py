"""`ProjectionMLP`: a dense tanh head used on pooled vectors during training only."""

import keras

from keras_sentemb import validation

INITIALIZERS = ("simcse", "identity")


@keras.saving.register_keras_serializable(package="keras_sentemb")
class ProjectionMLP(keras.layers.Layer):
    """`tanh(W x + b)` on sentence vectors, for training only (SimCSE's MLP).

    SimCSE trains unsupervised [CLS] pooling through this head and drops it
    afterwards; the parallel-pairs method does the same on the student. The
    head never becomes part of the kept encoder.

    Args:
        units: int. Output size (the sentence vector size).
        initializer: str. `"simcse"` (normal, stddev 0.02, BERT's
            initialiser) or `"identity"` (the head starts as `tanh(x)`, so
            training begins in the model's own space). Defaults to
            `"simcse"`.

    References:
        - [Gao et al., 2021. SimCSE](https://arxiv.org/abs/2104.08821)
    """

    def __init__(self, units, initializer="simcse", **kwargs):
        super().__init__(**kwargs)
        self.units = validation.positive_int(units, "units")
        self.initializer = validation.choice(initializer, "initializer", INITIALIZERS)
        kernel = (
            keras.initializers.RandomNormal(stddev=0.02)
            if initializer == "simcse" else "identity"
        )
        self.dense = keras.layers.Dense(
            self.units, activation="tanh", kernel_initializer=kernel,
            dtype="float32", name="dense",
        )

    def build(self, input_shape):
        self.dense.build(input_shape)
        self.built = True

    def call(self, x):
        return self.dense(keras.ops.cast(x, "float32"))

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units, "initializer": self.initializer})
        return config
