"""Model cards: written by every save (fit_*, train), carried through reloads and export."""

import json

import pytest

import keras_sentemb
from keras_sentemb import cli
from keras_sentemb import model_card
from keras_sentemb.models import SentenceEncoder
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS, DEV


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("card") / "simcse"
    keras_sentemb.fit_simcse(
        CORPUS[:64], model=make_tiny_encoder(), output=str(out), steps=4, eval_every=2, dev=DEV,
        batch_size=8, learning_rate=1e-3, verbose=0, seed=3,
    )
    return out


def test_fit_writes_a_card_with_every_hyperparameter_and_the_dev_history(trained):
    card = json.loads((trained / model_card.CARD_JSON).read_text())
    report = json.loads((trained / "training_report.json").read_text())
    training = card["training"]
    assert training["method"] == "simcse" and card["base_model"] == report["model"]
    assert training["hyperparameters"] == report["hyperparameters"]
    assert training["hyperparameters"]["learning_rate"] == 1e-3
    assert training["hyperparameters"]["seed"] == 3
    assert training["resolved"]["pooling"] == "cls" and training["resolved"]["mlp"] == "train"
    assert training["data"] == report["data"] and training["data"]
    assert training["steps_trained"] == 4
    history = training["selection"]["history"]
    assert [step for step, _ in history] == [0, 2, 4]  # the starting weights are a candidate
    selected = card["evaluation"][0]
    assert selected["name"] == "dev selection" and "Spearman" in selected["protocol"]
    assert selected["value"] == training["selection"]["kept_score"]
    assert card["model"]["num_layers"] == 2 and card["model"]["pooling"] == "cls"
    assert set(card["versions"]) == {"keras_sentemb", "keras", "keras_hub", "tensorflow"}
    text = (trained / model_card.CARD_MD).read_text()
    assert "trained with simcse" in text and "| learning_rate | 0.001 |" in text
    assert "### Selection" in text and "dev selection" in text


def test_the_card_survives_reload_and_resave_and_training_from_it(trained, tmp_path):
    encoder = SentenceEncoder.from_preset(str(trained))
    assert encoder.model_card["training"]["method"] == "simcse"
    encoder.save(tmp_path / "copy")  # no new training: the card is kept
    copy = model_card.read_model_card(tmp_path / "copy")
    assert copy["training"] == encoder.model_card["training"]
    keras_sentemb.fit_simcse(
        CORPUS[:32], model=str(trained), output=str(tmp_path / "again"), steps=2, eval_every=2,
        dev="none", batch_size=8, verbose=0,
    )
    again = model_card.read_model_card(tmp_path / "again")
    assert again["base_model"] == str(trained) and again["training"]["steps_trained"] == 2
    assert again["previous"]["training"]["method"] == "simcse"
    assert again["evaluation"] == []  # no dev set this time
    assert "## Trained from" in (tmp_path / "again" / model_card.CARD_MD).read_text()


def test_a_plain_save_has_a_card_without_training(tmp_path):
    make_tiny_encoder().save(tmp_path / "m")
    card = model_card.read_model_card(tmp_path / "m")
    assert card["training"] is None and card["evaluation"] == []
    assert "Not trained by keras_sentemb" in (tmp_path / "m" / model_card.CARD_MD).read_text()


def test_export_copies_the_card_into_assets_extra(trained, tmp_path):
    path = keras_sentemb.export_saved_model(str(trained), tmp_path / "served")
    card = json.loads((tmp_path / "served" / "1" / "assets.extra" / model_card.CARD_JSON).read_text())
    assert card["training"]["method"] == "simcse"
    assert card["export"]["version"] == 1 and card["export"]["verified_max_abs_diff"] <= 1e-5
    assert card["export"]["verified_max_rel_diff"] <= 1e-4
    assert "## Export" in (tmp_path / "served" / "1" / "assets.extra" / model_card.CARD_MD).read_text()
    assert path.endswith("1")


def test_cli_train_and_update_card(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS[:32]), encoding="utf-8")
    tiny = tmp_path / "tiny"
    make_tiny_encoder().save(tiny)
    out = tmp_path / "ct"
    assert cli.main(["train", "ct", "--model", str(tiny), "--train-file", str(corpus),
                     "--output", str(out), "--steps", "2", "--batch-size", "8", "--dev", "none",
                     "--verbose", "0"]) == 0
    assert model_card.read_model_card(out)["training"]["method"] == "ct"
    sts = tmp_path / "STSBenchmark"
    sts.mkdir()
    (sts / "sts-test.csv").write_text("".join(
        f"g\tf\t2012\t{i}\t{(i * 7) % 6:.1f}\t{a}\t{b}\n" for i, (a, b) in enumerate(zip(CORPUS[:12], CORPUS[12:24]))
    ), encoding="utf-8")
    assert cli.main(["evaluate", "sts", "--model", str(out), "--data", str(sts), "--update-card"]) == 0
    printed = json.loads(capsys.readouterr().out)
    card = model_card.read_model_card(out)
    entry = next(e for e in card["evaluation"] if e["name"] == "STSBenchmark")
    assert entry["value"] == printed["STSBenchmark"]["test"]["spearman"] and "cosine" in entry["protocol"]
    # Evaluating again replaces the entry instead of adding a second one.
    assert cli.main(["evaluate", "sts", "--model", str(out), "--data", str(sts), "--update-card"]) == 0
    card = model_card.read_model_card(out)
    assert sum(e["name"] == "STSBenchmark" for e in card["evaluation"]) == 1
    assert "STSBenchmark" in (out / model_card.CARD_MD).read_text()
    # A folder that is not a keras_sentemb model: one line, exit 2.
    assert cli.main(["evaluate", "sts", "--model", "default", "--data", str(sts), "--update-card"]) == 2
    assert "needs a model folder written by keras_sentemb" in capsys.readouterr().err
