"""`cosine_mse_loss`: squared error between cos(u_i, v_i) and the targets."""

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.losses import cosine_mse_loss

U = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]], "float32")
V = np.array([[1.0, 1.0], [-1.0, -1.0], [3.0, 0.0]], "float32")
T = np.array([0.5, 0.8, 0.3], "float32")
COS = np.array([1 / np.sqrt(2), -1.0, 0.0])


def test_closed_form():
    np.testing.assert_allclose(cosine_mse_loss(U, V, T), np.mean((COS - T) ** 2), rtol=1e-5)


def test_reductions_and_scale_invariance():
    per = cosine_mse_loss(U, V, T, reduction="none").numpy()
    np.testing.assert_allclose(per, (COS - T) ** 2, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(cosine_mse_loss(U, V, T, reduction="sum"), per.sum(), rtol=1e-6)
    # Cosine: rescaling a vector changes nothing.
    np.testing.assert_allclose(
        cosine_mse_loss(U * [[3.0], [0.1], [7.0]], V, T), cosine_mse_loss(U, V, T), rtol=1e-5
    )


def test_zero_vector_has_cosine_zero_and_finite_gradient():
    u = tf.Variable([[0.0, 0.0], [1.0, 0.0]])
    with tf.GradientTape() as tape:
        loss = cosine_mse_loss(u, [[1.0, 0.0], [1.0, 0.0]], [0.5, 1.0])
    np.testing.assert_allclose(float(loss), (0.5**2 + 0.0) / 2, rtol=1e-6)
    assert np.all(np.isfinite(tape.gradient(loss, u).numpy()))


def test_gradient_sign_pulls_cosine_towards_the_target():
    # cos(u, v) = 0 below a target of 1: a gradient step on u raises the cosine.
    u = tf.Variable([[1.0, 0.0]])
    v = tf.constant([[0.0, 1.0]])
    with tf.GradientTape() as tape:
        loss = cosine_mse_loss(u, v, [1.0])
    u.assign_sub(0.1 * tape.gradient(loss, u))
    assert float(cosine_mse_loss(u, v, [1.0])) < float(loss)
    assert float(u[0, 1]) > 0.0


def test_errors():
    with pytest.raises(ValueError, match="same shape"):
        cosine_mse_loss(U, V[:2], T)
    with pytest.raises(ValueError, match="reduction"):
        cosine_mse_loss(U, V, T, reduction="avg")
