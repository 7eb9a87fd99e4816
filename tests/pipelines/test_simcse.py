"""`fit_simcse`: pooling and MLP from the model, exact steps, dev selection, saving, CLI."""

import inspect
import json

import keras
import pytest

import keras_sentemb
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.pipelines.callbacks import sts_spearman
from keras_sentemb.pipelines.scaffold import NOT_HYPERPARAMETERS
from keras_sentemb.methods.simcse.trainer import SimCSE
from tests.conftest import make_tiny_encoder
from tests.helpers.batches import paraphrase_batch, triplet_batch
from tests.helpers.corpora import CORPUS, DEV, TRIPLETS
from tests.numeric import assert_close_vectors


class Capture(keras.callbacks.Callback):
    """Keeps the trainer `fit` ran (to look at its head and pooling)."""

    def on_train_begin(self, logs=None):
        self.trainer = self.model


def test_raw_model_trains_cls_with_a_training_only_mlp(tmp_path):
    encoder = make_tiny_encoder()
    n_weights = len(encoder.weights)
    capture = Capture()
    out = tmp_path / "simcse"
    kept = keras_sentemb.fit_simcse(
        CORPUS[:64], model=encoder, output=str(out), steps=4, eval_every=2, dev=DEV,
        batch_size=8, learning_rate=1e-3, verbose=0, callbacks=[capture],
    )
    assert capture.trainer.pooling == "cls" and capture.trainer.mlp is not None
    report = kept.training_report
    assert report.pooling == "cls" and "declares no pooling" in report.pooling_reason
    assert report.resolved["mlp"] == "train" and report.resolved["pooling"] == "cls"
    assert report.steps == report.steps_trained == 4
    history = report.selection["history"]
    assert [s for s, _ in history] == [0, 2, 4]
    best = max(scores["encoder"] for _, scores in history)
    assert sts_spearman(kept, DEV) == pytest.approx(best, abs=1e-3)
    # The report records the fit_simcse arguments, nothing else.
    params = set(inspect.signature(keras_sentemb.fit_simcse).parameters)
    assert set(report.hyperparameters) == params - set(NOT_HYPERPARAMETERS)
    assert report.data == {"examples": 64, "mode": "unsup"}
    # The MLP head stays behind: the kept encoder and the saved folder have none.
    assert kept.projection is None and kept.declared_pooling == "cls"
    assert not (out / "sentemb_projection.npz").exists()
    assert json.loads((out / "sentemb_config.json").read_text())["projection_dim"] is None
    saved = json.loads((out / "training_report.json").read_text())
    assert saved["resolved"]["mlp"] == "train" and saved["steps_trained"] == 4
    loaded = SentenceEncoder.from_preset(str(out))
    assert loaded.declared_pooling == "cls" and len(loaded.weights) == n_weights
    assert_close_vectors(loaded.encode(CORPUS[:5]), kept.encode(CORPUS[:5]), rtol=1e-5)


def test_declared_mean_pooling_trains_mean_without_an_mlp():
    capture = Capture()
    kept = keras_sentemb.fit_simcse(
        CORPUS[:16], model=make_tiny_encoder(pooling="mean"), batch_size=8, dev=None,
        verbose=0, callbacks=[capture],
    )
    assert capture.trainer.pooling == "mean" and capture.trainer.mlp is None
    report = kept.training_report
    assert report.pooling == "mean" and report.pooling_reason == "the model declares mean pooling"
    assert report.resolved["mlp"] == "none"
    assert kept.declared_pooling == "mean" and report.selection is None
    # steps=None: one epoch, 16 sentences / 8.
    assert report.resolved["steps"] == report.steps_trained == 2


def test_explicit_pooling_and_mlp_win_over_auto():
    capture = Capture()
    kept = keras_sentemb.fit_simcse(
        CORPUS[:16], model=make_tiny_encoder(pooling="mean"), steps=1, batch_size=8,
        pooling="cls", mlp="none", dev=None, verbose=0, callbacks=[capture],
    )
    assert capture.trainer.pooling == "cls" and capture.trainer.mlp is None
    report = kept.training_report
    assert (report.pooling, report.pooling_reason) == ("cls", "set by the caller")
    assert kept.declared_pooling == "cls"


@pytest.mark.parametrize("mode", ["sup", "paraphrase"])
def test_supervised_modes_lower_their_loss(mode):
    rows = TRIPLETS * 2 if mode == "sup" else [
        (a, b, i % 2) for i, (a, b, _) in enumerate(TRIPLETS * 2)]
    encoder = make_tiny_encoder()
    batch = triplet_batch(encoder) if mode == "sup" else paraphrase_batch(encoder)

    def loss(model):
        probe = SimCSE(model, mode=mode, pooling="mean", mlp="none")
        return float(probe.compute_loss_terms(batch, training=False).loss)

    before = loss(encoder)
    kept = keras_sentemb.fit_simcse(
        rows, model=encoder, mode=mode, steps=8, batch_size=4, learning_rate=1e-3,
        max_length=16, pooling="mean", mlp="none", dev=None, verbose=0,
    )
    assert loss(kept) < 0.9 * before, (before, loss(kept))
    report = kept.training_report
    assert report.steps_trained == 8 and report.data == {"examples": 8, "mode": mode}


def test_invalid_arguments():
    enc = make_tiny_encoder()
    with pytest.raises(ValueError, match="mode"):
        keras_sentemb.fit_simcse(CORPUS, model=enc, mode="semi", dev=None)
    with pytest.raises(ValueError, match="expects triplets"):
        keras_sentemb.fit_simcse([("a", "b", 1)] * 8, model=enc, mode="sup", dev=None)
    with pytest.raises(ValueError, match="expects labeled_pairs"):
        keras_sentemb.fit_simcse(TRIPLETS, model=enc, mode="paraphrase", dev=None)
    with pytest.raises(ValueError, match="mlp"):
        keras_sentemb.fit_simcse(CORPUS, model=enc, mlp="always", dev=None)
    with pytest.raises(ValueError, match="pooling"):
        keras_sentemb.fit_simcse(CORPUS, model=enc, pooling="middle", dev=None)
    with pytest.raises(ValueError, match="batch_size"):
        keras_sentemb.fit_simcse(CORPUS, model=enc, batch_size=0)


def test_cli_train_simcse_mlp_none_is_the_string_none(tmp_path):
    from keras_sentemb.cli import main

    make_tiny_encoder().save(tmp_path / "tiny")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS[:32]), encoding="utf-8")
    out = tmp_path / "out"
    rc = main(["train", "simcse", "--model", str(tmp_path / "tiny"), "--train-file", str(corpus),
               "--output", str(out), "--steps", "2", "--batch-size", "8", "--mlp", "none",
               "--dev", "none", "--verbose", "0"])
    assert rc == 0  # None instead of "none" would fail the mlp validation (exit 2)
    report = json.loads((out / "training_report.json").read_text())
    assert report["hyperparameters"]["mlp"] == "none" and report["resolved"]["mlp"] == "none"
    assert report["pooling"] == "cls"  # the tiny folder declares none: the paper's cls
    assert report["steps_trained"] == 2
    assert SentenceEncoder.from_preset(str(out)).declared_pooling == "cls"


def test_pairs_mode_trains_on_a_sentence_positive_file(tmp_path):
    """"Contrastive (BT)": (sentence, back-translation) rows, in-batch negatives only."""
    pairs = tmp_path / "bt.csv"
    pairs.write_text("sent0,sent1\n" + "\n".join(f"{a},{b}" for a, b, _ in TRIPLETS),
                     encoding="utf-8")
    kept = keras_sentemb.fit_simcse(str(pairs), model=make_tiny_encoder(), mode="pairs",
                                    steps=2, batch_size=4, dev=None, verbose=0)
    assert kept.training_report.data["mode"] == "pairs"
    assert kept.training_report.steps_trained == 2
