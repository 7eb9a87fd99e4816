"""ConSERT trainer: views at the right hooks, loss closed forms, modes, fit."""

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.augment.views import make_view
from keras_sentemb.losses import nt_xent_loss
from keras_sentemb.trainers._views import view_hidden_states
from keras_sentemb.trainers.consert import ConSERT
from keras_sentemb.trainers.consert import fit_consert
from tests.conftest import make_tiny_encoder

SENTENCES = [
    "a man is playing a guitar .", "the cat sits on the mat", "a woman plays piano",
    "the dog runs in the park", "hello world", "a man and a woman are playing",
    "the cat runs", "a dog sits on the mat",
]
TRIPLETS = [
    ("a man is playing a guitar", "a man plays", "a cat sits"),
    ("the dog runs in the park", "a dog runs", "the dog sits"),
    ("a woman plays piano", "a woman is playing", "a man sits"),
    ("hello world", "hello", "the cat runs"),
]
DEV = [("a man is playing a guitar .", "a man plays guitar", 4.0),
       ("the cat sits", "a dog runs", 0.5), ("hello world", "hello", 3.0)]


def packed(encoder, sentences=SENTENCES):
    return encoder.preprocess(tf.constant(sentences), 16)


def mean_pool(encoder, inputs):
    return encoder(inputs, training=False, pooling="mean")


def test_unsup_loss_is_nt_xent_of_the_two_views():
    encoder = make_tiny_encoder()
    x = packed(encoder)
    trainer = ConSERT(encoder, views=("none", "none"))
    z = mean_pool(encoder, x)
    expected = nt_xent_loss(z, z, temperature=0.1)
    got = trainer.compute_contrastive_loss({"sentence": x}, training=True)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    # Encoder dropout off by default: the step is deterministic.
    again = trainer.compute_contrastive_loss({"sentence": x}, training=True)
    np.testing.assert_allclose(got, again, rtol=1e-6)


def test_encoder_dropout_switch():
    encoder = make_tiny_encoder()
    x = packed(encoder)
    trainer = ConSERT(encoder, views=("none", "none"), encoder_dropout=True)
    a = trainer.compute_contrastive_loss({"sentence": x}, training=True)
    b = trainer.compute_contrastive_loss({"sentence": x}, training=True)
    assert not np.isclose(float(a), float(b))


def test_views_are_identity_when_not_training():
    encoder = make_tiny_encoder()
    x = packed(encoder)
    trainer = ConSERT(encoder)  # shuffle + feature cutoff
    z = mean_pool(encoder, x)
    got = trainer.compute_contrastive_loss({"sentence": x}, training=False)
    np.testing.assert_allclose(got, nt_xent_loss(z, z, temperature=0.1), rtol=1e-5)
    train_loss = trainer.compute_contrastive_loss({"sentence": x}, training=True)
    assert float(train_loss) > float(got)


def test_feature_cutoff_acts_on_the_embedding_output():
    encoder = make_tiny_encoder()
    x = packed(encoder)
    view = make_view("feature_cutoff", rate=0.25, seed=3)
    states, mask = view_hidden_states(encoder, x, view, training=True, encoder_dropout=False)
    emb = states[0].numpy()
    clean = encoder.embed_tokens(x["token_ids"], x["segment_ids"]).numpy()
    for row in range(len(SENTENCES)):
        zero_cols = np.where(np.all(emb[row] == 0.0, axis=0))[0]
        assert len(zero_cols) == 8  # int(0.25 * 32) whole hidden dimensions
        keep = np.setdiff1d(np.arange(32), zero_cols)
        np.testing.assert_array_equal(emb[row][:, keep], clean[row][:, keep])
    np.testing.assert_array_equal(mask, x["padding_mask"])


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

    states, _ = view_hidden_states(encoder, x, Spy(), training=True, encoder_dropout=False)
    real = x["padding_mask"].numpy().astype(bool)
    pin, pout = calls["in"].numpy(), calls["out"].numpy()
    for row in range(len(SENTENCES)):
        assert sorted(pout[row][real[row]]) == sorted(pin[row][real[row]])
    expected = encoder.embed_tokens(x["token_ids"], x["segment_ids"], calls["out"])
    np.testing.assert_allclose(states[0], expected, rtol=1e-6)


def test_span_cutoff_mask_reaches_layers_and_pooling():
    encoder = make_tiny_encoder()
    x = packed(encoder)
    view = make_view("span_cutoff", rate=0.5, seed=2)
    states, mask = view_hidden_states(encoder, x, view, training=True, encoder_dropout=False)
    assert mask.numpy().sum() < x["padding_mask"].numpy().sum()
    # The final states equal running the layers with the returned mask.
    h = states[0]
    for layer in encoder.backbone.transformer_layers:
        h = layer(h, padding_mask=mask, training=False)
    np.testing.assert_allclose(states[-1], h, rtol=1e-5, atol=1e-6)


def _nli_batch(encoder):
    from keras_sentemb.data.nli import triplets_to_nli_pairs

    rows = triplets_to_nli_pairs(TRIPLETS)
    return {
        "premise": encoder.preprocess(tf.constant([r[0] for r in rows]), 16),
        "hypothesis": encoder.preprocess(tf.constant([r[1] for r in rows]), 16),
        "label": tf.constant([r[2] for r in rows]),
    }


def test_joint_loss_is_ce_plus_alpha_contrastive():
    encoder = make_tiny_encoder()
    data = _nli_batch(encoder)
    trainer = ConSERT(encoder, views=("none", "none"), mode="joint", alpha=0.15)
    u, v = mean_pool(encoder, data["premise"]), mean_pool(encoder, data["hypothesis"])
    logits = trainer.classifier(tf.concat([u, v, tf.abs(u - v)], -1))
    ce = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(data["label"], logits))
    both = tf.concat([u, v], 0)
    expected = ce + 0.15 * nt_xent_loss(both, both, temperature=0.1)
    loss, extras = trainer.compute_contrastive_loss(data, training=True)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    np.testing.assert_allclose(extras["ce_loss"], ce, rtol=1e-5)


def test_adversarial_view_in_joint_mode():
    encoder = make_tiny_encoder()
    data = _nli_batch(encoder)
    trainer = ConSERT(encoder, views=("none", "adversarial"), mode="joint", noise_norm=5.0)
    with tf.GradientTape() as tape:
        loss, extras = trainer.compute_contrastive_loss(data, training=True)
    grads = tape.gradient(loss, trainer.trainable_variables)
    assert np.isfinite(float(loss))
    assert all(g is None or np.all(np.isfinite(tf.convert_to_tensor(g).numpy())) for g in grads)
    # Adversarial views differ from clean ones, so the contrastive part is
    # larger than with two identical views.
    clean = ConSERT(encoder, views=("none", "none"), mode="joint")
    clean.classifier.set_weights(trainer.classifier.get_weights())
    _, clean_extras = clean.compute_contrastive_loss(data, training=True)
    assert float(extras["contrastive_loss"]) > float(clean_extras["contrastive_loss"])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"views": ("shuffle", "blur")}, "views"),
        ({"views": ("shuffle", "adversarial")}, "supervised"),
        ({"mode": "sup_unsup"}, "fit_consert"),
        ({"temperature": 0.0}, "temperature"),
    ],
)
def test_invalid_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ConSERT(make_tiny_encoder(), **kwargs)


def test_fit_consert_unsup_saves_and_selects(tmp_path):
    from keras_sentemb.models import SentenceEncoder

    out = tmp_path / "consert"
    encoder = fit_consert(
        SENTENCES * 3, model=make_tiny_encoder(), output=str(out), steps=4,
        batch_size=8, learning_rate=1e-3, max_length=16, dev=DEV, eval_every=2,
        verbose=0,
    )
    assert encoder.pooling == "mean"
    loaded = SentenceEncoder.from_preset(str(out))
    np.testing.assert_allclose(
        loaded.encode(["hello world"]), encoder.encode(["hello world"]), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("mode", ["joint_unsup", "sup"])
def test_fit_consert_supervised_modes(mode):
    encoder = make_tiny_encoder()
    before = [w.copy() for w in encoder.get_weights()]
    out = fit_consert(
        SENTENCES * 2, model=encoder, mode=mode, supervised=TRIPLETS * 2,
        steps=2, supervised_steps=2, batch_size=4, learning_rate=1e-3,
        max_length=16, dev=None, verbose=0,
    )
    assert out is encoder
    assert any(not np.allclose(a, b) for a, b in zip(before, encoder.get_weights()))


def test_fit_consert_errors():
    with pytest.raises(ValueError, match="mode"):
        fit_consert(SENTENCES, model=make_tiny_encoder(), mode="semi")
    with pytest.raises(ValueError, match="supervised"):
        fit_consert(SENTENCES, model=make_tiny_encoder(), mode="joint_unsup", dev=None)
    with pytest.raises(ValueError, match="batch_size"):
        fit_consert(SENTENCES, model=make_tiny_encoder(), batch_size=0)


def test_cli_train_consert(tmp_path, monkeypatch):
    import keras_sentemb.api as api
    from keras_sentemb import cli

    monkeypatch.setattr(api, "fit_consert", fit_consert, raising=False)
    model_dir = tmp_path / "tiny"
    make_tiny_encoder().save(str(model_dir))
    train = tmp_path / "train.txt"
    train.write_text("\n".join(SENTENCES * 2) + "\n")
    out = tmp_path / "out"
    rc = cli.main([
        "train", "consert", "--model", str(model_dir), "--train-file", str(train),
        "--output", str(out), "--steps", "2", "--batch-size", "4", "--max-length", "16",
        "--dev", "none", "--views", "token_cutoff,dropout", "--learning-rate", "1e-4",
    ])
    assert rc == 0 and (out).exists()
