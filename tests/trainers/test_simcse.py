"""SimCSE trainer: loss closed forms per mode, MLP in training only, learning."""

import keras
import numpy as np
import pytest

from keras_sentemb.losses import info_nce_loss
from keras_sentemb.losses import paraphrase_loss
from keras_sentemb.methods.simcse.trainer import SimCSE
from tests.conftest import make_tiny_encoder
from tests.helpers.batches import TRIPLET_COLUMNS as COLUMNS
from tests.helpers.batches import packed, paraphrase_batch, triplet_batch
from tests.helpers.corpora import SENTENCES
from tests.numeric import relative_errors


def no_dropout(encoder):
    """Backbone dropout rates to 0: training-mode passes become deterministic."""
    for layer in encoder.backbone._flatten_layers():
        if isinstance(layer, keras.layers.Dropout):
            layer.rate = 0.0
    return encoder


def test_unsup_eval_loss_is_info_nce_of_identical_views_without_the_mlp():
    encoder = make_tiny_encoder()
    x = packed(encoder)
    trainer = SimCSE(encoder)  # the paper's cls + MLP in training
    assert trainer.mlp is not None and trainer.pooling == "cls"
    assert encoder.declared_pooling is None  # trainers declare nothing
    z = encoder(x, training=False, pooling="cls")
    expected = info_nce_loss(z, z, temperature=0.05)
    got = trainer.compute_loss_terms({"sentence": x}, training=False).loss
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_unsup_training_loss_goes_through_the_mlp():
    encoder = no_dropout(make_tiny_encoder())
    x = packed(encoder)
    trainer = SimCSE(encoder)
    z = trainer.mlp(encoder(x, training=False, pooling="cls"))
    expected = info_nce_loss(z, z, temperature=0.05)
    got = trainer.compute_loss_terms({"sentence": x}, training=True).loss
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_unsup_views_are_two_passes_of_the_batch_with_their_own_dropout():
    encoder = make_tiny_encoder()
    x = packed(encoder)
    trainer = SimCSE(encoder, pooling="mean", mlp="none")
    rows = []
    embed = trainer.embed

    def counted(inputs, training):
        rows.append(int(inputs["token_ids"].shape[0]))
        return embed(inputs, training)

    trainer.embed = counted
    views = trainer.embed_batch({"sentence": x}, training=True)
    assert rows == [len(SENTENCES)] * 2  # two passes of the batch, not one of it doubled
    assert relative_errors(views["first"].numpy(), views["second"].numpy()).max() > 1e-2
    evaluation = trainer.embed_batch({"sentence": x}, training=False)
    np.testing.assert_array_equal(evaluation["first"], evaluation["second"])
    np.testing.assert_array_equal(evaluation["first"], embed(x, training=False))


def test_sup_loss_uses_hard_negatives():
    encoder = make_tiny_encoder()
    trainer = SimCSE(encoder, mode="sup", pooling="mean", mlp="none", hard_negative_weight=0.5)
    cols = triplet_batch(encoder)
    a, p, n = (encoder(cols[k], pooling="mean") for k in COLUMNS)
    expected = info_nce_loss(a, p, hard_negatives=n, temperature=0.05, hard_negative_weight=0.5)
    got = trainer.compute_loss_terms(cols, training=False).loss
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_paraphrase_mode_loss_and_metrics():
    encoder = make_tiny_encoder()
    trainer = SimCSE(encoder, mode="paraphrase", pooling="mean", mlp="none",
                     negative_weight=0.5, negative_margin=0.1)
    data = paraphrase_batch(encoder)
    u, v = (encoder(data[k], pooling="mean") for k in ("sentence1", "sentence2"))
    expected, parts = paraphrase_loss(u, v, data["label"], 0.05, 0.5, 0.1)
    terms = trainer.compute_loss_terms(data, training=False)
    got, extras = terms.loss, terms.metrics
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    np.testing.assert_allclose(extras["positive_loss"], parts["positive_loss"], rtol=1e-5)
    assert [m.name for m in trainer.metrics] == ["loss", "nonfinite", "positive_loss", "negative_loss"]


@pytest.mark.parametrize(
    "mode,pooling,mlp,make_batch,drop",
    [
        ("unsup", "cls", "train", lambda e: {"sentence": packed(e)}, True),
        ("unsup", "mean", "none", lambda e: {"sentence": packed(e)}, False),
        ("sup", "mean", "none", triplet_batch, False),
        ("paraphrase", "mean", "none", paraphrase_batch, False),
    ],
    ids=["unsup-cls-mlp", "unsup-mean", "sup", "paraphrase"],
)
def test_training_lowers_the_loss_on_a_fixed_batch(mode, pooling, mlp, make_batch, drop):
    """A sign error in any mode would raise the loss instead."""
    encoder = make_tiny_encoder()
    if drop:  # with the MLP: measure the training-mode loss (through the head), deterministically
        no_dropout(encoder)
    trainer = SimCSE(encoder, mode=mode, pooling=pooling, mlp=mlp)
    trainer.compile(optimizer=keras.optimizers.Adam(1e-3))
    data = make_batch(encoder)

    def loss():
        out = trainer.compute_loss_terms(data, training=drop)
        return float(out.loss)

    before = loss()
    for _ in range(5):
        logs = trainer.train_step(data)
    assert float(logs["nonfinite"]) == 0.0
    after = loss()
    assert after < 0.95 * before, (before, after)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="mode"):
        SimCSE(make_tiny_encoder(), mode="semi")
    with pytest.raises(ValueError, match="mlp"):
        SimCSE(make_tiny_encoder(), mlp="always")
    # The method's "auto" is resolved by the trainer for its pooling: the head with [CLS].
    assert SimCSE(make_tiny_encoder(), mlp="auto").mlp is not None
    assert SimCSE(make_tiny_encoder(), mlp="auto", pooling="mean").mlp is None
    with pytest.raises(ValueError, match="temperature"):
        SimCSE(make_tiny_encoder(), temperature=0.0)



def test_pairs_mode_is_info_nce_between_sentences_and_their_positives():
    """User-supplied positives (e.g. back-translations): no hard negatives."""
    encoder = make_tiny_encoder()
    trainer = SimCSE(encoder, mode="pairs", pooling="mean", mlp="none")
    cols = triplet_batch(encoder)
    batch = {"sent0": cols["sent0"], "sent1": cols["sent1"]}
    a, p = (encoder(batch[k], pooling="mean") for k in ("sent0", "sent1"))
    expected = info_nce_loss(a, p, temperature=0.05)
    got = trainer.compute_loss_terms(batch, training=False).loss
    np.testing.assert_allclose(got, expected, rtol=1e-5)
