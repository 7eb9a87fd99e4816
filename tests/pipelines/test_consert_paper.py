"""ConSERT as the paper evaluates: dev selection with last-two-layer pooling, the exact dropout view."""

import numpy as np
import pytest

import keras_sentemb
from keras_sentemb.augment.views import make_view
from keras_sentemb.pipelines.callbacks import sts_spearman
from keras_sentemb.methods.consert.trainer import ConSERT
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS, SENTENCES

_RNG = np.random.default_rng(1)
# 60 pairs on which mean and mean_last2 rank differently for the tiny encoder.
DEV = [(CORPUS[i], CORPUS[i + 1], float(_RNG.uniform(0, 5))) for i in range(0, 120, 2)]


def test_dev_selection_scores_with_the_evaluation_pooling():
    encoder = make_tiny_encoder()
    start = {p: sts_spearman(encoder, DEV, pooling=p) for p in ("mean", "mean_last2")}
    assert abs(start["mean"] - start["mean_last2"]) > 1e-3  # the two poolings differ here
    kept = keras_sentemb.fit_consert(
        SENTENCES * 3, model=encoder, steps=4, batch_size=8, learning_rate=1e-3,
        max_length=16, dev=DEV, eval_every=2, dev_pooling="mean_last2", verbose=0,
    )
    report = kept.training_report
    history = report.selection["history"]
    assert history[0][1]["encoder"] == pytest.approx(start["mean_last2"], abs=1e-3)
    best = max(scores["encoder"] for _, scores in history)
    assert sts_spearman(kept, DEV, pooling="mean_last2") == pytest.approx(best, abs=1e-3)
    assert report.pooling == "mean"  # trained (and saved) with mean pooling
    assert report.hyperparameters["dev_pooling"] == "mean_last2"
    with pytest.raises(ValueError):
        keras_sentemb.fit_consert(SENTENCES, model=encoder, dev_pooling="last3", steps=1)


def test_exact_dropout_view_reachable_from_fit_consert():
    assert make_view("dropout_exact").mode == "exact" and make_view("dropout").mode == "bernoulli"
    trainer = ConSERT(make_tiny_encoder(), views="shuffle,dropout_exact")
    assert trainer.view_layers[1].mode == "exact" and trainer.view_layers[1].rate == 0.2
    kept = keras_sentemb.fit_consert(
        SENTENCES * 2, model=make_tiny_encoder(), steps=2, batch_size=8, max_length=16,
        views="token_cutoff,dropout_exact", view_rates="0.15,0.2", dev=None, verbose=0,
    )
    assert kept.training_report.hyperparameters["views"] == "token_cutoff,dropout_exact"
    assert kept.training_report.steps_trained == 2
