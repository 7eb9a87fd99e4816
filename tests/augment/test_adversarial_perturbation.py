import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.augment import AdversarialPerturbation
from keras_sentemb.augment import adversarial_perturbation


def _data(dtype="float32"):
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(3, 5, 8)).astype(dtype)
    gradients = (rng.normal(size=(3, 5, 8)) * 1e-3).astype(dtype)
    return embeddings, gradients


@pytest.mark.parametrize("noise_norm", [0.005, 1.0])
def test_per_token_norm_and_direction(noise_norm):
    embeddings, gradients = _data()
    out = np.asarray(
        AdversarialPerturbation(noise_norm=noise_norm)(
            embeddings, gradients, training=True
        )
    )
    noise = out - embeddings
    np.testing.assert_allclose(
        np.linalg.norm(noise, axis=-1), noise_norm, rtol=1e-3
    )
    norms = np.linalg.norm(gradients, axis=-1, keepdims=True)
    expected = noise_norm * gradients / norms
    np.testing.assert_allclose(noise, expected, atol=1e-6)


def test_functional_matches_closed_form():
    embeddings = np.zeros((1, 2, 2), dtype="float32")
    gradients = np.array([[[3.0, 4.0], [0.0, 0.0]]], dtype="float32")
    out = np.asarray(adversarial_perturbation(embeddings, gradients, noise_norm=0.5))
    # A zero gradient gives zero noise (epsilon avoids 0/0).
    np.testing.assert_allclose(out, [[[0.3, 0.4], [0.0, 0.0]]], atol=1e-7)


def test_padding_rows_not_perturbed():
    embeddings, gradients = _data()
    mask = np.array([[1, 1, 1, 0, 0]] * 3)
    out = np.asarray(
        adversarial_perturbation(embeddings, gradients, padding_mask=mask)
    )
    np.testing.assert_array_equal(out[:, 3:], embeddings[:, 3:])
    np.testing.assert_allclose(
        np.linalg.norm(out[:, :3] - embeddings[:, :3], axis=-1), 1.0, rtol=1e-4
    )


def test_gradient_is_stopped_through_noise_only():
    embeddings, gradients = _data()
    x = tf.Variable(embeddings)
    g = tf.Variable(gradients)
    with tf.GradientTape(persistent=True) as tape:
        out = adversarial_perturbation(x, g, noise_norm=1.0)
        total = tf.reduce_sum(out)
    np.testing.assert_allclose(tape.gradient(total, x).numpy(), 1.0)
    assert tape.gradient(total, g) is None


def test_float16_norm_without_overflow():
    embeddings, gradients = _data("float16")
    # Large enough that the squares overflow float16.
    gradients = (gradients.astype("float32") * 5e4).astype("float16")
    out = AdversarialPerturbation(noise_norm=0.5)(embeddings, gradients, training=True)
    assert out.dtype == tf.float16
    noise = np.asarray(out, dtype="float32") - embeddings.astype("float32")
    np.testing.assert_allclose(np.linalg.norm(noise, axis=-1), 0.5, rtol=2e-2)


def test_inside_tape_end_to_end():
    # The trainer pattern: first pass, gradient w.r.t. embeddings, second pass.
    embeddings, _ = _data()
    weights = tf.constant(np.random.default_rng(1).normal(size=(8,)), tf.float32)
    x = tf.constant(embeddings)
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(tf.tensordot(x, weights, 1))
    gradients = tape.gradient(loss, x)
    out = AdversarialPerturbation(noise_norm=0.1)(x, gradients, training=True)
    increase = tf.reduce_sum(tf.tensordot(out, weights, 1)) - loss
    assert increase.numpy() > 0


def test_invalid_arguments():
    with pytest.raises(ValueError, match="-1"):
        AdversarialPerturbation(noise_norm=-1.0)
    with pytest.raises(ValueError, match="epsilon"):
        AdversarialPerturbation(epsilon=0)
    embeddings, _ = _data()
    with pytest.raises(ValueError, match="gradients=None"):
        adversarial_perturbation(embeddings, None)
    with pytest.raises(ValueError, match="shape"):
        adversarial_perturbation(embeddings, embeddings[:, :2])
