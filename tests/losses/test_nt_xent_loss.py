import numpy as np
import pytest
import tensorflow as tf

from tests.losses import loss_numpy_reference as ref
from keras_sentemb.losses import nt_xent_loss

VIEW_A = np.array(
    [[1.0, 0.0, 0.5], [0.0, 1.0, -0.5], [0.3, 0.3, 1.0], [-1.0, 0.2, 0.0]], np.float32
)
VIEW_B = np.array(
    [[0.9, 0.2, 0.4], [0.1, 0.8, -0.2], [0.2, 0.5, 0.9], [-0.7, -0.1, 0.3]], np.float32
)


@pytest.mark.parametrize("temperature", [0.1, 0.5, 2.0])
def test_matches_closed_form(temperature):
    got = nt_xent_loss(VIEW_A, VIEW_B, temperature=temperature)
    assert got.dtype == tf.float32 and got.shape == ()
    np.testing.assert_allclose(
        got.numpy(), ref.nt_xent(VIEW_A, VIEW_B, temperature), rtol=1e-5, atol=1e-6
    )


def test_per_example_order_and_random_inputs():
    rng = np.random.default_rng(3)
    a = rng.normal(size=[6, 5]).astype(np.float32)
    b = rng.normal(size=[6, 5]).astype(np.float32)
    got = nt_xent_loss(a, b, temperature=0.3, reduction="none")
    assert got.shape == (12,)
    np.testing.assert_allclose(
        got.numpy(), ref.nt_xent_per_example(a, b, 0.3), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        nt_xent_loss(a, b, temperature=0.3, reduction="sum").numpy(),
        ref.nt_xent_per_example(a, b, 0.3).sum(),
        rtol=1e-5,
    )


def test_self_similarity_is_masked():
    # Identical views: without the mask every row would have two maximal
    # logits (itself and its counterpart); with it the counterpart wins alone.
    a = np.eye(3, dtype=np.float32)
    got = nt_xent_loss(a, a, temperature=0.05).numpy()
    np.testing.assert_allclose(got, ref.nt_xent(a, a, 0.05), rtol=1e-5, atol=1e-6)
    assert got < 1e-6


def test_batch_of_one():
    # Two views: each one's only other embedding is its counterpart.
    np.testing.assert_allclose(nt_xent_loss(VIEW_A[:1], VIEW_B[:1]).numpy(), 0.0, atol=1e-7)


def test_gradients_finite():
    a = tf.Variable(VIEW_A)
    with tf.GradientTape() as tape:
        loss = nt_xent_loss(a, VIEW_B, temperature=0.05)
    assert np.all(np.isfinite(tape.gradient(loss, a).numpy()))


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("inf")])
def test_temperature_validation(temperature):
    with pytest.raises(ValueError, match="temperature"):
        nt_xent_loss(VIEW_A, VIEW_B, temperature=temperature)


def test_shape_mismatch_error():
    with pytest.raises(ValueError, match=r"view_b.*same shape.*\(4, 3\).*\(3, 3\)"):
        nt_xent_loss(VIEW_A, VIEW_B[:3])
