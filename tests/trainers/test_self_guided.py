"""Tests of self-guided contrastive learning (losses, trainer, fit_self_guided)."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.losses.self_guided import sg_base_loss
from keras_sentemb.losses.self_guided import sg_opt1_loss
from keras_sentemb.losses.self_guided import sg_opt2_loss
from keras_sentemb.losses.self_guided import sg_opt3_loss
from keras_sentemb.models.pooling import masked_max
from keras_sentemb.models.pooling import masked_mean
from keras_sentemb.trainers.self_guided import SelfGuided
from keras_sentemb.trainers.self_guided import embedding_block_layers
from keras_sentemb.trainers.self_guided import fit_self_guided
from tests.conftest import make_tiny_encoder

TAU = 0.1
SENTENCES = [
    "a man is playing guitar", "the dog runs in the park", "a cat sits on the mat",
    "the woman plays piano", "a man plays the piano", "the cat runs",
    "hello world", "a dog sits in the cafe",
]


# ------------------------------------------------------------ numpy references
def _cos(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return a @ b / (np.linalg.norm(a) * np.linalg.norm(b))


def _phi(a, b, tau=TAU):
    return np.exp(_cos(a, b) / tau)


def ref_base(c, h, tau=TAU):
    x = list(c) + list(h)
    b = len(c)
    total = 0.0
    for m in range(2 * b):
        pos = x[(m + b) % (2 * b)]
        den = sum(_phi(x[m], x[k], tau) for k in range(2 * b) if k != m)
        total += -np.log(_phi(x[m], pos, tau) / den)
    return total / (2 * b)


def ref_opt1(c, h, tau=TAU):
    b = len(c)
    total = 0.0
    for i in range(b):
        num = _phi(c[i], h[i], tau)
        den = num + sum(
            _phi(c[i], c[j], tau) + _phi(c[i], h[j], tau) for j in range(b) if j != i
        )
        total += -np.log(num / den)
    return total / b


def ref_opt2(c, h, tau=TAU):
    b = len(c)
    total = 0.0
    for i in range(b):
        num = _phi(c[i], h[i], tau)
        den = sum(_phi(c[i], h[j], tau) for j in range(b))
        total += -np.log(num / den)
    return total / b


def ref_opt3(c, hv, tau=TAU):
    b, v = hv.shape[:2]
    total = 0.0
    for i in range(b):
        for k in range(v):
            num = _phi(c[i], hv[i, k], tau)
            den = num + sum(
                _phi(c[i], hv[m, n], tau) for m in range(b) if m != i for n in range(v)
            )
            total += -np.log(num / den)
    return total / (b * v)


# Hand-made vectors: 3 sentences, 4 dims, 2 views each.
C = np.array([[1.0, 0.0, 0.0, 0.5], [0.0, 2.0, 0.0, 0.0], [1.0, 1.0, 1.0, -1.0]], np.float32)
H = np.array([[0.9, 0.1, 0.0, 0.4], [0.2, 1.0, -0.3, 0.0], [1.0, 0.5, 2.0, -1.0]], np.float32)
HV = np.stack([H, np.array([[1.0, 0.5, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0], [0.3, 0.3, 1.0, 0.0]], np.float32)], axis=1)


@pytest.mark.parametrize(
    "fn,ref", [(sg_base_loss, ref_base), (sg_opt1_loss, ref_opt1), (sg_opt2_loss, ref_opt2)]
)
def test_pair_losses_match_closed_form(fn, ref):
    got = float(fn(C, H, temperature=TAU))
    np.testing.assert_allclose(got, ref(C, H), rtol=1e-5)


def test_opt3_matches_closed_form():
    got = float(sg_opt3_loss(C, HV, temperature=TAU))
    np.testing.assert_allclose(got, ref_opt3(C, HV), rtol=1e-5)
    per_term = sg_opt3_loss(C, HV, temperature=TAU, reduction="none")
    assert per_term.shape == (3, 2)


def test_one_hot_closed_forms_at_paper_temperature():
    # c_i = h_i = e_i: positive cosine 1, every negative cosine 0.
    b, tau = 4, 0.01
    e = np.eye(b, dtype=np.float32)
    expected_opt2 = np.log1p((b - 1) * np.exp(-1 / tau))
    expected_opt1 = np.log1p(2 * (b - 1) * np.exp(-1 / tau))
    np.testing.assert_allclose(float(sg_opt2_loss(e, e, tau)), expected_opt2, atol=1e-7)
    np.testing.assert_allclose(float(sg_opt1_loss(e, e, tau)), expected_opt1, atol=1e-7)
    np.testing.assert_allclose(float(sg_base_loss(e, e, tau)), expected_opt1, atol=1e-7)
    # Two identical views per sentence: the other own view is not a negative.
    views = np.stack([e, e], axis=1)
    expected_opt3 = np.log1p(2 * (b - 1) * np.exp(-1 / tau))
    np.testing.assert_allclose(float(sg_opt3_loss(e, views, tau)), expected_opt3, atol=1e-7)
    # Positive orthogonal to c (cos 0), negatives cos 0 too: log(1 + (b-1)V).
    rolled = np.roll(e, 1, axis=0)
    np.testing.assert_allclose(
        float(sg_opt3_loss(e, np.stack([rolled] * 3, 1), 1.0)),
        # positive h_{i,k} = e_{i-1}: cos 0 except negatives m = i+1 -> cos 1
        np.log(1 + 3 * np.e + 3 * 2),
        rtol=1e-6,
    )


def test_opt3_with_one_view_equals_opt2():
    np.testing.assert_allclose(
        float(sg_opt3_loss(C, H[:, None, :], 1.0)), float(sg_opt2_loss(C, H, 1.0)), rtol=1e-5
    )


def test_loss_argument_errors():
    with pytest.raises(ValueError, match="3D"):
        sg_opt3_loss(C, H)
    with pytest.raises(ValueError, match="temperature"):
        sg_opt1_loss(C, H, temperature=0.0)
    with pytest.raises(ValueError, match="same shape"):
        sg_opt1_loss(C, H[:2])


# ---------------------------------------------------------------- the trainer
def _batch(encoder, sentences=SENTENCES):
    return encoder.preprocess(tf.constant(sentences))


def _trainer(loss="opt3", **kwargs):
    encoder = make_tiny_encoder()
    kwargs.setdefault("projection_dim", 16)
    trainer = SelfGuided(encoder, loss=loss, seed=0, **kwargs)
    trainer.compile(optimizer=keras.optimizers.AdamW(1e-2, weight_decay=0.0), jit_compile=False)
    return encoder, trainer


def test_trainer_argument_errors(tiny_encoder):
    with pytest.raises(ValueError, match="loss"):
        SelfGuided(tiny_encoder, loss="opt4")
    with pytest.raises(ValueError, match="view_pooling"):
        SelfGuided(tiny_encoder, view_pooling="cls")
    with pytest.raises(ValueError, match="min_layer"):
        SelfGuided(tiny_encoder, min_layer=3)


@pytest.mark.parametrize("pooling,fn", [("max", masked_max), ("mean", masked_mean)])
def test_views_pool_every_frozen_layer(pooling, fn):
    encoder = make_tiny_encoder()
    trainer = SelfGuided(encoder, view_pooling=pooling, min_layer=1, projection_dim=8)
    batch = _batch(encoder)
    views = trainer.views(batch).numpy()
    states = trainer.frozen_encoder.hidden_states(batch, training=False)
    assert views.shape == (len(SENTENCES), 2, 32)  # layers 1 and 2
    for k in (1, 2):
        np.testing.assert_allclose(
            views[:, k - 1], fn(states[k], batch["padding_mask"]).numpy(), atol=1e-6
        )
    sampled = trainer.sample_views(tf.constant(views)).numpy()
    for i in range(len(SENTENCES)):
        assert any(np.allclose(sampled[i], views[i, k]) for k in range(2))


@pytest.mark.parametrize("loss", ["opt3", "base"])
def test_training_keeps_frozen_parts_fixed(loss):
    encoder, trainer = _trainer(loss)
    assert encoder.pooling == "cls"
    frozen_before = [np.array(w) for w in trainer.frozen_encoder.weights]
    embed_layers = embedding_block_layers(encoder.backbone)
    embed_before = [np.array(w) for layer in embed_layers for w in layer.weights]
    layers_before = [np.array(w) for w in encoder.backbone.transformer_layers[0].weights]
    assert not trainer.frozen_encoder.trainable_weights
    batch = _batch(encoder)
    for _ in range(3):
        logs = trainer.train_step(batch)
    assert np.isfinite(float(logs["loss"]))
    for before, w in zip(frozen_before, trainer.frozen_encoder.weights):
        np.testing.assert_array_equal(before, np.array(w))
    embed_after = [np.array(w) for layer in embed_layers for w in layer.weights]
    for before, after in zip(embed_before, embed_after):
        np.testing.assert_array_equal(before, after)
    changed = [
        not np.array_equal(b, np.array(w))
        for b, w in zip(layers_before, encoder.backbone.transformer_layers[0].weights)
    ]
    assert any(changed)
    assert float(logs["reg"]) > 0


def test_regulariser_value_and_gradient():
    encoder, trainer = _trainer(reg_weight=0.1)
    assert float(trainer.regularization()) == 0.0
    rng = np.random.default_rng(0)
    target = encoder.backbone.transformer_layers[1].weights[0]
    delta = rng.normal(size=target.shape).astype(np.float32)
    target.assign(target + delta)
    np.testing.assert_allclose(
        float(trainer.regularization()), np.sum(delta.astype(np.float64) ** 2), rtol=1e-5
    )
    trainable = encoder.trainable_weights
    with tf.GradientTape() as tape:
        reg = trainer.reg_weight * trainer.regularization()
    grads = tape.gradient(reg, trainable + trainer.frozen_encoder.weights)
    for var, grad in zip(trainable, grads[: len(trainable)]):
        # d/d theta_T of lambda ||theta_F - theta_T||^2 = 2 lambda (theta_T - theta_F)
        expected = 2 * 0.1 * delta if var is target else np.zeros(var.shape)
        np.testing.assert_allclose(np.asarray(tf.convert_to_tensor(grad)), expected, atol=1e-6)
    # Nothing flows into the frozen copy's weights through the optimizer.
    frozen_ids = {id(v) for v in trainer.frozen_encoder.weights}
    assert not any(id(v) in frozen_ids for v in trainer.trainable_variables)
    # The embedding block is not in the regulariser (frozen: zero difference).
    embed_ids = {id(w) for layer in embedding_block_layers(encoder.backbone) for w in layer.weights}
    assert not any(id(v) in embed_ids for v in trainer.trainable_variables)


def test_loss_is_total_of_sg_and_regulariser():
    encoder, trainer = _trainer("opt2", reg_weight=0.5)
    w = encoder.backbone.transformer_layers[0].weights[0]
    w.assign(w + 0.01)
    total, extras = trainer.compute_contrastive_loss(_batch(encoder), training=False)
    np.testing.assert_allclose(
        float(total), float(extras["sg_loss"]) + 0.5 * float(extras["reg"]), rtol=1e-6
    )


def test_fit_saves_cls_encoder_without_projection_head(tmp_path):
    encoder = make_tiny_encoder()
    n_weights = len(encoder.weights)
    dev = [
        ("a man is playing guitar", "a man plays guitar", 4.0),
        ("the dog runs", "a cat sits", 1.0),
        ("the woman plays piano", "a woman is playing piano", 4.5),
        ("hello world", "the cat", 0.0),
    ]
    out = tmp_path / "sg"
    kept = fit_self_guided(
        SENTENCES * 2, model=encoder, output=str(out), steps=4, batch_size=4,
        projection_dim=24, dev=dev, eval_every=2, verbose=0,
    )
    assert kept is encoder and kept.pooling == "cls"
    config = json.loads((out / "sentemb_config.json").read_text())
    assert config["pooling"] == "cls" and config["projection_dim"] is None
    assert not (out / "sentemb_projection.npz").exists()
    from keras_sentemb.models import SentenceEncoder

    loaded = SentenceEncoder.from_preset(str(out))
    assert loaded.pooling == "cls" and loaded.output_dim == 32
    assert len(loaded.weights) == n_weights
    assert not any(24 in tuple(w.shape) for w in loaded.weights)
    np.testing.assert_allclose(
        loaded.encode(SENTENCES[:3]), kept.encode(SENTENCES[:3]), atol=1e-5
    )


def test_fit_argument_errors():
    with pytest.raises(ValueError, match="loss"):
        fit_self_guided(SENTENCES, model=make_tiny_encoder(), loss="sg-opt")
    with pytest.raises(ValueError, match="batch_size"):
        fit_self_guided(SENTENCES, model=make_tiny_encoder(), batch_size=0)
    with pytest.raises(ValueError):
        fit_self_guided([], model=make_tiny_encoder())


def test_cli_flags_mirror_fit_arguments(monkeypatch):
    import keras_sentemb.api as api
    from keras_sentemb import cli

    monkeypatch.setattr(api, "fit_self_guided", fit_self_guided, raising=False)
    parser, fit = cli.method_option_parser("sg")
    options = parser.parse_args(
        ["--loss", "opt1", "--view-pooling", "mean", "--no-freeze-embeddings",
         "--reg-weight", "0.2", "--min-layer", "1", "--dev", "none"]
    )
    assert vars(options) == {
        "loss": "opt1", "view_pooling": "mean", "freeze_embeddings": False,
        "reg_weight": 0.2, "min_layer": 1, "dev": None,
    }
