"""`paraphrase_loss`: InfoNCE over paraphrase pairs + push-down of the others."""

import numpy as np
import pytest

from keras_sentemb.losses import paraphrase_loss

U = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, -1.0]], "float32")
V = np.array([[1.0, 0.2], [0.5, 1.0], [1.0, -1.0], [1.0, 1.0]], "float32")


def _unit(x):
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def reference(u, v, labels, temperature, negative_weight=1.0, negative_margin=0.0):
    """float64 numpy: mean InfoNCE over label-1 rows (all v as candidates), hinge on label-0."""
    un, vn = _unit(u), _unit(v)
    logits = un @ vn.T / temperature
    ce = [np.log(np.exp(logits[i]).sum()) - logits[i, i] for i in range(len(u)) if labels[i] == 1]
    push = [max(0.0, un[i] @ vn[i] - negative_margin) for i in range(len(u)) if labels[i] == 0]
    positive = float(np.mean(ce)) if ce else 0.0
    negative = float(np.mean(push)) if push else 0.0
    return positive + negative_weight * negative, positive, negative


def test_closed_form_on_three_pairs():
    u, v, labels = U[:3], V[:3], np.array([1, 1, 0])
    loss, parts = paraphrase_loss(u, v, labels, temperature=0.5, negative_margin=-0.5)
    un, vn = _unit(u), _unit(v)
    logits = un @ vn.T / 0.5
    ce = [np.log(np.exp(logits[i]).sum()) - logits[i, i] for i in (0, 1)]
    neg = max(0.0, float(un[2] @ vn[2]) + 0.5)  # cos = 0 -> 0.5
    np.testing.assert_allclose(parts["positive_loss"], np.mean(ce), rtol=1e-5)
    np.testing.assert_allclose(parts["negative_loss"], neg, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(loss, np.mean(ce) + neg, rtol=1e-5)


@pytest.mark.parametrize(
    "labels,temperature,weight,margin",
    [([1, 0, 1, 0], 0.05, 1.0, 0.0), ([0, 1, 0, 0], 0.2, 0.3, 0.1), ([1, 1, 1, 1], 0.1, 2.0, 0.0)],
)
def test_matches_numpy(labels, temperature, weight, margin):
    labels = np.array(labels)
    loss, parts = paraphrase_loss(U, V, labels, temperature, weight, margin)
    want, positive, negative = reference(U, V, labels, temperature, weight, margin)
    np.testing.assert_allclose(float(parts["positive_loss"]), positive, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(parts["negative_loss"]), negative, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(float(loss), want, rtol=1e-5, atol=1e-6)


def test_a_term_without_pairs_is_zero_not_nan():
    _, parts = paraphrase_loss(U, V, [1, 1, 1, 1])
    assert float(parts["negative_loss"]) == 0.0
    loss, parts = paraphrase_loss(U, V, [0, 0, 0, 0])
    assert float(parts["positive_loss"]) == 0.0
    # Only the push-down: mean relu(cos) over the four pairs.
    cos = (_unit(U) * _unit(V)).sum(1)
    np.testing.assert_allclose(float(loss), np.maximum(cos, 0).mean(), rtol=1e-5)


def test_not_paraphrase_partners_are_in_batch_negatives():
    # Rows 1-3 are labelled 0, but their v still compete as candidates of anchor 0.
    labels = np.array([1, 0, 0, 0])
    _, parts = paraphrase_loss(U, V, labels, temperature=0.5)
    _, positive, _ = reference(U, V, labels, 0.5)
    np.testing.assert_allclose(float(parts["positive_loss"]), positive, rtol=1e-5)
    # Were only the paraphrase rows candidates, anchor 0 would have one candidate: loss 0.
    assert positive > 0.1
