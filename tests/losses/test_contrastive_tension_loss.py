import math

import numpy as np
import pytest
import tensorflow as tf

from tests.losses import loss_numpy_reference as ref
from keras_sentemb.losses import contrastive_tension_in_batch_loss
from keras_sentemb.losses import contrastive_tension_loss

REPS_1 = np.array(
    [[0.5, 0.1, -0.2], [0.3, -0.4, 0.2], [0.0, 0.6, 0.1], [-0.3, 0.2, 0.4]], np.float32
)
REPS_2 = np.array(
    [[0.4, 0.2, -0.1], [0.1, 0.5, 0.3], [-0.2, 0.1, 0.0], [0.6, -0.1, 0.2]], np.float32
)
LABELS = np.array([1, 0, 0, 0], np.int64)


def test_k_negatives_matches_closed_form():
    got = contrastive_tension_loss(REPS_1, REPS_2, LABELS)
    assert got.dtype == tf.float32 and got.shape == ()
    np.testing.assert_allclose(
        got.numpy(), ref.contrastive_tension(REPS_1, REPS_2, LABELS), rtol=1e-5
    )


def test_k_negatives_uses_raw_dot_products():
    # Scaling the embeddings scales the logits (no normalization/temperature).
    got = contrastive_tension_loss(3 * REPS_1, REPS_2, LABELS, reduction="none")
    np.testing.assert_allclose(
        got.numpy(),
        ref.contrastive_tension_per_example(3 * REPS_1, REPS_2, LABELS),
        rtol=1e-5,
    )


def test_k_negatives_reductions_and_label_shapes():
    per = ref.contrastive_tension_per_example(REPS_1, REPS_2, LABELS)
    np.testing.assert_allclose(
        contrastive_tension_loss(REPS_1, REPS_2, LABELS, reduction="sum").numpy(),
        per.sum(),
        rtol=1e-5,
    )
    np.testing.assert_allclose(
        contrastive_tension_loss(REPS_1, REPS_2, LABELS[:, None].astype(np.float32)).numpy(),
        per.mean(),
        rtol=1e-5,
    )


def test_k_negatives_batch_of_one():
    got = contrastive_tension_loss(REPS_1[:1], REPS_2[:1], LABELS[:1])
    np.testing.assert_allclose(
        got.numpy(), ref.contrastive_tension(REPS_1[:1], REPS_2[:1], LABELS[:1]), rtol=1e-5
    )


def test_k_negatives_errors():
    with pytest.raises(ValueError, match=r"reps_2.*same shape.*\(4, 3\).*\(3, 3\)"):
        contrastive_tension_loss(REPS_1, REPS_2[:3], LABELS)
    with pytest.raises(ValueError, match=r"one entry per pair.*\(3,\).*\(4, 3\)"):
        contrastive_tension_loss(REPS_1, REPS_2, LABELS[:3])
    with pytest.raises(ValueError, match=r"labels.*\(2, 2\)"):
        contrastive_tension_loss(REPS_1, REPS_2, np.ones([2, 2]))


@pytest.mark.parametrize("scale", [20.0, 1.0, 5.0])
def test_in_batch_matches_closed_form(scale):
    got = contrastive_tension_in_batch_loss(REPS_1, REPS_2, logit_scale=math.log(scale))
    assert got.dtype == tf.float32 and got.shape == ()
    np.testing.assert_allclose(
        got.numpy(), ref.contrastive_tension_in_batch(REPS_1, REPS_2, scale), rtol=1e-5
    )


def test_in_batch_default_scale_is_20():
    np.testing.assert_allclose(
        contrastive_tension_in_batch_loss(REPS_1, REPS_2).numpy(),
        ref.contrastive_tension_in_batch(REPS_1, REPS_2, 20.0),
        rtol=1e-5,
    )


def test_in_batch_is_not_symmetric_in_a_trivial_way():
    # Row and column directions differ for a non-symmetric score matrix, so
    # checking both against the closed form covers the transpose.
    rng = np.random.default_rng(0)
    r1 = rng.normal(size=[5, 4]).astype(np.float32)
    r2 = rng.normal(size=[5, 4]).astype(np.float32)
    np.testing.assert_allclose(
        contrastive_tension_in_batch_loss(r1, r2, logit_scale=math.log(3.0)).numpy(),
        ref.contrastive_tension_in_batch(r1, r2, 3.0),
        rtol=1e-5,
    )


def test_in_batch_learnable_logit_scale():
    logit_scale = tf.Variable(math.log(20.0))
    with tf.GradientTape() as tape:
        loss = contrastive_tension_in_batch_loss(REPS_1, REPS_2, logit_scale)
    grad = tape.gradient(loss, logit_scale)
    assert grad is not None and np.isfinite(grad.numpy())
    h = 1e-3
    numeric = (
        ref.contrastive_tension_in_batch(REPS_1, REPS_2, math.exp(math.log(20.0) + h))
        - ref.contrastive_tension_in_batch(REPS_1, REPS_2, math.exp(math.log(20.0) - h))
    ) / (2 * h)
    np.testing.assert_allclose(grad.numpy(), numeric, rtol=1e-3, atol=1e-5)


def test_in_batch_batch_of_one():
    np.testing.assert_allclose(
        contrastive_tension_in_batch_loss(REPS_1[:1], REPS_2[:1]).numpy(), 0.0, atol=1e-7
    )


def test_in_batch_errors():
    with pytest.raises(ValueError, match=r"reps_2.*same shape.*reps_1.*\(4, 3\).*\(4, 2\)"):
        contrastive_tension_in_batch_loss(REPS_1, REPS_2[:, :2])
    with pytest.raises(ValueError, match="logit_scale"):
        contrastive_tension_in_batch_loss(REPS_1, REPS_2, logit_scale=float("inf"))
