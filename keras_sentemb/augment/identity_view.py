import keras

from keras_sentemb.augment import _utils


@keras.saving.register_keras_serializable(package="keras_sentemb")
class IdentityView(keras.layers.Layer):
    """The "none" view: returns the embedding output unchanged.

    ConSERT lists "none" among its augmentations (one of the two views is then
    the plain sentence). `make_view("none")` returns this layer so that a
    trainer can treat every view alike; it always returns its input as is,
    in training and in inference.

    The layer has the embedding-view call signature (`stage = "embeddings"`).

    Args:
        **kwargs: keyword arguments passed to `keras.layers.Layer`.

    Call arguments:
        embeddings: tensor `[batch, seq_len, hidden]`.
        padding_mask: ignored. Defaults to `None`.
        training: ignored. Defaults to `None`.

    Returns:
        `embeddings`, unchanged.

    Examples:

    >>> import numpy as np
    >>> embeddings = np.ones((1, 2, 3), dtype="float32")
    >>> IdentityView()(embeddings, training=True).shape
    TensorShape([1, 2, 3])

    References:
        - [Yan et al., 2021. ConSERT: A Contrastive Framework for
          Self-Supervised Sentence Representation Transfer](
          https://arxiv.org/abs/2105.11741).
    """

    stage = "embeddings"
    updates_mask = False
    requires_gradients = False

    def __init__(self, **kwargs):
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)

    def call(self, embeddings, padding_mask=None, training=None):
        _utils.check_embeddings(embeddings, "IdentityView")
        return embeddings

    def compute_output_shape(self, embeddings_shape, padding_mask_shape=None):
        return embeddings_shape
