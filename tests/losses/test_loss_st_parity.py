"""Parity with sentence-transformers' own loss classes (PyTorch).

`tests/fixtures/loss_reference.npz` is written by
`tests/fixtures/make_reference.py` from ST's `MultipleNegativesRankingLoss`,
`ContrastiveTensionLoss` and `ContrastiveTensionLossInBatchNegatives` (see its
docstring for the keys). A missing fixture is a failure, not a skip.
"""

import math
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.losses import contrastive_tension_in_batch_loss
from keras_sentemb.losses import contrastive_tension_loss
from keras_sentemb.losses import info_nce_loss

FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "loss_reference.npz"
RTOL = 1e-5


@pytest.fixture(scope="module")
def ref():
    assert FIXTURE.exists(), (
        f"missing {FIXTURE}: regenerate it with tests/fixtures/make_reference.py"
    )
    with np.load(FIXTURE, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def _loss_and_grads(fn, arrays):
    variables = [tf.Variable(a) for a in arrays]
    with tf.GradientTape() as tape:
        loss = fn(*variables)
    return loss.numpy(), [g.numpy() for g in tape.gradient(loss, variables)]


def _assert_grad_close(got, want):
    # Gradients in float32 on both sides; tolerance relative to their scale.
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.max(np.abs(want)))


def test_mnrl_pairs(ref):
    temperature = 1.0 / float(ref["mnrl_scale"])  # scale 20 -> 0.05
    assert temperature == 0.05
    loss, (ga, gp) = _loss_and_grads(
        lambda a, p: info_nce_loss(a, p, temperature=0.05, similarity="cosine"),
        [ref["anchors"], ref["positives"]],
    )
    np.testing.assert_allclose(loss, float(ref["mnrl_pair_loss"]), rtol=RTOL)
    np.testing.assert_allclose(loss, float(ref["mnrl_pair_loss_f64"]), rtol=RTOL)
    _assert_grad_close(ga, ref["mnrl_pair_grad_anchors"])
    _assert_grad_close(gp, ref["mnrl_pair_grad_positives"])


def test_mnrl_hard_negatives(ref):
    loss, (ga, gp, gn) = _loss_and_grads(
        lambda a, p, n: info_nce_loss(a, p, n, temperature=0.05, similarity="cosine"),
        [ref["anchors"], ref["positives"], ref["negatives"]],
    )
    np.testing.assert_allclose(loss, float(ref["mnrl_triplet_loss"]), rtol=RTOL)
    np.testing.assert_allclose(loss, float(ref["mnrl_triplet_loss_f64"]), rtol=RTOL)
    _assert_grad_close(ga, ref["mnrl_triplet_grad_anchors"])
    _assert_grad_close(gp, ref["mnrl_triplet_grad_positives"])
    _assert_grad_close(gn, ref["mnrl_triplet_grad_negatives"])


def test_contrastive_tension(ref):
    # ST sums over the batch: BCEWithLogitsLoss(reduction="sum").
    labels = ref["ct_labels"]
    loss, (g1, g2) = _loss_and_grads(
        lambda r1, r2: contrastive_tension_loss(r1, r2, labels, reduction="sum"),
        [ref["ct_reps_1"], ref["ct_reps_2"]],
    )
    np.testing.assert_allclose(loss, float(ref["ct_loss"]), rtol=RTOL)
    np.testing.assert_allclose(loss, float(ref["ct_loss_f64"]), rtol=RTOL)
    _assert_grad_close(g1, ref["ct_grad_reps_1"])
    _assert_grad_close(g2, ref["ct_grad_reps_2"])
    mean = contrastive_tension_loss(ref["ct_reps_1"], ref["ct_reps_2"], labels)
    np.testing.assert_allclose(mean.numpy() * len(labels), float(ref["ct_loss"]), rtol=RTOL)


def test_contrastive_tension_in_batch(ref):
    np.testing.assert_allclose(float(ref["ct_inbatch_scale"]), 20.0, rtol=1e-6)
    logit_scale = tf.Variable(math.log(20.0), dtype=tf.float32)
    r1, r2 = tf.Variable(ref["ct_reps_1"]), tf.Variable(ref["ct_reps_2"])
    with tf.GradientTape() as tape:
        loss = contrastive_tension_in_batch_loss(r1, r2, logit_scale=logit_scale)
    g1, g2, gs = tape.gradient(loss, [r1, r2, logit_scale])
    np.testing.assert_allclose(loss.numpy(), float(ref["ct_inbatch_loss"]), rtol=RTOL)
    np.testing.assert_allclose(loss.numpy(), float(ref["ct_inbatch_loss_f64"]), rtol=RTOL)
    _assert_grad_close(g1.numpy(), ref["ct_inbatch_grad_reps_1"])
    _assert_grad_close(g2.numpy(), ref["ct_inbatch_grad_reps_2"])
    np.testing.assert_allclose(
        gs.numpy(), float(ref["ct_inbatch_grad_logit_scale"]), rtol=1e-4
    )
