import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.augment import TokenShuffle


def _position_ids(mask):
    batch_size, seq_len = mask.shape
    return np.tile(np.arange(seq_len, dtype="int32"), (batch_size, 1))


def _check_rows(position_ids, shuffled, lengths, keep_special):
    for row, n in enumerate(lengths):
        # The real tokens' position ids are permuted among themselves.
        assert sorted(shuffled[row, :n].tolist()) == list(range(n))
        # Padding positions keep their position ids.
        np.testing.assert_array_equal(shuffled[row, n:], position_ids[row, n:])
        if keep_special and n >= 1:
            assert shuffled[row, 0] == 0
            assert shuffled[row, n - 1] == n - 1


@pytest.mark.parametrize("keep_special", [False, True])
def test_permutes_real_tokens_only(batch, keep_special):
    _, mask, lengths = batch
    position_ids = _position_ids(mask)
    layer = TokenShuffle(keep_special=keep_special, seed=7)
    changed = 0
    for _ in range(5):
        shuffled = np.asarray(layer(position_ids, padding_mask=mask, training=True))
        assert shuffled.dtype == np.int32
        _check_rows(position_ids, shuffled, lengths, keep_special)
        changed += int((shuffled != position_ids).any(axis=1).sum())
    assert changed > 0


def test_shuffles_special_tokens_by_default():
    # ConSERT shuffles [CLS] and [SEP] too: over many draws of a 4-token row,
    # position 0 must sometimes receive another position id.
    mask = np.ones((64, 4), dtype="int32")
    layer = TokenShuffle(seed=3)
    shuffled = np.asarray(layer(_position_ids(mask), padding_mask=mask, training=True))
    assert (shuffled[:, 0] != 0).any()
    assert (shuffled[:, 3] != 3).any()
    # Every permutation of 4 tokens is reachable; 64 draws see many of them.
    assert len({tuple(row) for row in shuffled.tolist()}) > 10


def test_keep_special_with_middle_tokens_changes_something():
    mask = np.ones((32, 6), dtype="int32")
    layer = TokenShuffle(keep_special=True, seed=3)
    shuffled = np.asarray(layer(_position_ids(mask), padding_mask=mask, training=True))
    np.testing.assert_array_equal(shuffled[:, 0], 0)
    np.testing.assert_array_equal(shuffled[:, 5], 5)
    assert (shuffled[:, 1:5] != np.arange(1, 5)).any()


def test_shuffles_given_position_ids_not_indices():
    # Position ids need not be 0..T-1 (e.g. RoBERTa offsets): values move.
    mask = np.array([[1, 1, 1, 1, 0, 0]] * 16, dtype="int32")
    position_ids = np.tile(np.arange(2, 8, dtype="int32"), (16, 1))
    shuffled = np.asarray(
        TokenShuffle(seed=0)(position_ids, padding_mask=mask, training=True)
    )
    for row in shuffled:
        assert sorted(row[:4].tolist()) == [2, 3, 4, 5]
        assert row[4:].tolist() == [6, 7]


def test_left_padding():
    mask = np.array([[0, 0, 1, 1, 1, 1]] * 16, dtype="int32")
    position_ids = _position_ids(mask)
    shuffled = np.asarray(
        TokenShuffle(seed=0)(position_ids, padding_mask=mask, training=True)
    )
    np.testing.assert_array_equal(shuffled[:, :2], position_ids[:, :2])
    for row in shuffled:
        assert sorted(row[2:].tolist()) == [2, 3, 4, 5]


def test_dict_input_and_no_mask(batch):
    _, mask, lengths = batch
    position_ids = _position_ids(mask)
    layer = TokenShuffle(seed=1)
    shuffled = np.asarray(
        layer({"position_ids": position_ids, "padding_mask": mask}, training=True)
    )
    _check_rows(position_ids, shuffled, lengths, keep_special=False)
    full = np.asarray(layer(position_ids, training=True))
    for row in full:
        assert sorted(row.tolist()) == list(range(mask.shape[1]))


def test_bool_mask(batch):
    _, mask, lengths = batch
    position_ids = _position_ids(mask)
    shuffled = np.asarray(
        TokenShuffle(seed=1)(
            position_ids, padding_mask=mask.astype(bool), training=True
        )
    )
    _check_rows(position_ids, shuffled, lengths, keep_special=False)


def test_tf_function_dynamic_shapes(batch):
    _, mask, lengths = batch
    layer = TokenShuffle(keep_special=True, seed=2)

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None], tf.int32),
            tf.TensorSpec([None, None], tf.int32),
        ]
    )
    def shuffle(position_ids, padding_mask):
        return layer(position_ids, padding_mask=padding_mask, training=True)

    for cut in (mask.shape[1], 11):
        sub_mask = mask[:5, :cut]
        position_ids = _position_ids(sub_mask)
        shuffled = shuffle(tf.constant(position_ids), tf.constant(sub_mask)).numpy()
        _check_rows(position_ids, shuffled, np.minimum(lengths[:5], cut), True)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="keep_special"):
        TokenShuffle(keep_special="yes")
    with pytest.raises(ValueError, match="1.5"):
        TokenShuffle(seed=1.5)
    with pytest.raises(ValueError, match="rank 2"):
        TokenShuffle()(np.zeros((2, 3, 4), dtype="int32"), training=True)
    with pytest.raises(ValueError, match="position_ids"):
        TokenShuffle()({"ids": np.zeros((2, 3), dtype="int32")}, training=True)
