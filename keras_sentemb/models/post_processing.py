"""`PostProcessing`: the base of layers fitted on an encoder's sentence vectors."""

import keras

from keras_sentemb import validation
from keras_sentemb.models.pooling import parse_pooling


@keras.saving.register_keras_serializable(package="keras_sentemb")
class PostProcessing(keras.layers.Layer):
    """A layer that maps an encoder's sentence vectors to new ones after pooling.

    Post-processing layers (`Whitening`, `GlowFlow`) are fitted on the
    vectors an encoder outputs with one pooling, the encoder frozen. Attached
    to a `SentenceEncoder` (`encoder.postprocess = layer`) they run after
    pooling, the projection head and the encoder's own L2 normalisation, in
    `encode`, in evaluation and inside the exported SavedModel; they are
    saved with the encoder. An encoder with a post-processing layer encodes
    with the pooling the layer was fitted on (other poolings are refused).

    Subclasses implement `build` and `call` on float vectors `[batch,
    input_dim]` and the `output_dim` property.

    Args:
        input_dim: int. Size of the vectors the layer takes.
        pooling: str or None. The pooling the layer was fitted on; None
            means any. Defaults to `None`.
        **kwargs: Keras layer arguments. The dtype defaults to `"float32"`
            (sentence vectors are float32 whatever the backbone's policy).
    """
    def __init__(self, input_dim, pooling=None, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.input_dim = validation.positive_int(input_dim, "input_dim")
        if pooling is not None:

            pooling = parse_pooling(pooling)
        self.pooling = pooling

    @property
    def output_dim(self):
        """Size of the vectors the layer returns."""
        raise NotImplementedError

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.output_dim)

    def describe(self):
        """A short description for logs and export metadata."""
        return {
            "class": type(self).__name__,
            "input_dim": self.input_dim,
            "output_dim": self.output_dim,
            "pooling": self.pooling,
        }

    def get_config(self):
        config = super().get_config()
        config.update({"input_dim": self.input_dim, "pooling": self.pooling})
        return config
