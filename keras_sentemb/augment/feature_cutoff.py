import keras
from keras import ops

from keras_sentemb.augment import _base
from keras_sentemb.augment import _utils


@keras.saving.register_keras_serializable(package="keras_sentemb")
class FeatureCutoff(_base.RandomEmbeddingView):
    """Feature-cutoff view: zeroes whole hidden dimensions of the embeddings.

    For every example, exactly `int(rate * hidden)` distinct hidden dimensions
    are drawn uniformly without replacement and set to zero at every position
    of the embedding output (`[batch, seq_len, hidden]`, after the embedding
    LayerNorm). Each example gets its own columns; the same columns are cut at
    all of its positions. All other entries are returned bit for bit
    unchanged and the padding mask is not used nor changed.

    This is ConSERT's `_cutoff_embeddings(direction="column")`, the feature
    cutoff of its best unsupervised setting (feature cutoff 0.2 + shuffle).

    The layer acts on the embedding output (`stage = "embeddings"`) and keeps
    the dtype of its input (float16/bfloat16 under mixed precision). It is the
    identity when `training=False` (or `None`), returning its input as is.

    Args:
        rate: float in [0, 1). Fraction of the hidden dimensions to cut; the
            count is `int(rate * hidden)`. Defaults to `0.2`.
        seed: int or `None`. Seed of the layer's `keras.random.SeedGenerator`,
            for reproducible cuts. Defaults to `None`.
        **kwargs: other keyword arguments passed to `keras.layers.Layer`.

    Call arguments:
        `(embeddings, padding_mask=None, training=None)`, the `"embeddings"`
        stage of `keras_sentemb.augment.views`; `padding_mask` is accepted
        for that uniform signature and ignored, and nothing is cut unless
        `training=True`.

    Returns:
        The embeddings with the cut columns zeroed, same shape and dtype.

    Examples:

    >>> import numpy as np
    >>> layer = FeatureCutoff(rate=0.25, seed=1)
    >>> embeddings = np.ones((2, 3, 8), dtype="float32")
    >>> out = np.asarray(layer(embeddings, training=True))
    >>> (out == 0).all(axis=1).sum(axis=-1).tolist()  # int(0.25 * 8) columns
    [2, 2]

    References:
        - [Yan et al., 2021. ConSERT: A Contrastive Framework for
          Self-Supervised Sentence Representation Transfer](
          https://arxiv.org/abs/2105.11741) (Section 3.2, "Cutoff").
        - [Shen et al., 2020. A Simple but Tough-to-Beat Data Augmentation
          Approach for Natural Language Understanding and Generation](
          https://arxiv.org/abs/2009.13818).
    """

    def __init__(self, rate=0.2, seed=None, **kwargs):
        super().__init__(rate=rate, seed=seed, **kwargs)

    def _augment(self, embeddings, padding_mask):
        shape = ops.shape(embeddings)
        batch_size, hidden = shape[0], shape[2]
        if isinstance(hidden, int):
            num_cut = int(hidden * self.rate)
            if num_cut == 0:
                return embeddings
        else:
            num_cut = _utils.floor_rate_times(hidden, self.rate)
        noise = keras.random.uniform(
            (batch_size, hidden), dtype="float32", seed=self.seed_generator
        )
        cut = ops.less(_utils.ranks(noise), num_cut)  # [batch, hidden]
        return ops.where(
            ops.expand_dims(cut, 1), ops.zeros_like(embeddings), embeddings
        )
