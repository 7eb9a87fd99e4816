"""`fit_parallel`: held-out splits, retrieval dev selection, report, saving, CLI."""

import inspect
import json
import os

import numpy as np
import pytest

import keras_sentemb
from keras_sentemb.data.parallel import split_pairs
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.pipelines.scaffold import NOT_HYPERPARAMETERS
from keras_sentemb.methods.parallel.trainer import ParallelContrastive
from tests.conftest import TINY_VOCAB
from tests.conftest import make_tiny_encoder
from tests.helpers.batches import translation_batch
from tests.helpers.corpora import make_pairs
from tests.numeric import assert_close_vectors


def test_fit_parallel_end_to_end(tmp_path):
    teacher = make_tiny_encoder(num_layers=1)
    teacher.trainable = False  # a frozen encoder still initialises a trainable student
    n_weights = len(teacher.weights)
    teacher_weights = [w.copy() for w in teacher.get_weights()]
    out = tmp_path / "student"
    student = keras_sentemb.fit_parallel(
        make_pairs(80), model=teacher, output=str(out), steps=4, eval_every=2, batch_size=8,
        queue_size=32, max_length=16, eval_size=10, dev_size=10, track_every=2, verbose=0,
    )
    assert student is not teacher
    for a, b in zip(teacher_weights, teacher.get_weights()):
        np.testing.assert_array_equal(a, b)  # the caller's encoder is untouched
    report = student.training_report
    assert report.pooling == "cls" and "declares no pooling" in report.pooling_reason
    assert report.resolved["mlp"] == "train"
    assert report.steps == report.steps_trained == 4
    assert report.data == {"train_pairs": 60, "test_pairs": 10, "dev_pairs": 10}
    params = set(inspect.signature(keras_sentemb.fit_parallel).parameters)
    assert set(report.hyperparameters) == params - set(NOT_HYPERPARAMETERS)
    selection = report.selection
    assert selection["monitor"] == "dev_retrieval"
    assert [s for s, _ in selection["history"]] == [0, 2, 4]
    extras = report.extras
    assert extras["mode"] == "frozen_teacher"
    assert set(extras["retrieval_before"]) >= {"source_to_target", "target_to_source", "mean"}
    assert extras["retrieval_before"]["n"] == extras["retrieval_after"]["n"] == 10
    assert [h["step"] for h in extras["alignment_uniformity"]] == [0, 2, 4]
    assert 0 < extras["final_temperature"] < 1
    assert os.path.exists(out / "alignment_uniformity.png")
    saved = json.loads((out / "training_report.json").read_text())
    assert saved["data"]["test_pairs"] == 10 and saved["steps_trained"] == 4
    assert saved["extras"]["plot"] == str(out / "alignment_uniformity.png")
    # The student is saved without its training-only MLP head.
    assert student.projection is None and not (out / "sentemb_projection.npz").exists()
    loaded = SentenceEncoder.from_preset(str(out))
    assert loaded.declared_pooling == "cls" and len(loaded.weights) == n_weights
    assert_close_vectors(loaded.encode(["a man"]), student.encode(["a man"]), rtol=1e-5)


def test_the_student_learns_the_teachers_space():
    teacher = make_tiny_encoder(num_layers=1)
    pairs = make_pairs(48)
    student = keras_sentemb.fit_parallel(
        pairs, model=teacher, steps=6, batch_size=8, learning_rate=3e-3, pooling="mean",
        temperature=0.05, queue_size=0, eval_size=0, dev=None, track_alignment=False, verbose=0,
        extend_vocabulary=0,
    )
    report = student.training_report
    assert report.resolved["mlp"] == "none" and report.steps_trained == 6
    assert report.selection is None and "retrieval_before" not in report.extras

    def loss(encoder):
        probe = ParallelContrastive(encoder, teacher, queue_size=0, temperature=0.05,
                                    pooling="mean", mlp="none")
        return float(probe.compute_loss_terms(translation_batch(probe, pairs[:16]), training=False).loss)

    before, after = loss(teacher.clone()), loss(student)  # the student started as a copy
    assert after < 0.9 * before, (before, after)


def test_declared_mean_pooling_trains_without_an_mlp_and_dual_mode_reports_both_teachers():
    model = make_tiny_encoder(num_layers=1, pooling="mean")
    student = keras_sentemb.fit_parallel(
        make_pairs(40), model=model, mode="dual", steps=2, batch_size=8, queue_size=8,
        eval_size=8, dev="none", track_alignment=False, verbose=0, extend_vocabulary=0,
    )
    report = student.training_report
    assert report.pooling == "mean" and report.pooling_reason == "the model declares mean pooling"
    assert report.resolved["mlp"] == "none" and student.declared_pooling == "mean"
    assert report.selection is None and report.data["dev_pairs"] == 0
    assert report.extras["retrieval_after_initial_teacher"]["n"] == 8


def test_fit_parallel_validation():
    pairs = make_pairs(20)
    with pytest.raises(ValueError, match="mode"):
        keras_sentemb.fit_parallel(pairs, model=make_tiny_encoder(), mode="x")
    with pytest.raises(ValueError, match="temperature"):
        keras_sentemb.fit_parallel(pairs, model=make_tiny_encoder(), temperature="warm")
    with pytest.raises(ValueError, match="steps"):
        keras_sentemb.fit_parallel(pairs, model=make_tiny_encoder(), steps=0)
    with pytest.raises(ValueError, match="eval_size"):
        keras_sentemb.fit_parallel(pairs, model=make_tiny_encoder(), eval_size=-1)
    with pytest.raises(ValueError, match="leaves no training pair"):
        keras_sentemb.fit_parallel(pairs, model=make_tiny_encoder(), eval_size=20)
    with pytest.raises(ValueError, match="mlp"):
        keras_sentemb.fit_parallel(pairs, model=make_tiny_encoder(), mlp="always", eval_size=2,
                                   dev_size=2)


def test_cli_train_parallel(tmp_path):
    from keras_sentemb.cli import main

    make_tiny_encoder(num_layers=1).save(tmp_path / "tiny")
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{a}\t{b}\tattribution\n" for a, b in make_pairs(40)), encoding="utf-8")
    out = tmp_path / "out"
    rc = main(["train", "parallel", "--model", str(tmp_path / "tiny"), "--train-file", str(tsv),
               "--output", str(out), "--steps", "2", "--batch-size", "8", "--queue-size", "8",
               "--temperature", "0.05", "--mlp", "none", "--eval-size", "8", "--dev", "none",
               "--no-track-alignment", "--verbose", "0", "--extend-vocabulary", "20",
               "--vocabulary-init", "normal", "--vocabulary-min-count", "1"])
    assert rc == 0
    report = json.loads((out / "training_report.json").read_text())
    assert report["hyperparameters"]["temperature"] == 0.05  # parsed as a number
    assert report["resolved"]["mlp"] == "none" and report["pooling"] == "cls"
    assert report["data"] == {"train_pairs": 32, "test_pairs": 8, "dev_pairs": 0}
    assert report["extras"]["final_temperature"] == pytest.approx(0.05)
    assert not (out / "alignment_uniformity.png").exists()
    # The target side's digits are unknown to the tiny vocabulary: added.
    assert report["hyperparameters"]["extend_vocabulary"] == 20
    assert report["extras"]["vocabulary"]["init"] == "normal"
    assert 0 < report["extras"]["vocabulary"]["added"] <= 20
    saved = (out / "assets" / "tokenizer" / "vocabulary.txt").read_text(encoding="utf-8")
    assert len(saved.splitlines()) == len(TINY_VOCAB) + report["extras"]["vocabulary"]["added"]


ZH = {"man": "男", "woman": "女", "dog": "狗", "cat": "猫", "plays": "玩", "runs": "跑",
      "park": "园", "guitar": "琴", "piano": "钢", "mat": "垫"}


def zh_pairs(n, seed=0):
    """(English, Chinese) pairs whose characters the tiny vocabulary lacks."""
    rng = np.random.default_rng(seed)
    words = sorted(ZH)
    out = []
    for _ in range(n):
        picked = list(rng.choice(words, size=rng.integers(2, 5), replace=False))
        out.append(("the " + " ".join(picked), "".join(ZH[w] for w in picked) + "中"))
    return out


def test_extend_vocabulary_grows_the_student_only(tmp_path):
    from keras_sentemb.models.vocabulary import new_vocabulary_units

    teacher = make_tiny_encoder(num_layers=1, pooling="mean")
    pairs = zh_pairs(60)
    out = tmp_path / "student"
    student = keras_sentemb.fit_parallel(
        pairs, model=teacher, steps=3, batch_size=8, learning_rate=1e-2, queue_size=16,
        eval_size=8, dev=None, track_alignment=False, verbose=0, output=str(out),
        extend_vocabulary=100, vocabulary_init="aligned",
    )
    vocabulary = student.training_report.extras["vocabulary"]
    train = split_pairs(pairs, eval_size=8)[0]
    train_targets = [b for _, b in train]
    expected = [t for t, _ in new_vocabulary_units(teacher, train_targets)]
    assert sorted(expected) == sorted(ZH.values())
    assert vocabulary["added"] == len(expected) and vocabulary["init"] == "aligned"
    assert vocabulary["unk_share_train_targets_before"] > 0.5
    assert vocabulary["unk_share_train_targets_after"] == 0.0
    n_old = len(teacher.tokenizer.get_vocabulary())
    assert teacher.tokenizer.vocabulary_size() == n_old  # the teacher keeps its vocabulary
    assert student.tokenizer.get_vocabulary() == teacher.tokenizer.get_vocabulary() + expected
    # The new rows were trained (the targets were tokenized by the student).
    start = keras_sentemb.extend_vocabulary(
        teacher, train_targets, init="aligned", translations=[a for a, _ in train])
    assert start.tokenizer.get_vocabulary() == student.tokenizer.get_vocabulary()
    trained = student.adapter.token_embedding.embeddings.numpy()[n_old:]
    initial = start.adapter.token_embedding.embeddings.numpy()[n_old:]
    assert np.abs(trained - initial).max() > 1e-3
    loaded = SentenceEncoder.from_preset(str(out))
    assert loaded.tokenizer.get_vocabulary() == student.tokenizer.get_vocabulary()
    assert_close_vectors(loaded.encode(["男女狗"]), student.encode(["男女狗"]), rtol=1e-5)


def test_without_extension_an_unknown_script_is_reported(caplog):
    caplog.set_level("WARNING")
    student = keras_sentemb.fit_parallel(
        zh_pairs(30), model=make_tiny_encoder(num_layers=1), steps=1, batch_size=8,
        queue_size=0, eval_size=0, dev=None, track_alignment=False, verbose=0,
        extend_vocabulary=0,
    )
    assert student.training_report.extras["vocabulary"]["unk_share_train_targets_before"] > 0.5
    assert "added" not in student.training_report.extras["vocabulary"]
    assert "extend_vocabulary > 0" in caplog.text
    with pytest.raises(ValueError, match="vocabulary_init"):
        keras_sentemb.fit_parallel(zh_pairs(30), model=make_tiny_encoder(), vocabulary_init="x")
    with pytest.raises(ValueError, match="extend_vocabulary"):
        keras_sentemb.fit_parallel(zh_pairs(30), model=make_tiny_encoder(), extend_vocabulary=-1)
