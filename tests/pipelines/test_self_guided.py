"""`fit_self_guided`: the kept BERT_T, its pooling, frozen parts, patience, CLI flags."""

import inspect
import json

import numpy as np
import pytest

import keras_sentemb
from keras_sentemb.models import SentenceEncoder
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import GUIDED_SENTENCES as SENTENCES
from tests.numeric import assert_close_vectors

DEV = [
    ("a man is playing guitar", "a man plays guitar", 4.0),
    ("the dog runs", "a cat sits", 1.0),
    ("the woman plays piano", "a woman is playing piano", 4.5),
    ("hello world", "the cat", 0.0),
]


def _embedding_weights(encoder):
    return [np.array(w) for layer in encoder.adapter.embedding_block_layers() for w in layer.weights]


def test_fit_saves_cls_encoder_without_projection_head(tmp_path):
    encoder = make_tiny_encoder()
    n_weights = len(encoder.weights)
    embed_before = _embedding_weights(encoder)
    out = tmp_path / "sg"
    kept = keras_sentemb.fit_self_guided(
        SENTENCES * 2, model=encoder, output=str(out), steps=4, batch_size=4,
        projection_dim=24, dev=DEV, eval_every=2, learning_rate=1e-3, verbose=0,
    )
    assert kept is encoder  # BERT_T is the given encoder, trained in place
    report = kept.training_report
    assert report.steps_trained == 4 and report.stopped is None
    assert [s for s, _ in report.selection["history"]] == [0, 2, 4]
    assert report.pooling == "cls" and "SG trains the [CLS] vector" in report.pooling_reason
    assert report.data == {"sentences": 16, "mode": "unsup"}
    assert kept.declared_pooling == "cls"
    # The embedding block was frozen: bit-identical after training.
    for a, b in zip(embed_before, _embedding_weights(kept)):
        np.testing.assert_array_equal(a, b)
    config = json.loads((out / "sentemb_config.json").read_text())
    assert config["pooling"] == "cls" and config["projection_dim"] is None
    assert not (out / "sentemb_projection.npz").exists()
    saved = json.loads((out / "training_report.json").read_text())
    assert saved["steps_trained"] == 4 and saved["pooling"] == "cls"
    loaded = SentenceEncoder.from_preset(str(out))
    assert loaded.declared_pooling == "cls" and loaded.output_dim == 32
    assert len(loaded.weights) == n_weights  # no projection head of width 24
    assert not any(24 in tuple(w.shape) for w in loaded.weights)
    assert_close_vectors(loaded.encode(SENTENCES[:3]), kept.encode(SENTENCES[:3]), rtol=1e-5)


def test_auto_pooling_trains_cls_even_on_a_mean_pooled_model():
    kept = keras_sentemb.fit_self_guided(
        SENTENCES, model=make_tiny_encoder(pooling="mean"), steps=2, batch_size=4,
        projection_dim=8, dev=None, verbose=0,
    )
    report = kept.training_report
    assert report.pooling == "cls" and "SG trains the [CLS] vector" in report.pooling_reason
    assert "own mean pooling is not used" in report.pooling_reason
    assert kept.declared_pooling == "cls" and report.selection is None
    assert report.steps_trained == 2


def test_a_named_pooling_overrides_the_methods_cls():
    kept = keras_sentemb.fit_self_guided(
        SENTENCES, model=make_tiny_encoder(pooling="mean"), pooling="mean", steps=1,
        batch_size=4, projection_dim=8, dev=None, verbose=0,
    )
    report = kept.training_report
    assert report.pooling == "mean" and report.pooling_reason == "set by the caller"
    assert kept.declared_pooling == "mean"


def test_patience_stops_after_evaluations_without_improvement():
    # A learning rate far below float32 resolution: the weights do not move,
    # so dev never improves and patience=1 stops at the first evaluation.
    kept = keras_sentemb.fit_self_guided(
        SENTENCES * 2, model=make_tiny_encoder(), steps=8, eval_every=2, batch_size=4,
        projection_dim=8, dev=DEV, learning_rate=1e-20, patience=1, verbose=0,
    )
    report = kept.training_report
    assert report.steps == 8 and report.steps_trained == 2
    assert "no dev improvement" in report.stopped
    assert [s for s, _ in report.selection["history"]] == [0, 2]
    assert report.selection["kept_step"] == 0


def test_steps_default_to_epochs_over_the_corpus():
    kept = keras_sentemb.fit_self_guided(
        SENTENCES, model=make_tiny_encoder(), batch_size=4, epochs=2,
        projection_dim=8, dev=None, verbose=0,
    )
    assert kept.training_report.steps_trained == 4  # 8 sentences / 4 x 2 epochs
    assert kept.training_report.resolved["steps"] == 4


def test_fit_argument_errors():
    with pytest.raises(ValueError, match="loss"):
        keras_sentemb.fit_self_guided(SENTENCES, model=make_tiny_encoder(), loss="sg-opt")
    with pytest.raises(ValueError, match="batch_size"):
        keras_sentemb.fit_self_guided(SENTENCES, model=make_tiny_encoder(), batch_size=0)
    with pytest.raises(ValueError, match="max_grad_norm"):
        keras_sentemb.fit_self_guided(SENTENCES, model=make_tiny_encoder(), dev=None,
                                      max_grad_norm=-1.0)
    with pytest.raises(ValueError):
        keras_sentemb.fit_self_guided([], model=make_tiny_encoder())


def test_cli_flags_mirror_fit_arguments():
    from keras_sentemb import cli

    parser, method = cli.method_option_parser("sg")
    assert method.signature() == inspect.signature(keras_sentemb.fit_self_guided)
    options = parser.parse_args(
        ["--loss", "opt1", "--view-pooling", "mean", "--no-freeze-embeddings",
         "--reg-weight", "0.2", "--min-layer", "1", "--dev", "none", "--pooling", "cls"]
    )
    assert vars(options) == {
        "loss": "opt1", "view_pooling": "mean", "freeze_embeddings": False,
        "reg_weight": 0.2, "min_layer": 1, "dev": "none", "pooling": "cls",
    }


def test_cli_train_sg(tmp_path):
    from keras_sentemb.cli import main

    make_tiny_encoder().save(tmp_path / "tiny")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES), encoding="utf-8")
    rc = main(["train", "sg", "--model", str(tmp_path / "tiny"), "--train-file", str(corpus),
               "--output", str(tmp_path / "out"), "--steps", "2", "--batch-size", "4",
               "--projection-dim", "8", "--loss", "base", "--dev", "none", "--verbose", "0"])
    assert rc == 0
    report = json.loads((tmp_path / "out" / "training_report.json").read_text())
    assert report["hyperparameters"]["loss"] == "base" and report["steps_trained"] == 2
    assert report["pooling"] == "cls"
    assert SentenceEncoder.from_preset(str(tmp_path / "out")).declared_pooling == "cls"


def test_back_translation_pairs_without_projection_head(tmp_path):
    """BT + SG-OPT: BERT_T reads the sentence, BERT_F the positive; the ablations' flags."""
    pairs = tmp_path / "bt.tsv"
    pairs.write_text("\n".join(f"{s}\t{s[::-1]}" for s in SENTENCES), encoding="utf-8")
    kept = keras_sentemb.fit_self_guided(
        str(pairs), model=make_tiny_encoder(), mode="pairs", projection=False,
        view_pooling="mean", min_layer=1, max_layer=1, steps=2, batch_size=4, dev=None,
        verbose=0,
    )
    report = kept.training_report
    assert report.data == {"sentences": 8, "mode": "pairs"} and report.steps_trained == 2
    assert report.hyperparameters["projection"] is False
    with pytest.raises(ValueError, match="mode"):
        keras_sentemb.fit_self_guided(SENTENCES, model=make_tiny_encoder(), mode="bt")
