"""Mixed-precision training in place: the switched encoder is the bfloat16 clone, then itself again."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_sentemb
from keras_sentemb.kernels import native_bfloat16
from keras_sentemb.kernels import precision as precisions
from keras_sentemb.models.compute_policy import switch_compute_policy
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import SENTENCES


def _policies(encoder):
    return {layer.dtype_policy.name
            for layer in encoder.backbone._flatten_layers(include_self=True, recursive=True)
            if not isinstance(layer, keras.layers.InputLayer)}


def _loss_and_gradients(encoder, tokens):
    with tf.GradientTape() as tape:
        vectors = tf.cast(encoder(tokens, training=False), "float32")
        loss = tf.reduce_sum(tf.square(vectors @ tf.transpose(vectors)))
    variables = encoder.backbone.trainable_variables
    return loss, tape.gradient(loss, variables)


def test_a_switched_encoder_computes_exactly_as_its_mixed_clone():
    encoder = make_tiny_encoder(dropout=0.0)
    tokens = encoder.preprocess(SENTENCES[:6])
    clone = encoder.clone(dtype="mixed_bfloat16")
    float32 = np.asarray(encoder(tokens, training=False))
    restore = switch_compute_policy(encoder, "mixed_bfloat16")
    assert _policies(encoder) == {"mixed_bfloat16"}
    loss, gradients = _loss_and_gradients(encoder, tokens)
    clone_loss, clone_gradients = _loss_and_gradients(clone, tokens)
    # The same graph on the same float32 weights: the same bits.
    np.testing.assert_array_equal(loss.numpy(), clone_loss.numpy())
    for mine, theirs in zip(gradients, clone_gradients):
        np.testing.assert_array_equal(tf.convert_to_tensor(mine).numpy(),
                                      tf.convert_to_tensor(theirs).numpy())
    assert {v.dtype for v in encoder.backbone.weights} == {"float32"}
    assert not np.array_equal(np.asarray(encoder(tokens, training=False)), float32)
    restore()
    restore()  # a second call does nothing
    assert _policies(encoder) == {"float32"}
    np.testing.assert_array_equal(np.asarray(encoder(tokens, training=False)), float32)


def test_only_policies_with_float32_variables_train_in_place():
    with pytest.raises(ValueError, match="float32 variables"):
        switch_compute_policy(make_tiny_encoder(), "bfloat16")


@pytest.fixture
def native(monkeypatch):
    """This CPU taken as one that computes bfloat16 natively, nothing pinned."""
    monkeypatch.delenv(precisions.PIN_ENV, raising=False)
    monkeypatch.setattr(native_bfloat16, "effective_precision", lambda p: p)


def test_fit_in_bfloat16_trains_the_callers_encoder_and_leaves_it_float32(native):
    encoder = make_tiny_encoder()
    before = [w.copy() for w in encoder.get_weights()]
    kept = keras_sentemb.fit_simcse(SENTENCES, model=encoder, steps=2, batch_size=4,
                                    max_length=16, dev=None, verbose=0,
                                    precision="bfloat16", seed=0)
    assert kept is encoder
    assert kept.training_report.resolved["precision"] == "bfloat16"
    assert _policies(kept) == {"float32"}
    assert any(not np.array_equal(a, b) for a, b in zip(before, kept.get_weights()))


def test_an_interrupted_bfloat16_run_leaves_the_encoder_float32(native, monkeypatch):
    from keras_sentemb.pipelines.scaffold import FitScaffold

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(FitScaffold, "fit", interrupted)
    encoder = make_tiny_encoder()
    with pytest.raises(KeyboardInterrupt):
        keras_sentemb.fit_simcse(SENTENCES, model=encoder, steps=2, batch_size=4,
                                 dev=None, verbose=0, precision="bfloat16")
    assert _policies(encoder) == {"float32"}
