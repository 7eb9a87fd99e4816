"""Training graphs run each Transformer layer on the real tokens only: keras-hub's values and gradients."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.kernels import unpadded_transformer
from keras_sentemb.kernels.install import install_kernels
from keras_sentemb.kernels.policy import KernelPolicy
from keras_sentemb.kernels.unpadded_transformer import unpadded_call
from tests.conftest import make_tiny_encoder, spy_calls
from tests.helpers.models import make_tiny_roberta, make_transformer_layer, transformer_inputs
from tests.numeric import assert_close_vectors

SENTENCES = ["the man plays the guitar in the park .", "a dog sits on the mat", "hello",
             "the woman is playing the piano and the man plays the guitar"]


def _real_rows(tensor, padding):
    keep = tf.reshape(tf.cast(padding, tf.bool), [-1])
    return tf.boolean_mask(tf.reshape(tensor, [tf.size(keep), -1]), keep).numpy()


@pytest.mark.parametrize("normalize_first", [False, True], ids=["post_ln", "pre_ln"])
def test_unpadded_call_equals_keras_hub_at_real_tokens_and_zero_at_padding(normalize_first):
    layer = make_transformer_layer(normalize_first)
    x, padding = transformer_inputs()
    expected = layer(x, padding_mask=padding, training=False)
    got = unpadded_call(layer, x, padding, training=False)
    assert got.shape == expected.shape
    assert_close_vectors(_real_rows(got, padding), _real_rows(expected, padding), rtol=1e-5)
    pad = tf.logical_not(tf.cast(padding, tf.bool))
    assert not tf.reduce_any(tf.boolean_mask(got, pad) != 0).numpy()


def _padded(encoder):
    """`encoder` with keras-hub's padded layer in training graphs too (its policy rebound)."""
    install_kernels(encoder.backbone, encoder.adapter.transformer_layers,
                    KernelPolicy(unpadded="plain"))
    return encoder


def _vectors_and_gradients(encoder, inputs):
    """Sentence vectors and the gradient of a loss on them, in an (undeclared) training graph."""
    weights = encoder.backbone.trainable_variables

    @tf.function(autograph=False)
    def step():
        with tf.GradientTape() as tape:
            vectors = encoder.sentence_vectors(inputs, "mean", training=False)
            loss = tf.reduce_sum(tf.square(vectors - 0.1))
        return vectors, tape.gradient(loss, weights)

    vectors, gradients = step()
    return vectors.numpy(), [tf.convert_to_tensor(g).numpy() for g in gradients]


@pytest.mark.parametrize("make", [make_tiny_encoder, make_tiny_roberta], ids=["bert", "roberta"])
def test_training_graph_vectors_and_gradients_equal_keras_hubs(make):
    unpadded = make()
    padded = _padded(make())
    inputs = unpadded.preprocess(SENTENCES)
    got_vectors, got_gradients = _vectors_and_gradients(unpadded, inputs)
    want_vectors, want_gradients = _vectors_and_gradients(padded, inputs)
    assert_close_vectors(got_vectors, want_vectors, rtol=1e-5)
    assert len(got_gradients) == len(want_gradients)
    scale = max(float(np.linalg.norm(want)) for want in want_gradients)
    for got, want in zip(got_gradients, want_gradients):
        # The key bias' gradient is zero in exact arithmetic (softmax ignores a shift):
        # rounding noise, compared against the largest gradient's size.
        if np.linalg.norm(want) < 1e-6 * scale:
            assert np.linalg.norm(got) < 1e-5 * scale
            continue
        assert_close_vectors(got.reshape(1, -1), want.reshape(1, -1), rtol=1e-4)


def test_it_runs_only_in_training_graphs_and_under_its_policy(monkeypatch):
    encoder = make_tiny_encoder()
    inputs = encoder.preprocess(SENTENCES)
    calls = spy_calls(monkeypatch, unpadded_transformer, "unpadded_call")
    _vectors_and_gradients(encoder, inputs)
    assert len(calls) == 2  # one per layer, traced once
    encoder.encode(SENTENCES)  # forward-only graph: keras-hub's layer
    assert len(calls) == 2
    plain = _padded(make_tiny_encoder())
    _vectors_and_gradients(plain, inputs)
    assert len(calls) == 2
    monkeypatch.setenv("KERAS_SENTEMB_PLAIN_TRANSFORMER", "1")
    _vectors_and_gradients(make_tiny_encoder(), inputs)
    assert len(calls) == 2
    monkeypatch.delenv("KERAS_SENTEMB_PLAIN_TRANSFORMER")
    # A graph XLA compiles as a whole needs every shape at compile time: keras-hub's layer.
    compiled = make_tiny_encoder()
    weights = compiled.backbone.trainable_variables

    @tf.function(jit_compile=True, autograph=False)
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(compiled.sentence_vectors(inputs, "mean", training=True))
        return tape.gradient(loss, weights)

    assert all(g is not None for g in step())
    assert len(calls) == 2


def test_dropout_keeps_its_rates_on_the_rows(monkeypatch):
    """With dropout on, every dropout of the layer runs, at keras-hub's rates."""
    keras.utils.set_random_seed(3)
    layer = make_transformer_layer(False, width=64)
    rates = []
    real_call = keras.layers.Dropout.call

    def record(self, inputs, training=False):
        outputs = real_call(self, inputs, training=training)
        kept = tf.reduce_mean(tf.cast(tf.not_equal(outputs, 0), tf.float32))
        rates.append((self.rate, float(kept)))
        return outputs

    monkeypatch.setattr(keras.layers.Dropout, "call", record)
    x = tf.random.stateless_normal([8, 40, 64], [1, 2])
    padding = tf.sequence_mask([40, 30, 20, 10, 40, 35, 5, 1], 40)
    out = unpadded_call(layer, x, padding, training=True)
    assert np.isfinite(out.numpy()).all()
    assert [rate for rate, _ in rates] == [0.1, 0.1, 0.1]  # attention probabilities, output, FFN
    for _, kept in rates[1:]:
        assert 0.85 < kept < 0.95


def test_mixed_bfloat16_training_graph_matches_keras_hubs():
    unpadded = make_tiny_encoder().clone(dtype="mixed_bfloat16")
    padded = _padded(make_tiny_encoder().clone(dtype="mixed_bfloat16"))
    inputs = unpadded.preprocess(SENTENCES)
    got, got_gradients = _vectors_and_gradients(unpadded, inputs)
    want, want_gradients = _vectors_and_gradients(padded, inputs)
    assert_close_vectors(got.astype("float32"), want.astype("float32"), cos=0.999, rtol=2e-2)
    assert all(g.dtype == np.float32 for g in got_gradients)
    flat = np.concatenate([g.ravel() for g in got_gradients])
    reference = np.concatenate([g.ravel() for g in want_gradients])
    assert_close_vectors(flat[None], reference[None], cos=0.999, rtol=5e-2)
