"""Classification losses on sentence vectors: SBERT's pair features, softmax, sigmoid."""

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.losses import binary_classification_loss
from keras_sentemb.losses import pair_features
from keras_sentemb.losses import softmax_classification_loss

RNG = np.random.default_rng(0)


def test_pair_features_is_u_v_absdiff():
    u = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]], "float32")
    v = np.array([[2.0, -2.0, -0.5], [1.0, 1.0, 1.0]], "float32")
    got = pair_features(u, v).numpy()
    assert got.shape == (2, 9) and got.dtype == np.float32
    np.testing.assert_array_equal(got[0], [1, -2, 0.5, 2, -2, -0.5, 1, 0, 1])
    np.testing.assert_array_equal(got[1], [0, 3, -1, 1, 1, 1, 1, 2, 2])
    # Swapping the sentences swaps the first two blocks, keeps |u - v|.
    swapped = pair_features(v, u).numpy()
    np.testing.assert_array_equal(swapped[:, :3], got[:, 3:6])
    np.testing.assert_array_equal(swapped[:, 6:], got[:, 6:])


def test_pair_features_errors():
    with pytest.raises(ValueError, match="same shape"):
        pair_features(np.zeros((2, 3), "float32"), np.zeros((2, 4), "float32"))
    with pytest.raises(ValueError, match="2D"):
        pair_features(np.zeros(3, "float32"), np.zeros(3, "float32"))


def _log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def test_softmax_classification_loss_closed_form():
    loss, acc = softmax_classification_loss([[0.0, 0.0], [2.0, 0.0]], [0, 1])
    np.testing.assert_allclose(float(loss), (np.log(2) + np.log1p(np.exp(2))) / 2, rtol=1e-6)
    assert float(acc) == 0.5  # a tie goes to the first class (a hit), then a miss


def test_softmax_classification_loss_matches_numpy():
    logits = RNG.normal(size=(7, 3)).astype("float32") * 3
    labels = RNG.integers(0, 3, size=7)
    loss, acc = softmax_classification_loss(logits, labels)
    want = -_log_softmax(logits)[np.arange(7), labels].mean()
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)
    np.testing.assert_allclose(float(acc), np.mean(logits.argmax(1) == labels), rtol=1e-6)
    # [B, 1] labels and bfloat16 logits: same loss, float32 out.
    loss16, _ = softmax_classification_loss(tf.cast(logits, tf.bfloat16), labels[:, None])
    assert loss16.dtype == tf.float32
    np.testing.assert_allclose(float(loss16), want, rtol=2e-2)


def test_softmax_classification_loss_is_stable_for_large_logits():
    loss, acc = softmax_classification_loss([[1000.0, 0.0, -1000.0]], [1])
    np.testing.assert_allclose(float(loss), 1000.0, rtol=1e-6)
    assert float(acc) == 0.0


def _softplus(x):
    return np.logaddexp(0.0, x)


def test_binary_classification_loss_matches_numpy():
    logits = np.array([0.0, 3.0, -2.0, 0.5, 40.0], "float32")
    labels = np.array([1.0, 1.0, 0.0, 0.25, 0.0], "float32")  # a soft label too
    # -(y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))) = softplus(x) - y x
    want = np.mean(_softplus(logits.astype(np.float64)) - labels * logits)
    np.testing.assert_allclose(float(binary_classification_loss(logits, labels)), want, rtol=1e-6)
    np.testing.assert_allclose(
        float(binary_classification_loss([0.0, 3.0], [1.0, 1.0])),
        (np.log(2) + np.log1p(np.exp(-3))) / 2, rtol=1e-6,
    )
    # [B, 1] logits (a Dense(1) head) are flattened; int labels are cast.
    np.testing.assert_allclose(
        float(binary_classification_loss(logits[:, None], (labels > 0.5).astype(int))),
        np.mean(_softplus(logits.astype(np.float64)) - (labels > 0.5) * logits), rtol=1e-6,
    )
