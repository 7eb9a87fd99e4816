"""STS spread analysis: bucketing, statistics equal numpy, PNG written."""

import json

import numpy as np
import pytest

from keras_sentemb.evaluation.sts import cosine_scores
from keras_sentemb.evaluation.sts_spread import bucket_edges
from keras_sentemb.evaluation.sts_spread import load_stsb_pairs
from keras_sentemb.evaluation.sts_spread import pair_cosines
from keras_sentemb.evaluation.sts_spread import plot_sts_spread
from keras_sentemb.evaluation.sts_spread import score_buckets
from keras_sentemb.evaluation.sts_spread import spread_statistics
from keras_sentemb.evaluation.sts_spread import sts_spread
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import STS_PAIRS as PAIRS, STS_SENTENCES as SENTENCES


def test_score_buckets_edges():
    scores = [0.0, 0.99, 1.0, 2.5, 3.999, 4.0, 5.0]
    np.testing.assert_array_equal(score_buckets(scores), [0, 0, 1, 2, 3, 4, 4])
    assert bucket_edges(5) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    np.testing.assert_array_equal(score_buckets([0.0, 0.25, 4.8, 5.0], 20), [0, 1, 19, 19])
    with pytest.raises(ValueError, match="score_range"):
        score_buckets([5.5])
    with pytest.raises(ValueError, match="num_buckets"):
        score_buckets([1.0], num_buckets=0)


def test_spread_statistics_equal_numpy():
    rng = np.random.default_rng(0)
    scores = rng.uniform(0, 5, 200)
    scores[:3] = [0.0, 5.0, 1.0]
    cosines = rng.uniform(-1, 1, 200)
    stats = spread_statistics(cosines, scores, num_buckets=5)
    json.dumps(stats)  # plain data
    assert stats["num_pairs"] == 200 and stats["num_buckets"] == 5
    edges = np.linspace(0, 5, 6)
    for i, b in enumerate(stats["buckets"]):
        lo, hi = edges[i], edges[i + 1]
        sel = (scores >= lo) & ((scores < hi) if i < 4 else (scores <= hi))
        assert b["count"] == sel.sum()
        np.testing.assert_allclose(b["mean"], cosines[sel].mean(), rtol=1e-12)
        np.testing.assert_allclose(b["std"], cosines[sel].std(), rtol=1e-12)
        assert b["label"] == f"{lo:g}-{hi:g}"
    assert sum(b["count"] for b in stats["buckets"]) == 200
    np.testing.assert_allclose(stats["overall"]["std"], cosines.std())


def test_empty_bucket_is_none_and_length_mismatch():
    stats = spread_statistics([0.1, 0.3, 0.9], [0.5, 0.7, 4.5])
    assert [b["count"] for b in stats["buckets"]] == [2, 0, 0, 0, 1]
    assert stats["buckets"][1]["mean"] is None and stats["buckets"][1]["std"] is None
    np.testing.assert_allclose(stats["buckets"][0]["std"], 0.1)
    with pytest.raises(ValueError, match="same length"):
        spread_statistics([0.1, 0.2], [1.0])


def test_sts_spread_on_tiny_encoder_writes_png(tmp_path):
    encoder = make_tiny_encoder()
    path = tmp_path / "spread.png"
    result = sts_spread(encoder, data=PAIRS, path=path)
    json.dumps(result)
    assert path.exists() and path.stat().st_size > 1000
    assert path.read_bytes()[:4] == b"\x89PNG"
    vectors = encoder.encode(SENTENCES, precision="float32")
    index = {s: i for i, s in enumerate(SENTENCES)}
    cos = cosine_scores(vectors[[index[p[0]] for p in PAIRS]], vectors[[index[p[1]] for p in PAIRS]])
    np.testing.assert_allclose(pair_cosines(encoder, PAIRS), cos, atol=1e-6)
    expected = spread_statistics(cos, [p[2] for p in PAIRS])
    for got, want in zip(result["buckets"], expected["buckets"]):
        assert got["count"] == want["count"]
        if want["count"]:
            np.testing.assert_allclose(got["mean"], want["mean"], atol=1e-6)
    # Several models on one plot.
    both = tmp_path / "both.png"
    plot_sts_spread({"before": result, "after": expected}, both)
    assert both.exists()


def test_load_stsb_pairs():
    pairs = load_stsb_pairs("stsb", "test")
    assert len(pairs) == 1379 and pairs[0][2] == 2.5
    with pytest.raises(ValueError, match="sentence1, sentence2, score"):
        load_stsb_pairs([("a", "b")])
    with pytest.raises(ValueError, match="`data`"):
        load_stsb_pairs(3)


def test_right_closed_buckets_of_the_ct_paper():
    from keras_sentemb.evaluation.sts_spread import score_buckets, spread_statistics

    # 20 buckets of width 0.25: [0, 0.25], (0.25, 0.5], ..., (4.75, 5] (CT section 5.2).
    scores = [0.0, 0.25, 0.2500001, 0.5, 0.75, 2.5, 4.75, 4.76, 5.0]
    np.testing.assert_array_equal(
        score_buckets(scores, 20, closed="right"), [0, 0, 1, 1, 2, 9, 18, 19, 19])
    np.testing.assert_array_equal(
        score_buckets(scores, 20, closed="left"), [0, 1, 1, 2, 3, 10, 19, 19, 19])
    stats = spread_statistics([0.1] * len(scores), scores, 20, closed="right")
    assert stats["closed"] == "right" and stats["buckets"][0]["count"] == 2
    assert [b["count"] for b in stats["buckets"]].count(0) == 20 - 6
    with pytest.raises(ValueError, match="closed"):
        score_buckets(scores, 20, closed="both")
