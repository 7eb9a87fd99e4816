"""`fit_sts_regression` (CT section 5.2): buckets and M, label mapping, the fit, the CLI."""

import json

import numpy as np
import pytest

import keras_sentemb
from keras_sentemb.evaluation.sts_spread import pair_cosines
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.pipelines.callbacks import sts_spearman
from keras_sentemb.methods.sts_regression import lowest_bucket_mean
from keras_sentemb.methods.sts_regression import map_scores
from keras_sentemb.methods.sts_regression import model_specific_lower_bound
from keras_sentemb.methods.sts_regression import resolve_train_pairs
from keras_sentemb.methods.sts_regression.trainer import STSRegression
from tests.conftest import make_tiny_encoder
from tests.helpers.batches import pair_batch
from tests.helpers.corpora import STS_PAIRS as PAIRS
from tests.numeric import assert_close_vectors


def test_lowest_bucket_mean_on_hand_made_cosines():
    # 20 right-closed buckets of width 0.25 over [0, 5] (CT section 5.2): [0, 0.25], (0.25, 0.5].
    scores = [0.0, 0.2, 0.24, 0.25, 1.0, 5.0]
    cosines = [0.3, 0.5, 0.7, -1.0, 0.0, 1.0]
    m, bucket, count = lowest_bucket_mean(cosines, scores)
    assert (bucket, count) == (0, 4)
    np.testing.assert_allclose(m, np.mean([0.3, 0.5, 0.7, -1.0]))
    # Left-closed edges put 0.25 in the next bucket.
    m, bucket, count = lowest_bucket_mean(cosines, scores, closed="left")
    assert (bucket, count) == (0, 3)
    np.testing.assert_allclose(m, 0.5)
    # Lowest bucket empty -> the lowest non-empty one ((0.75, 1] here).
    m, bucket, count = lowest_bucket_mean(cosines[4:], scores[4:])
    assert (bucket, count) == (3, 1) and m == 0.0
    # Five right-closed buckets: [0, 1] holds 0.0..1.0.
    m, bucket, count = lowest_bucket_mean(cosines, scores, num_buckets=5)
    np.testing.assert_allclose(m, np.mean([0.3, 0.5, 0.7, -1.0, 0.0]))
    with pytest.raises(ValueError, match="same length"):
        lowest_bucket_mean([0.1], [0.0, 1.0])


def test_map_scores_closed_form():
    scores = np.array([0.0, 1.25, 2.5, 5.0])
    m = 0.6
    np.testing.assert_allclose(map_scores(scores, m), [0.6, 0.7, 0.8, 1.0], rtol=1e-6)
    np.testing.assert_allclose(map_scores(scores), [0.0, 0.25, 0.5, 1.0], rtol=1e-6)
    np.testing.assert_allclose(map_scores([1.0, 3.0, 5.0], -0.2, (1, 5)), [-0.2, 0.4, 1.0], rtol=1e-6)
    assert map_scores(scores, m).dtype == np.float32
    with pytest.raises(ValueError, match="< 1"):
        map_scores(scores, 1.0)
    with pytest.raises(ValueError, match="score_range"):
        map_scores(scores, 0.0, (5, 0))


def test_model_specific_lower_bound_uses_the_starting_model():
    encoder = make_tiny_encoder()
    info = model_specific_lower_bound(encoder, PAIRS, num_buckets=20)
    chosen = [p for p in PAIRS if p[2] < 0.25]
    assert min(p[2] for p in PAIRS) == 0.0 and info["bucket"] == 0
    assert info["count"] == len(chosen) and info["num_buckets"] == 20
    np.testing.assert_allclose(info["lower_bound"], pair_cosines(encoder, chosen).mean(), atol=1e-6)
    cls = model_specific_lower_bound(encoder, PAIRS, pooling="cls")["lower_bound"]
    np.testing.assert_allclose(cls, pair_cosines(encoder, chosen, pooling="cls").mean(), atol=1e-6)


def test_resolve_train_pairs():
    assert resolve_train_pairs([("a", "b", 3)]) == [("a", "b", 3.0)]
    with pytest.raises(ValueError, match="needs `data`"):
        resolve_train_pairs(None)


def test_fit_regresses_onto_model_specific_labels_and_saves(tmp_path):
    encoder = make_tiny_encoder()
    m = model_specific_lower_bound(encoder, PAIRS, pooling="mean")["lower_bound"]
    out = tmp_path / "enc"
    kept = keras_sentemb.fit_sts_regression(
        PAIRS, model=encoder, steps=6, batch_size=4, learning_rate=1e-3, eval_every=3,
        dev=PAIRS, output=str(out), verbose=0,
    )
    report = kept.training_report
    assert report.extras["label_lower_bound"] == pytest.approx(m, abs=1e-6)
    assert report.steps_trained == 6 and report.data == {"pairs": len(PAIRS)}
    assert [s for s, _ in report.selection["history"]] == [0, 3, 6]
    assert report.pooling == "mean" and "declares no pooling" in report.pooling_reason
    best = max(scores["encoder"] for _, scores in report.selection["history"])
    assert sts_spearman(kept, PAIRS) == pytest.approx(best, abs=1e-3)
    saved = json.loads((out / "training_report.json").read_text())
    assert saved["extras"]["label_lower_bound"] == pytest.approx(m, abs=1e-6)
    loaded = SentenceEncoder.from_preset(str(out))
    assert loaded.declared_pooling == "mean"
    assert_close_vectors(loaded.encode(["hello world"]), kept.encode(["hello world"]), rtol=1e-5)


def test_unit_labels_lower_the_mse_on_zero_one_targets():
    encoder = make_tiny_encoder(pooling="mean")
    probe = STSRegression(encoder)
    batch = pair_batch(encoder, PAIRS, lower=0.0)
    before = float(probe.compute_loss_terms(batch, training=False).loss)
    kept = keras_sentemb.fit_sts_regression(
        PAIRS, model=encoder, labels="unit", steps=6, batch_size=4, learning_rate=1e-3,
        dev=None, verbose=0,
    )
    report = kept.training_report
    assert report.extras["label_lower_bound"] == 0.0
    assert report.pooling_reason == "the model declares mean pooling"
    assert report.steps_trained == 6
    after = float(probe.compute_loss_terms(batch, training=False).loss)
    assert after < 0.8 * before, (before, after)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="labels"):
        keras_sentemb.fit_sts_regression(PAIRS, model=make_tiny_encoder(), labels="zero_one")
    with pytest.raises(ValueError, match="sentence1, sentence2, score"):
        keras_sentemb.fit_sts_regression([("a", "b")], model=make_tiny_encoder())
    with pytest.raises(ValueError, match="score_range"):
        keras_sentemb.fit_sts_regression([("a", "b", 7.0)] * 8, model=make_tiny_encoder(), dev=None)
    with pytest.raises(ValueError, match="num_buckets"):
        keras_sentemb.fit_sts_regression(PAIRS, model=make_tiny_encoder(), num_buckets=0)
