import keras
from keras import ops

from keras_sentemb.augment import _utils


@keras.saving.register_keras_serializable(package="keras_sentemb")
class TokenShuffle(keras.layers.Layer):
    """Token-shuffle view: randomly permutes position ids of the real tokens.

    ConSERT's "shuffle" augmentation changes word order without touching the
    token ids: the token ids stay where they are and the position ids fed to
    the position embedding are permuted, so the encoder sees the same bag of
    tokens in a random order. For every row, the position ids of the real
    tokens (`padding_mask == 1`, `[CLS]` and `[SEP]` included) are permuted
    among themselves; the position ids at padding positions are returned
    unchanged. This is exactly ConSERT's `_replace_position_ids`, which
    shuffles `range(num_tokens)` over the whole non-padded length, special
    tokens included. With `keep_special=True` the first and the last real
    token keep their position id (for `[CLS] ... [SEP]` rows this leaves the
    special tokens in place and shuffles the words only).

    The layer acts on position ids (`stage = "positions"`): the encoder applies
    it before the embedding layer. It is the identity when `training=False`
    (or `None`), returning its input tensor as is.

    Args:
        keep_special: bool. Whether to keep the first and the last real token
            of each row at their position (and shuffle only the tokens in
            between). Defaults to `False` (ConSERT's behaviour: all real tokens
            are shuffled).
        seed: int or `None`. Seed of the layer's `keras.random.SeedGenerator`,
            so that a given seed gives a reproducible sequence of shuffles.
            Defaults to `None`.
        **kwargs: other keyword arguments passed to `keras.layers.Layer`
            (e.g. `name`, `dtype`).

    Call arguments:
        position_ids: int tensor `[batch, seq_len]`, the position ids the
            encoder would use (usually `0..seq_len-1` in every row). A dict
            with keys `"position_ids"` and `"padding_mask"` is also accepted.
        padding_mask: tensor `[batch, seq_len]` (bool or 0/1), 1 for real
            tokens including special tokens and 0 for padding. `None` means
            that every position is a real token. Defaults to `None`.
        training: bool. Shuffle only when `True`. Defaults to `None`
            (identity).

    Returns:
        The shuffled position ids, same shape and dtype as `position_ids`.

    Examples:

    >>> import numpy as np
    >>> layer = TokenShuffle(seed=0)
    >>> position_ids = np.tile(np.arange(6, dtype="int32"), (2, 1))
    >>> padding_mask = np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]])
    >>> shuffled = layer(position_ids, padding_mask=padding_mask, training=True)
    >>> sorted(np.asarray(shuffled)[1, :3].tolist())
    [0, 1, 2]
    >>> np.asarray(shuffled)[1, 3:].tolist()
    [3, 4, 5]

    References:
        - [Yan et al., 2021. ConSERT: A Contrastive Framework for
          Self-Supervised Sentence Representation Transfer](
          https://arxiv.org/abs/2105.11741) (Section 3.2, "Shuffle").
    """

    stage = "positions"
    updates_mask = False
    requires_gradients = False

    def __init__(self, keep_special=False, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.keep_special = _utils.validate_bool(
            keep_special, "keep_special", type(self).__name__
        )
        self.seed = _utils.validate_seed(seed, type(self).__name__)
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, position_ids, padding_mask=None, training=None):
        if isinstance(position_ids, dict):
            inputs = position_ids
            if "position_ids" not in inputs:
                raise ValueError(
                    "TokenShuffle expects a dict input to have the key "
                    f"'position_ids'. Received keys: {sorted(inputs)}."
                )
            position_ids = inputs["position_ids"]
            padding_mask = inputs.get("padding_mask", padding_mask)
        _utils.check_rank(
            position_ids, 2, "position_ids", "TokenShuffle", "[batch, seq_len]"
        )
        if not training:
            return position_ids

        real = _utils.real_token_mask(padding_mask, position_ids, "TokenShuffle")
        shape = ops.shape(position_ids)
        batch_size, seq_len = shape[0], shape[1]
        index = ops.broadcast_to(
            ops.expand_dims(ops.arange(seq_len, dtype="int32"), 0),
            (batch_size, seq_len),
        )
        index_f = ops.cast(index, "float32")
        noise = keras.random.uniform(
            (batch_size, seq_len), dtype="float32", seed=self.seed_generator
        )
        # Sort keys: real tokens get a random key in [0, 1), padding keeps its
        # order after them (2 + index). Sorting gives the real positions in a
        # random order followed by the padding positions in order.
        shuffled_keys = ops.where(real, noise, 2.0 + index_f)
        if self.keep_special:
            count = ops.cumsum(ops.cast(real, "int32"), axis=1)
            length = count[:, -1:]
            first = ops.logical_and(real, ops.equal(count, 1))
            last = ops.logical_and(real, ops.equal(count, length))
            shuffled_keys = ops.where(last, 1.5, shuffled_keys)
            shuffled_keys = ops.where(first, -1.0, shuffled_keys)
        shuffled_order = ops.argsort(shuffled_keys, axis=-1)
        # The same layout without the shuffle: real positions in order, then
        # padding positions in order.
        padding_keys = 2.0 * ops.cast(seq_len, "float32") + index_f
        ordered_keys = ops.where(real, index_f, padding_keys)
        ordered_rank = _utils.ranks(ordered_keys)
        # The j-th real position (in order) takes the position id of the j-th
        # real position in the shuffled order; padding maps to itself.
        source = ops.take_along_axis(shuffled_order, ordered_rank, axis=1)
        return ops.take_along_axis(position_ids, ops.cast(source, "int32"), axis=1)

    def compute_output_shape(self, position_ids_shape, padding_mask_shape=None):
        if isinstance(position_ids_shape, dict):
            return position_ids_shape["position_ids"]
        return position_ids_shape

    def get_config(self):
        config = super().get_config()
        config.update({"keep_special": self.keep_special, "seed": self.seed})
        return config
