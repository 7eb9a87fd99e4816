"""CT as the paper runs it: the worst of the two towers, and the paper's negative layout."""

import numpy as np
import pytest

import keras_sentemb
from keras_sentemb.data.batching import tokenize_columns
from keras_sentemb.data.ct_sampler import ct_pair_dataset
from keras_sentemb.pipelines.callbacks import sts_spearman
from keras_sentemb.methods.contrastive_tension.trainer import ContrastiveTension
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS, DEV


def test_keep_worst_trains_without_validation_and_keeps_the_lower_tower():
    kept = keras_sentemb.fit_ct(CORPUS, model=make_tiny_encoder(), steps=4, eval_every=2,
                                dev=DEV, keep="worst", batch_size=8, negatives="k3",
                                learning_rate=1e-2, verbose=0)
    report = kept.training_report
    assert report.selection is None and report.steps_trained == 4  # no dev during training
    scores = report.extras["tower_scores"]
    assert set(scores) == {"tower1", "tower2"} and scores["tower1"] != scores["tower2"]
    worst = min(scores, key=scores.get)
    assert report.extras["kept_tower"] == worst
    assert sts_spearman(kept, DEV) == pytest.approx(scores[worst], rel=1e-4)


def test_keep_worst_ranks_towers_with_a_tower_score():
    calls = []

    def score(encoder):  # any evaluation: here, minus the first vector's norm
        calls.append(encoder.name)
        return -float(np.linalg.norm(encoder.encode(CORPUS[:1])))

    kept = keras_sentemb.fit_ct(CORPUS, model=make_tiny_encoder(), steps=2, dev=None,
                                tower_score=score, keep="worst", batch_size=8, negatives="k3",
                                learning_rate=1e-2, verbose=0)
    scores = kept.training_report.extras["tower_scores"]
    assert len(calls) == 2
    assert kept.training_report.extras["kept_tower"] == min(scores, key=scores.get)
    assert score(kept) == pytest.approx(min(scores.values()), rel=1e-5)


def test_keep_worst_and_layout_argument_errors():
    enc = make_tiny_encoder()
    with pytest.raises(ValueError, match="keep='worst'.*dev=None"):
        keras_sentemb.fit_ct(CORPUS, model=enc, keep="worst", dev=None, steps=1)
    with pytest.raises(ValueError, match="tower_score"):
        keras_sentemb.fit_ct(CORPUS, model=enc, keep="best", tower_score=lambda e: 0.0, steps=1)
    with pytest.raises(ValueError, match="tower_score"):
        keras_sentemb.fit_ct(CORPUS, model=enc, keep="worst", tower_score="stsb", steps=1)
    with pytest.raises(ValueError, match="negatives_layout"):
        keras_sentemb.fit_ct(CORPUS, model=enc, negatives_layout="figure4", dev=None, steps=1)
    with pytest.raises(ValueError, match="layout"):
        ct_pair_dataset(CORPUS, 16, 7, layout="figure4")


def test_paper_layout_pairs_each_sentence_with_its_negatives():
    official = next(iter(ct_pair_dataset(CORPUS, 16, 7, seed=5)))
    paper = next(iter(ct_pair_dataset(CORPUS, 16, 7, seed=5, layout="paper")))
    left, right = paper["left"].numpy(), paper["right"].numpy()
    np.testing.assert_array_equal(paper["labels"].numpy(), official["labels"].numpy())
    # Tower 2's column is the same draw in both layouts; tower 1 sees s in all 8 rows.
    np.testing.assert_array_equal(right, official["right"].numpy())
    for start in (0, 8):
        group = slice(start, start + 8)
        assert set(left[group].tolist()) == {right[start]}
        np.testing.assert_array_equal(official["left"].numpy()[start], left[start])
    assert any(o != p for o, p in zip(official["left"].numpy(), left))


def test_paper_layout_loss_equals_closed_form():
    enc = make_tiny_encoder()
    ct = ContrastiveTension(enc)
    ds = ct_pair_dataset(CORPUS, 8, 3, seed=2, layout="paper")
    batch = next(iter(tokenize_columns(enc, ds, ["left", "right"])))
    loss = float(ct.compute_loss_terms(batch, training=True).loss)

    def mean_pool(tower, inputs):
        h = tower.backbone(inputs)["sequence_output"].numpy()
        m = inputs["padding_mask"].numpy()[..., None]
        return (h * m).sum(1) / m.sum(1)

    r1 = mean_pool(ct.tower1, batch["left"])
    r2 = mean_pool(ct.tower2, batch["right"])
    # f1(s) . f2(x) for x in (s, n1, n2, n3): one anchor vector per group of 4.
    anchors = np.repeat(r1[::4], 4, axis=0)
    np.testing.assert_allclose(r1, anchors, rtol=1e-5, atol=1e-6)
    z = (anchors * r2).sum(1)
    y = np.array([1, 0, 0, 0, 1, 0, 0, 0], dtype=np.float64)
    expected = np.mean(np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z))))
    assert loss == pytest.approx(expected, rel=1e-5)


def test_fit_ct_with_the_paper_layout_records_it():
    kept = keras_sentemb.fit_ct(CORPUS, model=make_tiny_encoder(), steps=2, dev=None,
                                keep="tower1", batch_size=8, negatives="k3",
                                negatives_layout="paper", verbose=0)
    assert kept.training_report.hyperparameters["negatives_layout"] == "paper"
