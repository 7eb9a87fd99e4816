"""`SelfGuided` trainer: views of the frozen copy, loss closed form, frozen parts, learning."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.models.pooling import masked_max
from keras_sentemb.models.pooling import masked_mean
from keras_sentemb.methods.self_guided.trainer import SelfGuided
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import GUIDED_SENTENCES as SENTENCES
from tests.helpers.self_guided_reference import ref_opt3
from tests.numeric import assert_close_vectors


def _batch(encoder, sentences=SENTENCES):
    return {"sentence": encoder.preprocess(tf.constant(sentences))}


def _trainer(loss="opt3", lr=1e-2, **kwargs):
    encoder = make_tiny_encoder()
    kwargs.setdefault("projection_dim", 16)
    trainer = SelfGuided(encoder, loss=loss, seed=0, **kwargs)
    trainer.compile(optimizer=keras.optimizers.AdamW(lr, weight_decay=0.0))
    return encoder, trainer


def _embedding_weights(encoder):
    return [w for layer in encoder.adapter.embedding_block_layers() for w in layer.weights]


def test_trainer_argument_errors(tiny_encoder):
    with pytest.raises(ValueError, match="loss"):
        SelfGuided(tiny_encoder, loss="opt4")
    with pytest.raises(ValueError, match="view_pooling"):
        SelfGuided(tiny_encoder, view_pooling="cls")
    with pytest.raises(ValueError, match="min_layer"):
        SelfGuided(tiny_encoder, min_layer=3)
    with pytest.raises(ValueError, match="pooling"):
        SelfGuided(tiny_encoder, pooling="middle")


@pytest.mark.parametrize("pooling,fn", [("max", masked_max), ("mean", masked_mean)])
def test_views_pool_every_frozen_layer(pooling, fn):
    encoder = make_tiny_encoder()
    trainer = SelfGuided(encoder, view_pooling=pooling, min_layer=1, projection_dim=8)
    batch = _batch(encoder)["sentence"]
    views = trainer.views(batch).numpy()
    states = trainer.frozen_encoder.hidden_states(batch, training=False)
    assert views.shape == (len(SENTENCES), 2, 32)  # layers 1 and 2
    for k in (1, 2):
        assert_close_vectors(
            views[:, k - 1], fn(states[k], batch["padding_mask"]).numpy(), rtol=1e-5
        )
    sampled = trainer.sample_views(tf.constant(views)).numpy()
    for i in range(len(SENTENCES)):
        assert any(np.allclose(sampled[i], views[i, k]) for k in range(2))


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_sentence_vectors_use_the_trainers_pooling_not_the_encoders(pooling):
    encoder = make_tiny_encoder()
    trainer = SelfGuided(encoder, pooling=pooling, projection_dim=8)
    assert encoder.declared_pooling is None  # the trainer declares nothing
    x = _batch(encoder)["sentence"]
    assert_close_vectors(
        trainer.sentence_vectors(x, training=False).numpy(),
        encoder(x, training=False, pooling=pooling).numpy(),
        rtol=1e-5,
    )


def test_loss_equals_closed_form():
    """SG-OPT + lambda ||theta_F - theta_T||^2, from numpy pieces."""
    encoder, trainer = _trainer("opt3", reg_weight=0.5)
    rng = np.random.default_rng(0)
    target = encoder.backbone.transformer_layers[0].weights[0]
    delta = 0.01 * rng.normal(size=target.shape).astype(np.float32)
    target.assign(target + delta)
    data = _batch(encoder)
    x = data["sentence"]
    mask = x["padding_mask"].numpy().astype(bool)
    frozen_states = [s.numpy() for s in trainer.frozen_encoder.hidden_states(x)]
    views = np.stack(
        [np.stack([s[i][mask[i]].max(axis=0) for i in range(len(SENTENCES))]) for s in frozen_states],
        axis=1,
    )  # [B, L + 1, d], max over real tokens
    cls = encoder.hidden_states(x)[-1].numpy()[:, 0]  # BERT_T's last-layer [CLS]
    head = trainer.projection_head
    fc = head(cls).numpy()
    fh = head(views.reshape(-1, 32)).numpy().reshape(len(SENTENCES), 3, 16)
    reg = float(np.sum(delta.astype(np.float64) ** 2))
    expected = ref_opt3(fc, fh, 0.01) + 0.5 * reg
    terms = trainer.compute_loss_terms(data, training=False)
    total, extras = terms.loss, terms.metrics
    np.testing.assert_allclose(float(extras["reg"]), reg, rtol=1e-4)
    np.testing.assert_allclose(float(total), expected, rtol=1e-4)


@pytest.mark.parametrize("loss", ["opt3", "base"])
def test_training_lowers_the_loss_and_keeps_frozen_parts_fixed(loss):
    encoder, trainer = _trainer(loss, lr=1e-3)
    data = _batch(encoder)
    frozen_before = [np.array(w) for w in trainer.frozen_encoder.weights]
    embed_before = [np.array(w) for w in _embedding_weights(encoder)]
    assert not trainer.frozen_encoder.trainable_weights
    before = float(trainer.compute_loss_terms(data, training=False).loss)
    for _ in range(5):
        logs = trainer.train_step(data)
    assert float(logs["nonfinite"]) == 0.0
    after = float(trainer.compute_loss_terms(data, training=False).loss)
    assert after < 0.9 * before, (before, after)
    for b, w in zip(frozen_before, trainer.frozen_encoder.weights):
        np.testing.assert_array_equal(b, np.array(w))
    for b, w in zip(embed_before, _embedding_weights(encoder)):
        np.testing.assert_array_equal(b, np.array(w))
    assert int(trainer.optimizer.iterations) == 5


def test_unfrozen_embeddings_are_trained():
    encoder, trainer = _trainer(freeze_embeddings=False)
    trainable = {id(v) for v in trainer.trainable_variables}
    assert all(id(w) in trainable for w in _embedding_weights(encoder))


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
    # The embedding block is frozen: not trained, not in the regulariser.
    embed_ids = {id(w) for w in _embedding_weights(encoder)}
    assert not any(id(v) in embed_ids for v in trainer.trainable_variables)


def test_without_projection_head_the_loss_acts_on_the_raw_vectors():
    """`projection_dim=None` (the paper's ablation): f is the identity, and it still trains."""
    encoder, trainer = _trainer("opt3", projection_dim=None, reg_weight=0.0, lr=1e-3)
    assert trainer.projection_head is None and trainer.get_config()["config"]["projection_dim"] is None
    assert not [w for w in trainer.weights if "sg_projection" in w.path]
    data = _batch(encoder)
    x = data["sentence"]
    views = trainer.views(x).numpy()
    cls = trainer.sentence_vectors(x, training=False).numpy()
    before = trainer.compute_loss_terms(data, training=False).loss
    np.testing.assert_allclose(float(before), ref_opt3(cls, views, 0.01), rtol=1e-4)
    for _ in range(5):
        logs = trainer.train_step(data)
    assert float(logs["nonfinite"]) == 0.0
    after = float(trainer.compute_loss_terms(data, training=False).loss)
    assert after < float(before), (float(before), after)


def test_ablations_no_head_layer_range_and_separate_view_inputs():
    """Without the projection head the loss compares raw vectors; views of layers
    min_layer..max_layer come from the `positive` input when the batch has one."""
    encoder, trainer = _trainer("opt3", projection_dim=None, min_layer=1, max_layer=1,
                                reg_weight=0.0)
    assert trainer.projection_head is None and trainer.num_views == 1
    assert trainer.get_config()["config"]["projection_dim"] is None
    sentence = _batch(encoder)["sentence"]
    positive = _batch(encoder, SENTENCES[::-1])["sentence"]
    views = trainer.views(positive).numpy()
    states = trainer.frozen_encoder.hidden_states(positive, training=False)
    assert_close_vectors(views[:, 0], masked_max(states[1], positive["padding_mask"]), rtol=1e-5)
    cls = encoder.hidden_states(sentence)[-1].numpy()[:, 0]
    expected = ref_opt3(cls, views, 0.01)
    total = trainer.compute_loss_terms(
        {"sentence": sentence, "positive": positive}, training=False).loss
    np.testing.assert_allclose(float(total), expected, rtol=1e-4)
    with pytest.raises(ValueError, match="max_layer"):
        SelfGuided(encoder, min_layer=2, max_layer=1)
