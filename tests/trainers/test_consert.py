"""ConSERT trainer: views at the right hooks, loss closed forms per mode, learning."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.augment.adversarial_perturbation import adversarial_perturbation
from keras_sentemb.augment.views import make_view
from keras_sentemb.losses import nt_xent_loss
from keras_sentemb.models.pooling import masked_mean
from keras_sentemb.methods.consert import trainer as consert_module
from keras_sentemb.methods.consert.trainer import ConSERT
from tests.conftest import make_tiny_encoder
from tests.helpers.batches import packed
from tests.helpers.corpora import SENTENCES, TRIPLETS
from tests.numeric import assert_close_vectors, relative_errors


def mean_pool(encoder, inputs):
    return encoder(inputs, training=False, pooling="mean")


def layers_then_mean(encoder, embeddings, mask):
    """Run the Transformer layers (no dropout) on `embeddings`, mean-pool with `mask`."""
    h = embeddings
    for layer in encoder.backbone.transformer_layers:
        h = layer(h, padding_mask=mask, training=False)
    return masked_mean(h, mask).numpy()


class Recorder:
    """An embedding hook that records what the view handed on."""

    def __init__(self):
        self.seen = []

    def __call__(self, x):
        self.seen.append(x)
        return x


def test_unsup_loss_is_nt_xent_of_the_two_views():
    encoder = make_tiny_encoder()
    x = packed(encoder)
    trainer = ConSERT(encoder, views=("none", "none"))
    z = mean_pool(encoder, x)
    expected = nt_xent_loss(z, z, temperature=0.1)
    got = trainer.compute_loss_terms({"sentence": x}, training=True).loss
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    # Encoder dropout off by default: the step is deterministic.
    again = trainer.compute_loss_terms({"sentence": x}, training=True).loss
    np.testing.assert_allclose(got, again, rtol=1e-6)


def test_encoder_dropout_switch():
    encoder = make_tiny_encoder()
    x = packed(encoder)
    trainer = ConSERT(encoder, views=("none", "none"), encoder_dropout=True)
    a = trainer.compute_loss_terms({"sentence": x}, training=True).loss
    b = trainer.compute_loss_terms({"sentence": x}, training=True).loss
    assert not np.isclose(float(a), float(b))


def test_views_act_in_training_only():
    encoder = make_tiny_encoder()
    x = packed(encoder)
    trainer = ConSERT(encoder)  # shuffle + feature cutoff
    a, b = (v.numpy() for v in trainer._two_views(x, training=False))
    np.testing.assert_array_equal(a, b)
    assert_close_vectors(a, mean_pool(encoder, x).numpy(), rtol=1e-5)
    z = mean_pool(encoder, x)
    got = trainer.compute_loss_terms({"sentence": x}, training=False).loss
    np.testing.assert_allclose(got, nt_xent_loss(z, z, temperature=0.1), rtol=1e-5)
    a, b = (v.numpy() for v in trainer._two_views(x, training=True))
    clean = z.numpy()
    # Each view differs from the clean vector and from the other view.
    assert relative_errors(a, clean).max() > 1e-2 and relative_errors(b, clean).max() > 1e-2
    assert relative_errors(a, b).max() > 1e-2


def test_feature_cutoff_acts_on_the_embedding_output():
    encoder = make_tiny_encoder()
    x = packed(encoder)
    view = make_view("feature_cutoff", rate=0.25, seed=3)
    hook = Recorder()
    pooled = encoder.sentence_vectors(x, "mean", training=True, dropout=False, view=view,
                                      embedding_hook=hook)
    emb = hook.seen[0].numpy()
    clean = encoder.embed_tokens(x["token_ids"], x["segment_ids"]).numpy()
    for row in range(len(SENTENCES)):
        zero_cols = np.where(np.all(emb[row] == 0.0, axis=0))[0]
        assert len(zero_cols) == 8  # int(0.25 * 32) whole hidden dimensions
        keep = np.setdiff1d(np.arange(32), zero_cols)
        np.testing.assert_array_equal(emb[row][:, keep], clean[row][:, keep])
    # The layers then run on the cut embeddings with the unchanged mask.
    assert_close_vectors(
        pooled.numpy(), layers_then_mean(encoder, hook.seen[0], x["padding_mask"]), rtol=1e-5
    )


def test_shuffle_permutes_positions_only():
    encoder = make_tiny_encoder()
    x = packed(encoder)
    calls = {}

    class Spy:
        stage = "positions"

        def __call__(self, position_ids, padding_mask=None, training=None):
            out = make_view("shuffle", seed=1)(position_ids, padding_mask=padding_mask, training=training)
            calls["in"], calls["out"] = position_ids, out
            return out

    pooled = encoder.sentence_vectors(x, "mean", training=True, dropout=False, view=Spy())
    real = x["padding_mask"].numpy().astype(bool)
    pin, pout = calls["in"].numpy(), calls["out"].numpy()
    assert not np.array_equal(pin, pout)
    for row in range(len(SENTENCES)):
        assert sorted(pout[row][real[row]]) == sorted(pin[row][real[row]])
    shuffled = encoder.embed_tokens(x["token_ids"], x["segment_ids"], calls["out"])
    assert_close_vectors(
        pooled.numpy(), layers_then_mean(encoder, shuffled, x["padding_mask"]), rtol=1e-5
    )


def test_span_cutoff_mask_reaches_layers_and_pooling():
    encoder = make_tiny_encoder()
    x = packed(encoder)
    seen = {}

    class Spy:
        stage = "embeddings"
        updates_mask = True
        view = make_view("span_cutoff", rate=0.5, seed=2)

        def __call__(self, embeddings, padding_mask=None, training=None):
            out = self.view(embeddings, padding_mask=padding_mask, training=training)
            seen["embeddings"], seen["mask"] = out
            return out

    pooled = encoder.sentence_vectors(x, "mean", training=True, dropout=False, view=Spy())
    mask = seen["mask"]
    assert mask.numpy().sum() < x["padding_mask"].numpy().sum()
    assert_close_vectors(
        pooled.numpy(), layers_then_mean(encoder, seen["embeddings"], mask), rtol=1e-5
    )
    # With the original mask instead, the vectors would differ.
    assert not np.allclose(
        pooled.numpy(), layers_then_mean(encoder, seen["embeddings"], x["padding_mask"]), atol=1e-4
    )


def _nli_batch(encoder):
    from keras_sentemb.data.nli import triplets_to_nli_pairs

    rows = triplets_to_nli_pairs(TRIPLETS)
    return {
        "premise": encoder.preprocess(tf.constant([r[0] for r in rows]), 16),
        "hypothesis": encoder.preprocess(tf.constant([r[1] for r in rows]), 16),
        "label": tf.constant([r[2] for r in rows]),
    }


def _cross_entropy(logits, labels):
    logits = np.asarray(logits, np.float64)
    m = logits.max(1, keepdims=True)
    log_z = m[:, 0] + np.log(np.exp(logits - m).sum(1))
    return float(np.mean(log_z - logits[np.arange(len(labels)), labels]))


@pytest.mark.parametrize("mode", ["sup", "joint"])
def test_supervised_loss_is_ce_plus_alpha_contrastive(mode):
    encoder = make_tiny_encoder()
    data = _nli_batch(encoder)
    trainer = ConSERT(encoder, views=("none", "none"), mode=mode, alpha=0.15)
    u = mean_pool(encoder, data["premise"]).numpy()
    v = mean_pool(encoder, data["hypothesis"]).numpy()
    kernel, bias = (w.numpy() for w in trainer.classifier.weights)
    logits = np.concatenate([u, v, np.abs(u - v)], -1) @ kernel + bias
    labels = data["label"].numpy()
    ce = _cross_entropy(logits, labels)
    # One NT-Xent per side (the official code): a hypothesis is never a
    # negative of its own premise.
    contrastive = 0.0
    if mode == "joint":
        contrastive = float(nt_xent_loss(u, u, temperature=0.1)) + float(
            nt_xent_loss(v, v, temperature=0.1))
    terms = trainer.compute_loss_terms(data, training=True)
    loss, extras = terms.loss, terms.metrics
    np.testing.assert_allclose(float(loss), ce + 0.15 * contrastive, rtol=1e-5)
    np.testing.assert_allclose(float(extras["ce_loss"]), ce, rtol=1e-5)
    np.testing.assert_allclose(float(extras["contrastive_loss"]), contrastive, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(float(extras["accuracy"]), np.mean(logits.argmax(1) == labels))


def test_adversarial_view_in_joint_mode(monkeypatch):
    calls = []

    def spy(embeddings, gradients, noise_norm=1.0, epsilon=1e-10, padding_mask=None):
        out = adversarial_perturbation(embeddings, gradients, noise_norm, epsilon, padding_mask)
        calls.append((embeddings, out, padding_mask))
        return out

    monkeypatch.setattr(consert_module, "adversarial_perturbation", spy)
    encoder = make_tiny_encoder()
    data = _nli_batch(encoder)
    trainer = ConSERT(encoder, views=("none", "adversarial"), mode="joint", noise_norm=5.0)
    with tf.GradientTape() as tape:
        terms = trainer.compute_loss_terms(data, training=True)
        loss, extras = terms.loss, terms.metrics
    grads = tape.gradient(loss, trainer.trainable_variables)
    assert np.isfinite(float(loss))
    assert all(g is None or np.all(np.isfinite(tf.convert_to_tensor(g).numpy())) for g in grads)
    # Premises and hypotheses each get one adversarial view: every real token
    # moves by exactly noise_norm, padding does not move.
    assert len(calls) == 2
    for embeddings, out, mask in calls:
        moved = np.linalg.norm((out - embeddings).numpy(), axis=-1)
        real = mask.numpy().astype(bool)
        np.testing.assert_allclose(moved[real], 5.0, rtol=1e-4)
        np.testing.assert_allclose(moved[~real], 0.0, atol=1e-6)
    # The views differ from clean ones, so the contrastive part is larger than
    # with two identical views.
    clean = ConSERT(encoder, views=("none", "none"), mode="joint")
    clean.classifier.set_weights(trainer.classifier.get_weights())
    clean_extras = clean.compute_loss_terms(data, training=True).metrics
    assert float(extras["contrastive_loss"]) > float(clean_extras["contrastive_loss"])
    # Out of training there is no adversarial view.
    calls.clear()
    trainer.compute_loss_terms(data, training=False)
    assert not calls


@pytest.mark.parametrize(
    "views,mode,make_data",
    [
        (("shuffle", "feature_cutoff"), "unsup", lambda e: {"sentence": packed(e)}),
        (("none", "none"), "sup", _nli_batch),
        (("shuffle", "feature_cutoff"), "joint", _nli_batch),
    ],
    ids=["unsup", "sup", "joint"],
)
def test_training_lowers_the_loss_on_a_fixed_batch(views, mode, make_data):
    """A sign error in either part of the loss would raise it instead."""
    encoder = make_tiny_encoder()
    trainer = ConSERT(encoder, views=views, mode=mode, seed=0)
    trainer.compile(optimizer=keras.optimizers.Adam(1e-3))
    data = make_data(encoder)

    def loss():
        out = trainer.compute_loss_terms(data, training=False)
        return float(out.loss)

    before = loss()
    for _ in range(5):
        logs = trainer.train_step(data)
    assert float(logs["nonfinite"]) == 0.0
    assert loss() < 0.9 * before, (before, loss())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"views": ("shuffle", "blur")}, "views"),
        ({"views": ("shuffle", "adversarial")}, "supervised"),
        ({"mode": "sup_unsup"}, "fit_consert"),
        ({"temperature": 0.0}, "temperature"),
        ({"view_rates": (0.1,)}, "view_rates"),
    ],
)
def test_invalid_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ConSERT(make_tiny_encoder(), **kwargs)
