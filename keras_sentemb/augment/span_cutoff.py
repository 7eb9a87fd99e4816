import keras
from keras import backend
from keras import ops

from keras_sentemb.augment import _base
from keras_sentemb.augment import _utils


@keras.saving.register_keras_serializable(package="keras_sentemb")
class SpanCutoff(_base.RandomEmbeddingView):
    """Span-cutoff view: keeps (or cuts) one random contiguous span of tokens.

    The span is contiguous over the real tokens of a row (`padding_mask == 1`,
    special tokens included) and its start is drawn uniformly among all the
    starts that fit. With `n` real tokens in a row:

    - `mode="keep"` (ConSERT's "span" augmentation, `_sample_span` in its
      code): keep one span of `max(int(n * (1 - rate)), 1)` real tokens and
      cut all the other real tokens: their embedding rows are set to zero
      and they are removed from the returned padding mask, so attention and
      mask-aware pooling ignore them. (ConSERT replaces their token ids by
      the padding id and zeroes their attention mask; zeroing the rows is the
      same once they are masked out.) The kept span need not contain
      `[CLS]`, so pair this mode with mean pooling (ConSERT's pooling)
      rather than `[CLS]` pooling.
    - `mode="cut"` (the span cutoff of Shen et al., 2020): zero the
      embedding rows of one span of `int(n * rate)` real tokens. The padding
      mask is returned unchanged (as for `TokenCutoff`), so the zeroed rows
      still take part in attention.

    In both modes `rate` is the fraction of real tokens removed, padding rows
    are never changed, and all rows that are not cut are returned bit for bit
    unchanged.

    The layer acts on the embedding output (`stage = "embeddings"`) and is
    the one view that also updates the padding mask (`updates_mask = True`):
    it always returns `(embeddings, padding_mask)`, and the encoder must use
    the returned mask for attention and pooling. It keeps the dtype of its
    inputs and is the identity when `training=False` (or `None`), returning
    its inputs as they are.

    Args:
        rate: float in [0, 1). Fraction of the real tokens of each example to
            remove (see above for the exact span lengths). Defaults to `0.1`.
        mode: str. `"keep"` to keep one span and mask out the rest, or
            `"cut"` to zero one span. Defaults to `"keep"` (ConSERT).
        seed: int or `None`. Seed of the layer's `keras.random.SeedGenerator`,
            for reproducible spans. Defaults to `None`.
        **kwargs: other keyword arguments passed to `keras.layers.Layer`.

    Call arguments:
        `(embeddings, padding_mask=None, training=None)`, the `"embeddings"`
        stage of `keras_sentemb.augment.views` with `updates_mask=True`: the
        span is drawn among the real tokens of `padding_mask` (`None`: no
        padding), only when `training=True`.

    Returns:
        A tuple `(embeddings, padding_mask)`: the embeddings (same shape and
        dtype) and the padding mask (same dtype as the given one; bool when
        `padding_mask` was `None`).

    Examples:

    >>> import numpy as np
    >>> layer = SpanCutoff(rate=0.5, mode="keep", seed=3)
    >>> embeddings = np.ones((1, 8, 4), dtype="float32")
    >>> padding_mask = np.array([[1, 1, 1, 1, 1, 1, 0, 0]], dtype="int32")
    >>> out, mask = layer(embeddings, padding_mask=padding_mask, training=True)
    >>> int(np.asarray(mask).sum())  # max(int(6 * 0.5), 1) tokens kept
    3

    References:
        - [Yan et al., 2021. ConSERT: A Contrastive Framework for
          Self-Supervised Sentence Representation Transfer](
          https://arxiv.org/abs/2105.11741).
        - [Shen et al., 2020. A Simple but Tough-to-Beat Data Augmentation
          Approach for Natural Language Understanding and Generation](
          https://arxiv.org/abs/2009.13818) (span cutoff).
    """

    updates_mask = True
    MODES = ("keep", "cut")

    def __init__(self, rate=0.1, mode="keep", seed=None, **kwargs):
        super().__init__(rate=rate, mode=mode, seed=seed, **kwargs)

    def call(self, embeddings, padding_mask=None, training=None):
        _utils.check_embeddings(embeddings, "SpanCutoff")
        if not training:
            return embeddings, self._mask_or_ones(padding_mask, embeddings)
        if self.mode == "cut" and self.rate == 0.0:
            return embeddings, self._mask_or_ones(padding_mask, embeddings)

        real = _utils.real_token_mask(padding_mask, embeddings, "SpanCutoff")
        num_real = ops.sum(ops.cast(real, "int32"), axis=1)  # [batch]
        if self.mode == "keep":
            span_len = ops.maximum(
                _utils.floor_rate_times(num_real, 1.0 - self.rate), 1
            )
        else:
            span_len = _utils.floor_rate_times(num_real, self.rate)
        # Number of valid starts is num_real - span_len + 1 (at least 1).
        last_start = ops.maximum(num_real - span_len, 0)
        noise = keras.random.uniform(
            ops.shape(num_real), dtype="float32", seed=self.seed_generator
        )
        start = ops.cast(
            ops.floor(noise * ops.cast(last_start + 1, "float32")), "int32"
        )
        start = ops.minimum(start, last_start)
        token_index = _utils.real_token_index(real)  # [batch, seq_len]
        start = ops.expand_dims(start, 1)
        end = start + ops.expand_dims(span_len, 1)
        in_span = ops.logical_and(
            real,
            ops.logical_and(
                ops.greater_equal(token_index, start), ops.less(token_index, end)
            ),
        )
        if self.mode == "keep":
            cut = ops.logical_and(real, ops.logical_not(in_span))
            new_mask = in_span
        else:
            cut = in_span
            new_mask = None
        outputs = ops.where(
            ops.expand_dims(cut, -1), ops.zeros_like(embeddings), embeddings
        )
        if new_mask is None:
            return outputs, self._mask_or_ones(padding_mask, embeddings)
        if padding_mask is not None:
            padding_mask = ops.convert_to_tensor(padding_mask)
            new_mask = ops.cast(new_mask, padding_mask.dtype)
        return outputs, new_mask

    @staticmethod
    def _mask_or_ones(padding_mask, embeddings):
        if padding_mask is not None:
            return padding_mask
        shape = ops.shape(embeddings)
        return ops.ones((shape[0], shape[1]), dtype="bool")

    def compute_output_shape(self, embeddings_shape, padding_mask_shape=None):
        return tuple(embeddings_shape), tuple(embeddings_shape[:2])

    def compute_output_spec(self, embeddings, padding_mask=None, training=None):
        mask_dtype = (
            "bool"
            if padding_mask is None
            else backend.standardize_dtype(padding_mask.dtype)
        )
        return (
            keras.KerasTensor(embeddings.shape, dtype=embeddings.dtype),
            keras.KerasTensor(embeddings.shape[:2], dtype=mask_dtype),
        )
