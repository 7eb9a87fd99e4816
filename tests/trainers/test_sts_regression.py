"""STS regression (CT section 5.2): buckets and M, label mapping, MSE loss, fit."""

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.evaluation.sts_spread import pair_cosines
from keras_sentemb.trainers.sts_regression import STSRegression
from keras_sentemb.trainers.sts_regression import cosine_mse_loss
from keras_sentemb.trainers.sts_regression import fit_sts_regression
from keras_sentemb.trainers.sts_regression import lowest_bucket_mean
from keras_sentemb.trainers.sts_regression import map_scores
from keras_sentemb.trainers.sts_regression import model_specific_lower_bound
from tests.conftest import make_tiny_encoder
from tests.evaluation.test_sts_spread import PAIRS


def test_lowest_bucket_mean_on_hand_made_cosines():
    # 20 buckets of width 0.25 over [0, 5].
    scores = [0.0, 0.2, 0.24, 0.25, 1.0, 5.0]
    cosines = [0.3, 0.5, 0.7, -1.0, 0.0, 1.0]
    m, bucket, count = lowest_bucket_mean(cosines, scores)
    assert (bucket, count) == (0, 3)
    np.testing.assert_allclose(m, 0.5)
    # Lowest bucket empty -> the lowest non-empty one ([0.25, 0.5) here).
    m, bucket, count = lowest_bucket_mean(cosines[3:], scores[3:])
    assert (bucket, count) == (1, 1) and m == -1.0
    # Five buckets: [0, 1) holds 0.0..0.25.
    m, bucket, count = lowest_bucket_mean(cosines, scores, num_buckets=5)
    np.testing.assert_allclose(m, np.mean([0.3, 0.5, 0.7, -1.0]))
    with pytest.raises(ValueError, match="same length"):
        lowest_bucket_mean([0.1], [0.0, 1.0])


def test_map_scores_closed_form():
    scores = np.array([0.0, 1.25, 2.5, 5.0])
    m = 0.6
    np.testing.assert_allclose(map_scores(scores, m), m + (1 - m) * scores / 5, rtol=1e-6)
    np.testing.assert_allclose(map_scores(scores, m)[[0, -1]], [m, 1.0], rtol=1e-6)
    np.testing.assert_allclose(map_scores(scores), scores / 5, rtol=1e-6)
    np.testing.assert_allclose(map_scores([1.0, 5.0], -0.2, (1, 5)), [-0.2, 1.0], rtol=1e-6)
    with pytest.raises(ValueError, match="< 1"):
        map_scores(scores, 1.0)


def test_model_specific_lower_bound_uses_starting_model():
    encoder = make_tiny_encoder()
    info = model_specific_lower_bound(encoder, PAIRS, num_buckets=20)
    lowest = min(p[2] for p in PAIRS)
    chosen = [p for p in PAIRS if p[2] < 0.25]
    assert lowest == 0.0 and info["bucket"] == 0 and info["count"] == len(chosen)
    np.testing.assert_allclose(info["lower_bound"], pair_cosines(encoder, chosen).mean(), atol=1e-6)


def test_cosine_mse_loss_closed_form():
    u = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]], "float32")
    v = np.array([[1.0, 1.0], [-1.0, -1.0], [3.0, 0.0]], "float32")
    t = np.array([0.5, 0.8, 0.3], "float32")
    cos = np.array([1 / np.sqrt(2), -1.0, 0.0])
    np.testing.assert_allclose(cosine_mse_loss(u, v, t), np.mean((cos - t) ** 2), rtol=1e-5)


def test_trainer_loss_is_mse_of_encoder_cosines():
    encoder = make_tiny_encoder()
    trainer = STSRegression(encoder)
    s1 = [p[0] for p in PAIRS[:6]]
    s2 = [p[1] for p in PAIRS[:6]]
    targets = map_scores([p[2] for p in PAIRS[:6]], 0.4)
    batch = {
        "sentence1": encoder.preprocess(tf.constant(s1), 16),
        "sentence2": encoder.preprocess(tf.constant(s2), 16),
        "label": tf.constant(targets),
    }
    a = encoder(batch["sentence1"], training=False).numpy()
    b = encoder(batch["sentence2"], training=False).numpy()
    cos = np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    got = trainer.compute_contrastive_loss(batch, training=False)
    np.testing.assert_allclose(got, np.mean((cos - targets) ** 2), rtol=1e-4)
    assert trainer.get_config() == {"pooling": "mean"}


def test_fit_sts_regression_trains_and_saves(tmp_path):
    encoder = make_tiny_encoder()
    before = [np.array(w) for w in encoder.get_weights()]
    out = fit_sts_regression(
        PAIRS, model=encoder, steps=2, batch_size=4, learning_rate=1e-3,
        dev=None, output=str(tmp_path / "enc"), verbose=0,
    )
    assert (tmp_path / "enc").exists()
    assert any(not np.allclose(w, b) for w, b in zip(out.get_weights(), before))


def test_invalid_arguments():
    with pytest.raises(ValueError, match="labels"):
        fit_sts_regression(PAIRS, model=make_tiny_encoder(), labels="zero_one")
    with pytest.raises(ValueError, match="sentence1, sentence2, score"):
        fit_sts_regression([("a", "b")], model=make_tiny_encoder())
    with pytest.raises(ValueError, match="score_range"):
        fit_sts_regression([("a", "b", 7.0)] * 8, model=make_tiny_encoder(), dev=None)
