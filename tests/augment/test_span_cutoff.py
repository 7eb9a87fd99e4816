import numpy as np
import pytest

from keras_sentemb.augment import SpanCutoff


def _single_run(flags):
    """Start and length of the single run of True in `flags` (or None)."""
    idx = np.flatnonzero(flags)
    if len(idx) == 0:
        return None
    assert (np.diff(idx) == 1).all(), f"not contiguous: {idx}"
    return idx[0], len(idx)


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5])
def test_cut_mode_zeroes_one_span(batch, rate):
    embeddings, mask, lengths = batch
    layer = SpanCutoff(rate=rate, mode="cut", seed=2)
    for _ in range(3):
        out, new_mask = layer(embeddings, padding_mask=mask, training=True)
        out = np.asarray(out)
        np.testing.assert_array_equal(np.asarray(new_mask), mask)
        for row, n in enumerate(lengths):
            zero_rows = (out[row] == 0).all(axis=-1)
            run = _single_run(zero_rows)
            expected = int(n * rate)
            if expected == 0:
                assert run is None
            else:
                start, length = run
                assert length == expected
                assert start + length <= n
            np.testing.assert_array_equal(
                out[row][~zero_rows], embeddings[row][~zero_rows]
            )


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5, 0.9])
def test_keep_mode_keeps_one_span_and_masks_the_rest(batch, rate):
    embeddings, mask, lengths = batch
    layer = SpanCutoff(rate=rate, mode="keep", seed=4)
    for _ in range(3):
        out, new_mask = layer(embeddings, padding_mask=mask, training=True)
        out, new_mask = np.asarray(out), np.asarray(new_mask)
        assert new_mask.dtype == mask.dtype
        for row, n in enumerate(lengths):
            start, length = _single_run(new_mask[row] == 1)
            assert length == max(int(n * (1 - rate)), 1)
            assert start + length <= n
            kept = new_mask[row] == 1
            # Kept span and padding rows unchanged, cut real rows zeroed.
            np.testing.assert_array_equal(out[row][kept], embeddings[row][kept])
            np.testing.assert_array_equal(out[row][n:], embeddings[row][n:])
            cut = (mask[row] == 1) & ~kept
            assert (out[row][cut] == 0).all()


def test_keep_mode_start_is_uniform_over_all_valid_starts():
    # n = 5, keep int(5 * 0.6) = 3 tokens: starts 0, 1, 2 are all reachable.
    embeddings = np.ones((300, 5, 2), dtype="float32")
    mask = np.ones((300, 5), dtype="int32")
    _, new_mask = SpanCutoff(rate=0.4, mode="keep", seed=0)(
        embeddings, padding_mask=mask, training=True
    )
    starts = np.argmax(np.asarray(new_mask), axis=1)
    counts = np.bincount(starts, minlength=3)
    assert counts.sum() == 300 and len(counts) == 3
    assert (counts > 60).all()


def test_bool_mask_and_no_mask(batch):
    embeddings, mask, _ = batch
    layer = SpanCutoff(rate=0.5, mode="keep", seed=1)
    _, bool_mask = layer(embeddings, padding_mask=mask.astype(bool), training=True)
    assert np.asarray(bool_mask).dtype == bool
    out, no_mask = layer(embeddings, training=True)
    no_mask = np.asarray(no_mask)
    assert no_mask.dtype == bool
    np.testing.assert_array_equal(no_mask.sum(axis=1), int(embeddings.shape[1] * 0.5))


def test_inference_returns_inputs(batch):
    embeddings, mask, _ = batch
    out, new_mask = SpanCutoff(seed=0)(embeddings, padding_mask=mask)
    np.testing.assert_array_equal(np.asarray(out), embeddings)
    np.testing.assert_array_equal(np.asarray(new_mask), mask)


def test_invalid_mode():
    with pytest.raises(ValueError, match="'drop'"):
        SpanCutoff(mode="drop")
