"""The parallel-pairs paper's protocol pieces: a trained teacher, the kept NLI head, STS tracking."""

import logging

import numpy as np
import pytest

import keras_sentemb
from keras_sentemb.evaluation.sts_alignment_uniformity_tracker import STSAlignmentUniformityTracker
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.models.projection_head import with_projection_head
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import make_pairs
from tests.numeric import assert_close_vectors

SELF_TEACHER = "the frozen teacher is the student's own starting model"
TRIPLETS = [("a man is playing", "a man plays", "a woman is eating"),
            ("the cat sits", "a cat is sitting", "the dog runs"),
            ("a girl is singing", "a girl sings", "a boy is sleeping"),
            ("the sun is hot", "it is hot", "the moon is cold")] * 4
STS_PAIRS = [("a man is playing", "a man plays", 4.6), ("the cat sits", "a cat is sitting", 4.2),
             ("a girl is singing", "a boy is sleeping", 0.5), ("the sun is hot", "it is hot", 4.0),
             ("the dog runs", "a woman is eating", 0.2), ("a cat", "the moon is cold", 0.0)]


def _fit(caplog, **kwargs):
    with caplog.at_level(logging.WARNING, logger="keras_sentemb.methods.parallel"):
        kwargs.setdefault("steps", 1)
        return keras_sentemb.fit_parallel(
            make_pairs(24), batch_size=4, queue_size=0, max_length=12, eval_size=0,
            dev=None, track_alignment=False, verbose=0, extend_vocabulary=0, **kwargs)


def test_a_self_teacher_is_warned_about_and_a_trained_teacher_is_not(caplog):
    model = make_tiny_encoder(num_layers=1)
    _fit(caplog, model=model)
    assert SELF_TEACHER in caplog.text
    caplog.clear()
    _fit(caplog, model=model, teacher=model)
    assert SELF_TEACHER in caplog.text
    caplog.clear()
    _fit(caplog, model=model, teacher=make_tiny_encoder(num_layers=1))
    assert SELF_TEACHER not in caplog.text
    caplog.clear()
    _fit(caplog, model=model, mode="dual")  # both sides train: no frozen self-teacher
    assert SELF_TEACHER not in caplog.text


def test_paper_temperature_starts_at_one(caplog):
    student = _fit(caplog, model=make_tiny_encoder(num_layers=1),
                   teacher=make_tiny_encoder(num_layers=1), init_temperature=1.0, learning_rate=1e-9)
    assert student.training_report.hyperparameters["init_temperature"] == 1.0
    assert abs(student.training_report.extras["final_temperature"] - 1.0) < 1e-3


def test_projection_head_is_the_encoders_own_and_starts_as_simcse_does():
    encoder = make_tiny_encoder(num_layers=1, pooling="cls")
    head = with_projection_head(encoder, seed=1)
    assert encoder.projection is None and head.backbone is encoder.backbone
    assert head.projection_dim == encoder.output_dim and head.projection_activation == "tanh"
    kernel, bias = head.projection.get_weights()
    assert not bias.any() and 0.01 < kernel.std() < 0.03
    pooled = encoder.encode(["a man"], normalize=False, precision="float32")
    expected = np.tanh(pooled @ kernel)
    assert_close_vectors(head.encode(["a man"], normalize=False, precision="float32"), expected,
                         rtol=1e-4)
    with pytest.raises(ValueError, match="already has a projection head"):
        with_projection_head(head)


def test_fit_simcse_keep_trains_and_saves_the_mlp(tmp_path):
    out = tmp_path / "nli"
    encoder = keras_sentemb.fit_simcse(
        TRIPLETS, mode="sup", model=make_tiny_encoder(num_layers=1, pooling="cls"), mlp="keep",
        steps=2, batch_size=4, max_length=12, dev=None, verbose=0, output=str(out))
    assert encoder.projection is not None
    assert encoder.training_report.resolved["mlp"] == "keep"
    assert (out / "sentemb_projection.npz").exists()
    loaded = SentenceEncoder.from_preset(str(out))
    assert loaded.projection is not None
    assert_close_vectors(loaded.encode(["a man"]), encoder.encode(["a man"]), rtol=1e-5)
    with pytest.raises(ValueError, match="mlp"):
        keras_sentemb.fit_simcse(TRIPLETS, mode="sup", model=make_tiny_encoder(num_layers=1),
                                 mlp="kept", steps=1, verbose=0)


def test_sts_tracker_follows_a_parallel_student(caplog):
    tracker = STSAlignmentUniformityTracker(STS_PAIRS, every=1)
    _fit(caplog, model=make_tiny_encoder(num_layers=1), teacher=make_tiny_encoder(num_layers=1),
         steps=2, callbacks=[tracker])
    assert [p["step"] for p in tracker.history] == [0, 1, 2]
    assert all(np.isfinite(p["alignment"]) and np.isfinite(p["uniformity"]) for p in tracker.history)


def test_a_teacher_of_another_size_gives_the_student_a_kept_head(caplog, tmp_path):
    teacher = make_tiny_encoder(num_layers=1, hidden_dim=16)
    out = tmp_path / "student"
    with caplog.at_level(logging.WARNING, logger="keras_sentemb.methods.parallel"):
        student = keras_sentemb.fit_parallel(
            make_pairs(40), model=make_tiny_encoder(num_layers=1), teacher=teacher, steps=2,
            batch_size=4, queue_size=8, max_length=12, eval_size=8, dev_size=8, eval_every=1,
            track_every=1, verbose=0, extend_vocabulary=0, output=str(out))
    assert student.output_dim == 16 and student.projection_activation == "tanh"
    report = student.training_report
    assert report.extras["kept_head"] == 16 and report.resolved["mlp"] == "none"
    assert report.extras["retrieval_after"]["n"] == 8
    assert len(report.extras["alignment_uniformity"]) == 3
    loaded = SentenceEncoder.from_preset(str(out))
    assert_close_vectors(loaded.encode(["a man"]), student.encode(["a man"]), rtol=1e-5)
