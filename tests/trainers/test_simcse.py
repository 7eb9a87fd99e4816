"""SimCSE trainer: loss closed forms per mode, MLP in training only, fit."""

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.losses import info_nce_loss
from keras_sentemb.trainers.simcse import SimCSE
from keras_sentemb.trainers.simcse import fit_simcse
from keras_sentemb.trainers.simcse import paraphrase_loss
from tests.conftest import make_tiny_encoder
from tests.trainers.test_consert import SENTENCES, TRIPLETS, packed


def test_unsup_eval_loss_is_info_nce_of_identical_views():
    encoder = make_tiny_encoder()
    x = packed(encoder)
    trainer = SimCSE(encoder)  # cls + MLP in training
    assert encoder.pooling == "cls"
    z = trainer.mlp(encoder(x, training=False))
    expected = info_nce_loss(z, z, temperature=0.05)
    got = trainer.compute_contrastive_loss({"sentence": x}, training=False)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    # Dropout makes the two views differ in training: a larger loss.
    assert float(trainer.compute_contrastive_loss({"sentence": x}, training=True)) > float(got)


def test_sup_loss_uses_hard_negatives():
    encoder = make_tiny_encoder()
    trainer = SimCSE(encoder, mode="sup", pooling="mean", mlp="none", hard_negative_weight=0.5)
    cols = {k: encoder.preprocess(tf.constant([t[i] for t in TRIPLETS]), 16)
            for i, k in enumerate(("sent0", "sent1", "hard_neg"))}
    a, p, n = (encoder(cols[k], pooling="mean") for k in ("sent0", "sent1", "hard_neg"))
    expected = info_nce_loss(a, p, hard_negatives=n, temperature=0.05, hard_negative_weight=0.5)
    got = trainer.compute_contrastive_loss(cols, training=False)
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_paraphrase_loss_closed_form():
    u = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], "float32")
    v = np.array([[1.0, 0.2], [0.5, 1.0], [1.0, -1.0]], "float32")
    labels = np.array([1, 1, 0])
    loss, parts = paraphrase_loss(u, v, labels, temperature=0.5, negative_margin=-0.5)
    un = u / np.linalg.norm(u, axis=1, keepdims=True)
    vn = v / np.linalg.norm(v, axis=1, keepdims=True)
    logits = un @ vn.T / 0.5
    ce = [np.log(np.exp(logits[i]).sum()) - logits[i, i] for i in (0, 1)]
    neg = max(0.0, float(un[2] @ vn[2]) + 0.5)  # cos = 0 -> 0.5
    np.testing.assert_allclose(parts["positive_loss"], np.mean(ce), rtol=1e-5)
    np.testing.assert_allclose(parts["negative_loss"], neg, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(loss, np.mean(ce) + neg, rtol=1e-5)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="mode"):
        SimCSE(make_tiny_encoder(), mode="semi")
    with pytest.raises(ValueError, match="mlp"):
        SimCSE(make_tiny_encoder(), mlp="always")
    with pytest.raises(ValueError, match="expects triplets"):
        fit_simcse(supervised=[("a", "b", 1)] * 8, model=make_tiny_encoder(), mode="sup", dev=None)


def test_fit_simcse_unsup_keeps_no_mlp(tmp_path):
    from keras_sentemb.models import SentenceEncoder

    encoder = make_tiny_encoder()
    out = tmp_path / "simcse"
    got = fit_simcse(SENTENCES * 2, model=encoder, output=str(out), steps=2, batch_size=4,
                     max_length=16, dev=None, verbose=0)
    assert got.projection is None and got.pooling == "cls"
    assert SentenceEncoder.from_preset(str(out)).pooling == "cls"


@pytest.mark.parametrize("mode", ["sup", "paraphrase"])
def test_fit_simcse_supervised(mode):
    rows = TRIPLETS * 2 if mode == "sup" else [(a, b, i % 2) for i, (a, b, _) in enumerate(TRIPLETS * 2)]
    encoder = make_tiny_encoder()
    before = [w.copy() for w in encoder.get_weights()]
    fit_simcse(rows, model=encoder, mode=mode, steps=2, batch_size=4, learning_rate=1e-3,
               max_length=16, pooling="mean", mlp="none", dev=None, verbose=0)
    assert any(not np.allclose(a, b) for a, b in zip(before, encoder.get_weights()))
