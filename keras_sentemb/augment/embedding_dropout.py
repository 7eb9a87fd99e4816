import keras
from keras import ops

from keras_sentemb.augment import _base
from keras_sentemb.augment import _utils


@keras.saving.register_keras_serializable(package="keras_sentemb")
class EmbeddingDropout(_base.RandomEmbeddingView):
    """Dropout view: drops single elements of the embedding output.

    Unlike the cutoffs, every element of the embedding output (`[batch,
    seq_len, hidden]`, after the embedding LayerNorm) is considered on its
    own. Two variants:

    - `mode="bernoulli"`: standard inverted dropout via
      `keras.random.dropout`: every element is zeroed independently with
      probability `rate` and the kept elements are scaled by `1 / (1 - rate)`,
      so the expected value of every element is unchanged. Padding rows are
      treated like any other row (they are masked out downstream anyway).
    - `mode="exact"`: ConSERT's implementation
      (`_cutoff_embeddings(direction="random")`): for an example with `n`
      real tokens, exactly `int(rate * n * hidden)` distinct elements of its
      real-token rows are zeroed, with no rescaling; padding rows are left
      unchanged.

    Note that this is not SimCSE's "dropout" view, which is the encoder's own
    dropout in two forward passes and needs no layer here.

    The layer acts on the embedding output (`stage = "embeddings"`) and keeps
    the dtype of its input (float16/bfloat16 under mixed precision). It is the
    identity when `training=False` (or `None`), returning its input as is.

    Args:
        rate: float in [0, 1). Probability (`"bernoulli"`) or exact fraction
            (`"exact"`) of the elements to drop. Defaults to `0.2`.
        mode: str. `"bernoulli"` or `"exact"` (see above). Defaults to
            `"bernoulli"`.
        seed: int or `None`. Seed of the layer's `keras.random.SeedGenerator`,
            for reproducible masks. Defaults to `None`.
        **kwargs: other keyword arguments passed to `keras.layers.Layer`.

    Call arguments:
        `(embeddings, padding_mask=None, training=None)`, the `"embeddings"`
        stage of `keras_sentemb.augment.views`; `padding_mask` (`None`: no
        padding) counts the real tokens for `mode="exact"` only, and nothing
        is dropped unless `training=True`.

    Returns:
        The embeddings after dropout, same shape and dtype.

    Examples:

    >>> import numpy as np
    >>> layer = EmbeddingDropout(rate=0.5, seed=0)
    >>> embeddings = np.ones((1, 4, 8), dtype="float32")
    >>> out = np.asarray(layer(embeddings, training=True))
    >>> sorted(set(out.ravel().tolist()))  # dropped, or kept and scaled by 2
    [0.0, 2.0]

    References:
        - [Yan et al., 2021. ConSERT: A Contrastive Framework for
          Self-Supervised Sentence Representation Transfer](
          https://arxiv.org/abs/2105.11741) (Section 3.2, "Dropout").
    """

    MODES = ("bernoulli", "exact")

    def __init__(self, rate=0.2, mode="bernoulli", seed=None, **kwargs):
        super().__init__(rate=rate, mode=mode, seed=seed, **kwargs)

    def _augment(self, embeddings, padding_mask):
        if self.mode == "bernoulli":
            return keras.random.dropout(
                embeddings, self.rate, seed=self.seed_generator
            )
        real = _utils.real_token_mask(padding_mask, embeddings, "EmbeddingDropout")
        shape = ops.shape(embeddings)
        batch_size, seq_len, hidden = shape[0], shape[1], shape[2]
        num_real = ops.sum(ops.cast(real, "int32"), axis=1)
        num_cut = _utils.floor_rate_times(num_real * hidden, self.rate)
        noise = keras.random.uniform(
            (batch_size, seq_len, hidden), dtype="float32", seed=self.seed_generator
        )
        keys = ops.where(ops.expand_dims(real, -1), noise, 2.0)
        keys = ops.reshape(keys, (batch_size, seq_len * hidden))
        cut = ops.less(_utils.ranks(keys), ops.expand_dims(num_cut, 1))
        cut = ops.reshape(cut, (batch_size, seq_len, hidden))
        return ops.where(cut, ops.zeros_like(embeddings), embeddings)
