"""MatryoshkaLoss: the weighted sum of a loss over nested prefixes, in closed form."""

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.losses import info_nce_loss
from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.losses.matryoshka import MatryoshkaLoss
from keras_sentemb.losses.matryoshka import check_matryoshka
from keras_sentemb.losses.matryoshka import truncate_nest


def numpy_info_nce(a, b, temperature):
    """Mean over rows of -log softmax(cos(a_i, b_j) / t)_ii, in float64."""
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    logits = a @ b.T / temperature
    logits -= logits.max(axis=1, keepdims=True)
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return -np.mean(np.diag(log_softmax))


def test_info_nce_over_prefixes_equals_the_closed_form():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(6, 12))
    b = a + 0.5 * rng.normal(size=(6, 12))
    dims, weights = (12, 6, 2), (1.0, 0.5, 0.25)
    loss = MatryoshkaLoss(lambda z: info_nce_loss(z["a"], z["b"], temperature=0.1), dims,
                          weights, full_dim=12)
    got = float(loss({"a": tf.constant(a, tf.float32), "b": tf.constant(b, tf.float32)}))
    expected = sum(w * numpy_info_nce(a[:, :d], b[:, :d], 0.1) for d, w in zip(dims, weights))
    assert got == pytest.approx(expected, rel=1e-5)
    # The prefixes matter: the full-vector loss alone is different.
    assert got != pytest.approx(numpy_info_nce(a, b, 0.1) * 1.75, rel=1e-3)


def test_gradients_reach_only_through_the_prefixes_with_their_weights():
    x = tf.Variable(tf.ones((1, 4)))
    loss = MatryoshkaLoss(lambda z: tf.reduce_sum(z ** 2), (4, 1), (1.0, 3.0), full_dim=4)
    with tf.GradientTape() as tape:
        value = loss(x)
    # d/dx of sum(x^2) + 3 * x_0^2 at 1: [2 + 6, 2, 2, 2].
    np.testing.assert_allclose(tape.gradient(value, x).numpy(), [[8.0, 2.0, 2.0, 2.0]])
    assert float(value) == pytest.approx(4.0 + 3.0)


def test_loss_outputs_keep_the_largest_prefix_metrics_and_aux():
    def base(z, data):
        return LossOutput(tf.reduce_sum(z["v"]), {"width": tf.shape(z["v"])[-1]}, z["v"])

    loss = MatryoshkaLoss(base, (2, 8), full_dim=8)
    out = loss({"v": tf.ones((3, 8))}, None)
    assert isinstance(out, LossOutput)
    assert float(out.loss) == 3 * 2 + 3 * 8
    assert int(out.metrics["width"]) == 8 and out.aux.shape == (3, 8)


def test_only_full_width_float_tensors_are_cut():
    nest = {"v": tf.ones((2, 8)), "labels": tf.ones((2, 8), tf.int32), "other": tf.ones((2, 5)),
            "scalar": tf.constant(1.0)}
    out = truncate_nest(nest, 3, 8)
    assert out["v"].shape == (2, 3) and out["labels"].shape == (2, 8)
    assert out["other"].shape == (2, 5) and out["scalar"].shape == ()


@pytest.mark.parametrize(
    "dims, weights, message",
    [
        ((), None, "is empty"),
        ((8, 40), None, r"ints in \[1, 32\]"),
        ((8, 0), None, r"ints in \[1, 32\]"),
        ((8, 8), None, "repeated"),
        ((8, 4), (1.0,), "one weight per dimension"),
        ((8, 4), (1.0, -1.0), "non-negative"),
        ((8, 4), (0.0, 0.0), "all zero"),
        (None, None, "sequence of ints"),
        ("16,x", None, "comma-separated numbers"),
    ],
)
def test_bad_dims_and_weights(dims, weights, message):
    with pytest.raises(ValueError, match=message):
        check_matryoshka(dims, weights, 32)


def test_dims_from_the_command_line():
    assert check_matryoshka("32,16,8", "1,0.5,0.5", 32) == ((32, 16, 8), (1.0, 0.5, 0.5))
    assert check_matryoshka(16, 2, 32) == ((16,), (2.0,))
