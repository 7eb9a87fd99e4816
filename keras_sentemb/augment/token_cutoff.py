import keras
from keras import ops

from keras_sentemb.augment import _base
from keras_sentemb.augment import _utils


@keras.saving.register_keras_serializable(package="keras_sentemb")
class TokenCutoff(_base.RandomEmbeddingView):
    """Token-cutoff view: zeroes whole token rows of the embedding output.

    For every example with `n` real tokens, exactly `int(rate * n)` distinct
    real tokens are drawn uniformly without replacement and their rows of the
    embedding output (after the embedding LayerNorm, `[batch, seq_len,
    hidden]`) are set to zero. All other rows are returned bit for bit
    unchanged, and the attention/padding mask is not changed: the cut tokens
    still take part in attention, with a zero input vector.

    This follows ConSERT's `_cutoff_embeddings(direction="row")`:
    `num_cutoff = int(num_tokens * rate)` with `num_tokens = padding_mask.sum()`,
    rows drawn among positions `0..num_tokens-1` (special tokens included). The
    layer draws among the positions where `padding_mask == 1`, which are the
    same positions for right-padded batches (what keras-hub preprocessors
    produce) and remains correct for any other padding layout. Note that the
    implementation of the original Cutoff paper (Shen et al., 2020) also
    removes the cut tokens from the attention mask; ConSERT, followed here,
    does not.

    The layer acts on the embedding output (`stage = "embeddings"`) and keeps
    the dtype of its input (float16/bfloat16 under mixed precision). It is the
    identity when `training=False` (or `None`), returning its input as is.

    Args:
        rate: float in [0, 1). Fraction of the real tokens of each example to
            cut; the count is `int(rate * num_real_tokens)`. Defaults to
            `0.15`.
        seed: int or `None`. Seed of the layer's `keras.random.SeedGenerator`,
            for reproducible cuts. Defaults to `None`.
        **kwargs: other keyword arguments passed to `keras.layers.Layer`.

    Call arguments:
        `(embeddings, padding_mask=None, training=None)`, the `"embeddings"`
        stage of `keras_sentemb.augment.views`: `padding_mask` (1 for real
        tokens, special tokens included; `None`: no padding) says which rows
        can be cut, and nothing is cut unless `training=True`.

    Returns:
        The embeddings with the cut rows zeroed, same shape and dtype.

    Examples:

    >>> import numpy as np
    >>> layer = TokenCutoff(rate=0.5, seed=1)
    >>> embeddings = np.ones((1, 6, 4), dtype="float32")
    >>> padding_mask = np.array([[1, 1, 1, 1, 0, 0]])
    >>> out = np.asarray(layer(embeddings, padding_mask=padding_mask, training=True))
    >>> int((out.sum(axis=-1) == 0).sum())  # int(0.5 * 4) rows zeroed
    2

    References:
        - [Yan et al., 2021. ConSERT: A Contrastive Framework for
          Self-Supervised Sentence Representation Transfer](
          https://arxiv.org/abs/2105.11741) (Section 3.2, "Cutoff").
        - [Shen et al., 2020. A Simple but Tough-to-Beat Data Augmentation
          Approach for Natural Language Understanding and Generation](
          https://arxiv.org/abs/2009.13818).
    """

    def __init__(self, rate=0.15, seed=None, **kwargs):
        super().__init__(rate=rate, seed=seed, **kwargs)

    def _augment(self, embeddings, padding_mask):
        real = _utils.real_token_mask(padding_mask, embeddings, "TokenCutoff")
        shape = ops.shape(embeddings)
        num_real = ops.sum(ops.cast(real, "int32"), axis=1)
        num_cut = _utils.floor_rate_times(num_real, self.rate)
        noise = keras.random.uniform(
            (shape[0], shape[1]), dtype="float32", seed=self.seed_generator
        )
        # Real tokens rank before padding (keys < 1 vs 2), so the `num_cut`
        # lowest ranks are `num_cut` distinct, uniformly drawn real tokens.
        ranks = _utils.ranks(ops.where(real, noise, 2.0))
        cut = ops.less(ranks, ops.expand_dims(num_cut, 1))
        return ops.where(
            ops.expand_dims(cut, -1), ops.zeros_like(embeddings), embeddings
        )
