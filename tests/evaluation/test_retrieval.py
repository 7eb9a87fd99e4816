"""Blocked bitext retrieval equals the dense n x n argmax; top-k; both directions."""

import numpy as np
import pytest

from keras_sentemb.evaluation.retrieval import bitext_retrieval_accuracy
from keras_sentemb.evaluation.retrieval import evaluate_bitext_retrieval


def dense_reference(src, tgt, k=1):
    """The full similarity matrix, argmax / argsort per row and column."""
    src = src / np.linalg.norm(src, axis=1, keepdims=True)
    tgt = tgt / np.linalg.norm(tgt, axis=1, keepdims=True)
    sims = src @ tgt.T
    rows = np.arange(len(src))
    if k == 1:
        s2t = np.argmax(sims, axis=1) == rows
        t2s = np.argmax(sims, axis=0) == rows
    else:  # stable sort: ties ranked by index, like argmax
        s2t = (np.argsort(-sims, axis=1, kind="stable")[:, :k] == rows[:, None]).any(axis=1)
        t2s = (np.argsort(-sims.T, axis=1, kind="stable")[:, :k] == rows[:, None]).any(axis=1)
    return 100 * s2t.mean(), 100 * t2s.mean()


@pytest.mark.parametrize("block_size", [1, 7, 64, 1000])
@pytest.mark.parametrize("k", [1, 5])
def test_blocked_equals_dense(block_size, k):
    rng = np.random.default_rng(0)
    src = rng.normal(size=(203, 16))
    tgt = src + rng.normal(scale=1.2, size=src.shape)  # noisy translations: some wrong
    out = bitext_retrieval_accuracy(src, tgt, k=k, block_size=block_size)
    s2t, t2s = dense_reference(src, tgt, k)
    assert 0 < s2t < 100 and 0 < t2s < 100
    assert out["source_to_target"] == pytest.approx(s2t)
    assert out["target_to_source"] == pytest.approx(t2s)
    assert out["mean"] == pytest.approx((s2t + t2s) / 2) and out["n"] == 203
    assert out.get("k", 1) == k


def test_ties_count_like_argmax():
    # Every target identical: argmax picks row 0, so only pair 0 is right.
    src = np.eye(4)
    tgt = np.ones((4, 4))
    for block_size in (1, 3, 4):
        out = bitext_retrieval_accuracy(src, tgt, block_size=block_size)
        assert out["target_to_source"] == pytest.approx(25.0)
        assert out["source_to_target"] == pytest.approx(25.0)
    assert bitext_retrieval_accuracy(src, tgt, k=2)["target_to_source"] == pytest.approx(50.0)


def test_validation():
    with pytest.raises(ValueError, match="k"):
        bitext_retrieval_accuracy(np.eye(2), np.eye(2), k=0)
    with pytest.raises(ValueError, match="block_size"):
        bitext_retrieval_accuracy(np.eye(2), np.eye(2), block_size=0)
    with pytest.raises(ValueError, match="at least one"):
        bitext_retrieval_accuracy(np.zeros((0, 2)), np.zeros((0, 2)))


def test_evaluate_with_two_encoders():
    class Lookup:
        """An encoder that embeds a sentence by a fixed table."""

        def __init__(self, table):
            self.table = table

        def encode(self, sentences, **kwargs):
            return np.array([self.table[s] for s in sentences], dtype=np.float32)

    source = Lookup({"a": [1, 0], "b": [0, 1], "c": [1, 1]})
    target = Lookup({"x": [1, 0.1], "y": [0.1, 1], "z": [-1, 0]})
    out = evaluate_bitext_retrieval(source, target, [("a", "x"), ("b", "y"), ("c", "z")])
    s2t, t2s = dense_reference(
        np.array([[1, 0], [0, 1], [1, 1]], float), np.array([[1, 0.1], [0.1, 1], [-1, 0]], float)
    )
    assert (out["source_to_target"], out["target_to_source"]) == pytest.approx((s2t, t2s))
    assert out["source_to_target"] == pytest.approx(200 / 3)
