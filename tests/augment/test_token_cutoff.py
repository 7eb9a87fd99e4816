import numpy as np
import pytest

from keras_sentemb.augment import TokenCutoff


@pytest.mark.parametrize("rate", [0.15, 0.3, 0.5, 0.9])
def test_zeroes_exact_number_of_real_rows(batch, rate):
    embeddings, mask, lengths = batch
    layer = TokenCutoff(rate=rate, seed=11)
    for _ in range(3):
        out = np.asarray(layer(embeddings, padding_mask=mask, training=True))
        for row, n in enumerate(lengths):
            zero_rows = np.flatnonzero((out[row] == 0).all(axis=-1))
            assert len(zero_rows) == int(rate * n)
            assert (zero_rows < n).all()
            # No partially zeroed row (inputs have no zero entry).
            zero = out[row] == 0
            np.testing.assert_array_equal(zero.any(axis=-1), zero.all(axis=-1))
            kept = np.setdiff1d(np.arange(out.shape[1]), zero_rows)
            np.testing.assert_array_equal(out[row, kept], embeddings[row, kept])


def test_count_matches_python_int_for_float_edge_cases():
    # 0.29 * 100 = 28.999999999999996 in float64 -> 28 (float32 would give 29).
    embeddings = np.ones((1, 100, 2), dtype="float32")
    mask = np.ones((1, 100), dtype="int32")
    out = np.asarray(TokenCutoff(rate=0.29, seed=0)(embeddings, mask, training=True))
    assert int((out[0] == 0).all(axis=-1).sum()) == int(0.29 * 100) == 28


def test_cut_positions_are_random(batch):
    embeddings, mask, _ = batch
    layer = TokenCutoff(rate=0.5, seed=3)
    first = np.asarray(layer(embeddings, padding_mask=mask, training=True))
    second = np.asarray(layer(embeddings, padding_mask=mask, training=True))
    assert not np.array_equal(first, second)


def test_chooses_among_masked_tokens_for_left_padding():
    embeddings = np.ones((8, 6, 3), dtype="float32")
    mask = np.array([[0, 0, 1, 1, 1, 1]] * 8, dtype="int32")
    out = np.asarray(TokenCutoff(rate=0.5, seed=0)(embeddings, mask, training=True))
    zero_rows = (out == 0).all(axis=-1)
    assert not zero_rows[:, :2].any()
    np.testing.assert_array_equal(zero_rows.sum(axis=1), 2)


def test_no_mask_means_all_real():
    embeddings = np.ones((4, 10, 3), dtype="float32")
    out = np.asarray(TokenCutoff(rate=0.2, seed=0)(embeddings, training=True))
    np.testing.assert_array_equal((out == 0).all(axis=-1).sum(axis=1), 2)
