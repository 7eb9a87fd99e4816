import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.augment import FeatureCutoff


@pytest.mark.parametrize("rate", [0.1, 0.2, 0.5])
def test_zeroes_exact_columns_per_example(batch, rate):
    embeddings, mask, _ = batch
    hidden = embeddings.shape[-1]
    layer = FeatureCutoff(rate=rate, seed=5)
    out = np.asarray(layer(embeddings, padding_mask=mask, training=True))
    columns = []
    for row in range(out.shape[0]):
        zero = out[row] == 0
        zero_columns = np.flatnonzero(zero.all(axis=0))
        assert len(zero_columns) == int(rate * hidden)
        # Same columns at every position, nothing else zeroed.
        np.testing.assert_array_equal(zero.any(axis=0), zero.all(axis=0))
        kept = np.setdiff1d(np.arange(hidden), zero_columns)
        np.testing.assert_array_equal(out[row][:, kept], embeddings[row][:, kept])
        columns.append(tuple(zero_columns))
    # Columns are drawn per example.
    assert len(set(columns)) > 1


def test_zero_columns_for_small_hidden_is_identity():
    embeddings = np.ones((2, 3, 4), dtype="float32")
    out = np.asarray(FeatureCutoff(rate=0.2, seed=0)(embeddings, training=True))
    np.testing.assert_array_equal(out, embeddings)  # int(0.2 * 4) == 0


def test_dynamic_hidden_size(batch):
    embeddings, _, _ = batch
    layer = FeatureCutoff(rate=0.25, seed=1)

    @tf.function(input_signature=[tf.TensorSpec([None, None, None], tf.float32)])
    def cut(x):
        return layer(x, training=True)

    out = cut(tf.constant(embeddings)).numpy()
    counts = (out == 0).all(axis=1).sum(axis=-1)
    np.testing.assert_array_equal(counts, int(0.25 * embeddings.shape[-1]))
