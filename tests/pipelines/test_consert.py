"""`fit_consert`: unsupervised and two-stage recipes, dev selection, saving, CLI."""

import json

import pytest

import keras_sentemb
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.pipelines.callbacks import sts_spearman
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import SENTENCES, SHORT_DEV as DEV, TRIPLETS
from tests.numeric import assert_close_vectors


def test_fit_consert_unsup_selects_on_dev_and_saves(tmp_path):
    out = tmp_path / "consert"
    encoder = make_tiny_encoder()
    kept = keras_sentemb.fit_consert(
        SENTENCES * 3, model=encoder, output=str(out), steps=4, batch_size=8,
        learning_rate=1e-3, max_length=16, dev=DEV, eval_every=2, verbose=0,
    )
    report = kept.training_report
    assert report.pooling == "mean" and "declares no pooling" in report.pooling_reason
    assert report.steps == report.steps_trained == 4
    history = report.selection["history"]
    assert [s for s, _ in history] == [0, 2, 4]
    best = max(scores["encoder"] for _, scores in history)
    assert sts_spearman(kept, DEV) == pytest.approx(best, abs=1e-3)
    assert report.data == {"sentences": 24}
    assert report.hyperparameters["views"] == "shuffle,feature_cutoff"
    assert "stages" not in report.extras  # one stage
    assert kept.declared_pooling == "mean"
    loaded = SentenceEncoder.from_preset(str(out))
    assert loaded.declared_pooling == "mean"
    assert_close_vectors(loaded.encode(["hello world"]), kept.encode(["hello world"]), rtol=1e-5)
    assert json.loads((out / "training_report.json").read_text())["steps_trained"] == 4


def test_declared_pooling_is_the_models():
    kept = keras_sentemb.fit_consert(
        SENTENCES, model=make_tiny_encoder(pooling="cls"), steps=1, batch_size=8,
        dev=None, verbose=0,
    )
    report = kept.training_report
    assert report.pooling == "cls" and report.pooling_reason == "the model declares cls pooling"
    assert report.steps_trained == 1 and kept.declared_pooling == "cls"


def test_two_stage_mode_runs_both_stages_for_their_steps():
    encoder = make_tiny_encoder()
    kept = keras_sentemb.fit_consert(
        SENTENCES * 2, model=encoder, mode="joint_unsup", supervised=TRIPLETS * 2,
        steps=2, supervised_steps=3, batch_size=4, learning_rate=1e-3,
        max_length=16, dev=None, verbose=0,
    )
    report = kept.training_report
    stages = report.extras["stages"]
    assert [(s["stage"], s["steps"], s["steps_trained"]) for s in stages] == [
        ("joint", 3, 3), ("unsup", 2, 2)]
    assert report.steps == report.steps_trained == 5
    # 8 triplets -> 8 entailment + 8 contradiction pairs; 16 unlabeled sentences.
    assert report.data == {"supervised_pairs": 16, "sentences": 16}


def test_supervised_only_mode_trains_on_data():
    kept = keras_sentemb.fit_consert(
        TRIPLETS * 2, model=make_tiny_encoder(), mode="sup", batch_size=4,
        learning_rate=1e-3, max_length=16, dev=None, verbose=0,
    )
    report = kept.training_report
    # steps=None: the paper's 10 epochs of the 16 NLI pairs at batch 4.
    assert report.resolved["steps"] == report.steps_trained == 40
    assert report.data == {"supervised_pairs": 16}
    assert report.pooling == "mean"


def test_fit_consert_errors():
    enc = make_tiny_encoder()
    with pytest.raises(ValueError, match="mode"):
        keras_sentemb.fit_consert(SENTENCES, model=enc, mode="semi")
    with pytest.raises(ValueError, match="supervised"):
        keras_sentemb.fit_consert(SENTENCES, model=enc, mode="joint_unsup", dev=None)
    with pytest.raises(ValueError, match="batch_size"):
        keras_sentemb.fit_consert(SENTENCES, model=enc, batch_size=0)
    with pytest.raises(ValueError, match="views"):
        keras_sentemb.fit_consert(SENTENCES, model=enc, views="shuffle", dev=None)
    with pytest.raises(ValueError, match="supervised_steps"):
        keras_sentemb.fit_consert(SENTENCES, model=enc, mode="sup_unsup", supervised=TRIPLETS,
                                  supervised_steps=0, dev=None)


def test_cli_train_consert(tmp_path):
    from keras_sentemb import cli

    model_dir = tmp_path / "tiny"
    make_tiny_encoder().save(str(model_dir))
    train = tmp_path / "train.txt"
    train.write_text("\n".join(SENTENCES * 2) + "\n")
    out = tmp_path / "out"
    rc = cli.main([
        "train", "consert", "--model", str(model_dir), "--train-file", str(train),
        "--output", str(out), "--steps", "2", "--batch-size", "4", "--max-length", "16",
        "--dev", "none", "--views", "token_cutoff,dropout", "--view-rates", "0.1,0.2",
        "--learning-rate", "1e-4", "--verbose", "0",
    ])
    assert rc == 0
    report = json.loads((out / "training_report.json").read_text())
    assert report["hyperparameters"]["views"] == "token_cutoff,dropout"
    assert report["hyperparameters"]["view_rates"] == "0.1,0.2"
    assert report["steps_trained"] == 2 and report["pooling"] == "mean"
    assert SentenceEncoder.from_preset(str(out)).declared_pooling == "mean"
