import math

import numpy as np
import pytest

from keras_sentemb.evaluation.alignment_uniformity import alignment
from keras_sentemb.evaluation.alignment_uniformity import plot_trajectory
from keras_sentemb.evaluation.alignment_uniformity import uniformity
from keras_sentemb.evaluation.retrieval import bitext_retrieval_accuracy


def test_alignment_closed_forms():
    x = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert alignment(x, x) == pytest.approx(0.0)
    y = np.array([[0.0, 1.0], [-1.0, 0.0]])  # orthogonal partners: ||d||^2 = 2
    assert alignment(x, y) == pytest.approx(2.0)
    assert alignment(x, y, alpha=1) == pytest.approx(math.sqrt(2))
    # Rows are normalised first: scaling does not matter.
    assert alignment(3 * x, 0.5 * y) == pytest.approx(2.0)
    # Antipodal: ||d||^2 = 4.
    assert alignment(x, -x) == pytest.approx(4.0)


def test_uniformity_closed_forms():
    assert uniformity([[1.0, 0.0], [-1.0, 0.0]]) == pytest.approx(-8.0)
    assert uniformity([[1.0, 0.0], [-1.0, 0.0]], t=1) == pytest.approx(-4.0)
    # Four points on a square of the unit circle: 8 ordered pairs at d^2 = 2,
    # 4 at d^2 = 4.
    square = [[1, 0], [0, 1], [-1, 0], [0, -1]]
    expected = math.log((8 * math.exp(-4) + 4 * math.exp(-8)) / 12)
    assert uniformity(square) == pytest.approx(expected)
    # Collapsed embeddings: every distance 0 -> log 1 = 0 (the worst value).
    assert uniformity([[1, 1], [2, 2], [3, 3]]) == pytest.approx(0.0, abs=1e-9)


def test_alignment_uniformity_validation():
    with pytest.raises(ValueError, match="same shape"):
        alignment([[1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="at least 2"):
        uniformity([[1.0, 0.0]])
    with pytest.raises(ValueError, match="2-D"):
        alignment([1.0, 0.0], [1.0, 0.0])


def test_plot_trajectory_writes_png(tmp_path):
    history = [
        {"step": 0, "alignment": 0.5, "uniformity": -1.0},
        {"step": 10, "alignment": 0.4, "uniformity": -1.5},
        {"step": 20, "alignment": 0.45, "uniformity": -2.0},
    ]
    path = plot_trajectory(history, str(tmp_path / "traj.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="empty"):
        plot_trajectory([], str(tmp_path / "x.png"))


def test_bitext_retrieval_accuracy_hand_made():
    src = np.eye(3)
    # target 0 -> src 0, target 1 closest to src 2, target 2 -> src 2.
    tgt = np.array([[1.0, 0.1, 0.0], [0.0, 0.2, 1.0], [0.0, 0.1, 1.0]])
    out = bitext_retrieval_accuracy(src, tgt)
    # source->target: s0 -> t0 ok; s1 -> t1 (0.2 > 0.1 > 0) ok; s2: cos(s2, t1)
    # = 1/sqrt(1.04) < cos(s2, t2) = 1/sqrt(1.01) -> t2 ok.
    assert out["source_to_target"] == pytest.approx(100.0)
    # target->source: t0 -> s0 ok, t1 -> s2 wrong, t2 -> s2 ok.
    assert out["target_to_source"] == pytest.approx(200 / 3)
    assert out["n"] == 3
    assert out["mean"] == pytest.approx((100 + 200 / 3) / 2)
    with pytest.raises(ValueError, match="same shape"):
        bitext_retrieval_accuracy(np.eye(3), np.eye(2))
