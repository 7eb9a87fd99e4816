"""`fit_ct`: dev selection of the towers, fixed-tower protocol, CLI."""

import pytest

import keras_sentemb
from keras_sentemb.pipelines.callbacks import sts_spearman
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS, DEV
from tests.numeric import assert_close_vectors


def test_fit_ct_keeps_the_best_tower_on_dev(tmp_path):
    enc = make_tiny_encoder()
    initial = sts_spearman(enc, DEV)
    kept = keras_sentemb.fit_ct(
        CORPUS, model=enc, steps=6, eval_every=2, dev=DEV, batch_size=8,
        negatives="k3", learning_rate=1e-2, verbose=0, output=str(tmp_path / "out"),
    )
    report = kept.training_report
    history = report.selection["history"]
    assert [step for step, _ in history] == [0, 2, 4, 6]
    assert set(history[0][1]) == {"tower1", "tower2"}
    best = max(max(scores.values()) for _, scores in history)
    assert sts_spearman(kept, DEV) == pytest.approx(best, abs=1e-3)
    assert sts_spearman(kept, DEV) >= initial - 1e-6
    assert report.extras["kept_tower"] == report.selection["kept"]
    assert report.pooling == "mean" and "declares no pooling" in report.pooling_reason
    loaded = keras_sentemb.SentenceEncoder.from_preset(str(tmp_path / "out"))
    assert loaded.declared_pooling == "mean"
    assert_close_vectors(loaded.encode(CORPUS[:5]), kept.encode(CORPUS[:5]), rtol=1e-5)
    assert (tmp_path / "out" / "training_report.json").is_file()


def test_fixed_tower_protocol_records_dev_but_keeps_the_tower():
    enc = make_tiny_encoder()
    kept = keras_sentemb.fit_ct(CORPUS, model=enc, steps=4, eval_every=2, dev=DEV,
                                keep="tower2", batch_size=8, negatives="k3",
                                learning_rate=1e-2, verbose=0)
    assert kept is not enc and kept.name.endswith("tower2")
    report = kept.training_report
    assert report.steps_trained == 4 and report.extras["kept_tower"] == "tower2"
    assert [s for s, _ in report.selection["history"]] == [0, 2, 4]
    no_dev = keras_sentemb.fit_ct(CORPUS, model=make_tiny_encoder(), steps=2, dev=None,
                                  keep="tower1", batch_size=8, negatives="k3", verbose=0)
    assert no_dev.training_report.selection is None
    assert no_dev.training_report.extras["kept_tower"] == "tower1"


def test_fit_ct_bad_arguments():
    enc = make_tiny_encoder()
    with pytest.raises(ValueError, match="negatives"):
        keras_sentemb.fit_ct(CORPUS, model=enc, negatives="k0", dev=None)
    with pytest.raises(ValueError, match="no non-empty sentence"):
        keras_sentemb.fit_ct(["", "  "], model=enc, dev=None)
    with pytest.raises(ValueError, match="keep"):
        keras_sentemb.fit_ct(CORPUS, model=enc, keep="tower3")
    with pytest.raises(ValueError, match="eval_every"):
        keras_sentemb.fit_ct(CORPUS, model=enc, eval_every=0)
    with pytest.raises(ValueError, match="learning_rate"):
        keras_sentemb.fit_ct(CORPUS, model=enc, negatives="in_batch", learning_rate=-1e-5)


def test_cli_train_ct(tmp_path):
    from keras_sentemb.cli import main

    enc = make_tiny_encoder()
    enc.save(tmp_path / "tiny")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS), encoding="utf-8")
    rc = main(["train", "ct", "--model", str(tmp_path / "tiny"), "--train-file", str(corpus),
               "--output", str(tmp_path / "out"), "--steps", "3", "--batch-size", "8",
               "--negatives", "k3", "--dev", "none", "--verbose", "0"])
    assert rc == 0
    assert (tmp_path / "out" / "sentemb_config.json").is_file()
    assert main(["train", "ct", "--model", str(tmp_path / "tiny"), "--train-file", str(corpus),
                 "--output", str(tmp_path / "o2"), "--no-such-flag", "1"]) == 2
