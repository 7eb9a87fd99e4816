"""Layer normalisation as one fused kernel each way in training (`kernels/fused_layer_norm.py`)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.kernels import fused_layer_norm
from keras_sentemb.kernels.fused_layer_norm import install_fused_layer_norm, is_fused, layer_norm
from tests.conftest import make_tiny_encoder, run_in_graph, spy_calls
from tests.helpers.models import make_tiny_roberta

SENTS = ["a man is playing the guitar", "the dog runs in the park", "a"]


def rel(a, b, scale=0.0):
    """Relative error of `b` against `a`; `scale` floors the norm (gradients that are ~0)."""
    a = tf.cast(tf.convert_to_tensor(a), tf.float64)
    b = tf.cast(tf.convert_to_tensor(b), tf.float64)
    return float(tf.norm(a - b) / max(float(tf.norm(a)), scale))


def keras_layer(width=48, epsilon=1e-12, seed=0):
    layer = keras.layers.LayerNormalization(epsilon=epsilon)
    layer.build([None, width])
    rng = np.random.default_rng(seed)
    layer.gamma.assign(1.0 + 0.2 * rng.standard_normal(width).astype("float32"))
    layer.beta.assign(0.1 * rng.standard_normal(width).astype("float32"))
    return layer


def value_and_grads(fn, layer, x, dy):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    return [y, *tape.gradient(y, [x, layer.gamma, layer.beta],
                              output_gradients=tf.cast(dy, y.dtype))]


@pytest.mark.parametrize("shape", [(4, 9, 48), (7, 48), (1, 1, 48), (33, 48)])
def test_float32_values_and_gradients_equal_keras(shape):
    layer = keras_layer()
    x = tf.random.stateless_normal(shape, [1, 2]) * 3.0 + 1.0
    dy = tf.random.stateless_normal(shape, [3, 4])
    ref = value_and_grads(layer, layer, x, dy)
    fused = tf.function(lambda x, dy: value_and_grads(
        lambda t: layer_norm(t, layer.gamma, layer.beta, layer.epsilon), layer, x, dy))
    got = fused(x, dy)
    for a, b in zip(ref, got):
        assert b.dtype == tf.float32
        assert rel(a, b) < 1e-5


def test_bfloat16_is_the_float32_result_to_bfloat16_rounding():
    layer = keras_layer()
    x = tf.random.stateless_normal((8, 16, 48), [5, 6]) * 2.0
    dy = tf.random.stateless_normal((8, 16, 48), [7, 8])
    xb = tf.cast(x, tf.bfloat16)
    ref = value_and_grads(layer, layer, tf.cast(xb, tf.float32), dy)
    got = value_and_grads(lambda t: layer_norm(t, layer.gamma, layer.beta, layer.epsilon),
                          layer, xb, dy)
    assert got[0].dtype == tf.bfloat16 and got[1].dtype == tf.bfloat16
    assert got[2].dtype == tf.float32 and got[3].dtype == tf.float32  # no cast back
    for a, b in zip(ref, got):
        assert rel(a, b) < 1e-2  # bfloat16 keeps 8 bits: 2**-8 = 4e-3 per element
    # The output is the float32 result rounded once.
    np.testing.assert_array_equal(
        tf.bitcast(got[0], tf.uint16).numpy(),
        tf.bitcast(tf.cast(layer_norm(xb, layer.gamma, layer.beta, layer.epsilon,
                                      dtype="float32"), tf.bfloat16), tf.uint16).numpy())


def test_rows_that_are_constant_are_finite():
    layer = keras_layer(epsilon=1e-12)
    x = tf.ones((3, 48))
    y, dx, dgamma, dbeta = value_and_grads(
        lambda t: layer_norm(t, layer.gamma, layer.beta, layer.epsilon), layer, x, tf.ones_like(x))
    for t in (y, dx, dgamma, dbeta):
        assert bool(tf.reduce_all(tf.math.is_finite(t)))
    np.testing.assert_allclose(y.numpy(), np.broadcast_to(layer.beta.numpy(), (3, 48)), atol=1e-6)


@pytest.mark.filterwarnings("ignore:You passed `rms_scaling=True`")
def test_only_plain_last_axis_layer_norms_are_patched():
    plain = keras.layers.LayerNormalization()
    rms = keras.layers.LayerNormalization(rms_scaling=True)
    uncentred = keras.layers.LayerNormalization(center=False)
    two_axes = keras.layers.LayerNormalization(axis=[1, 2])
    inputs = keras.Input((5, 8))
    outputs = [layer(inputs) for layer in (plain, rms, uncentred, two_axes)]
    model = keras.Model(inputs, outputs)
    assert install_fused_layer_norm(model) == 1
    assert is_fused(plain) and not any(is_fused(x) for x in (rms, uncentred, two_axes))
    assert install_fused_layer_norm(model) == 0  # idempotent


@pytest.mark.parametrize("make", [make_tiny_encoder, make_tiny_roberta], ids=["bert", "roberta"])
def test_encoder_training_uses_the_kernels_with_keras_values(make, monkeypatch):
    encoder = make()
    norms = [layer for layer in encoder.backbone._flatten_layers()
             if isinstance(layer, keras.layers.LayerNormalization)]
    assert norms and all(is_fused(layer) for layer in norms)
    calls = spy_calls(monkeypatch, fused_layer_norm, "_forward")
    x = encoder.preprocess(tf.constant(SENTS))
    variables = encoder.trainable_variables

    def vectors_and_grads():
        with tf.GradientTape() as tape:
            vectors = encoder(x, training=False)
            loss = tf.reduce_sum(vectors * tf.range(1.0, 1.0 + vectors.shape[-1]))
        return [vectors, *tape.gradient(loss, variables)]

    fused = vectors_and_grads()
    assert len(calls) == len(norms)
    for layer in norms:
        layer.__dict__.pop("call")
    keras_own = vectors_and_grads()
    assert len(calls) == len(norms)
    # Some gradients are zero up to rounding (~1e-10): judge them on the gradients' scale.
    scale = 1e-3 * max(float(tf.norm(tf.convert_to_tensor(g))) for g in keras_own[1:])
    for a, b in zip(keras_own, fused):
        assert rel(a, b, scale) < 1e-5


def test_forward_only_plain_and_the_environment_keep_keras(monkeypatch):
    encoder = make_tiny_encoder()
    calls = spy_calls(monkeypatch, fused_layer_norm, "_forward")
    x = encoder.preprocess(tf.constant(SENTS))
    run_in_graph(lambda: encoder(x), forward_only=True)
    run_in_graph(lambda: encoder(x), plain=True)
    monkeypatch.setenv(fused_layer_norm.DISABLE_ENV, "1")
    encoder(x)
    assert calls == []
    monkeypatch.delenv(fused_layer_norm.DISABLE_ENV)
    encoder(x)
    assert calls


def test_float64_inputs_keep_keras_precision(monkeypatch):
    layer = keras.layers.LayerNormalization(dtype="float64")
    layer.build([None, 8])
    install_fused_layer_norm(layer)
    calls = spy_calls(monkeypatch, fused_layer_norm, "_forward")
    x = tf.constant(np.random.default_rng(0).standard_normal((3, 8)) * 1e3 + 1e6)
    y = layer(x)
    assert calls == [] and y.dtype == tf.float64
    want = (x - tf.reduce_mean(x, -1, keepdims=True)) / tf.math.reduce_std(x, -1, keepdims=True)
    np.testing.assert_allclose(y.numpy(), want.numpy(), atol=1e-6)


def test_mixed_precision_training_step_reads_float32_scales():
    encoder = make_tiny_encoder().clone(dtype="mixed_bfloat16")
    x = encoder.preprocess(tf.constant(SENTS))
    norm = encoder.backbone.get_layer("embeddings_layer_norm")
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(encoder(x, training=True), tf.float32))
    dgamma = tape.gradient(loss, norm.gamma)
    assert norm(tf.ones((2, 3, norm.gamma.shape[0]), tf.bfloat16)).dtype == tf.bfloat16
    assert dgamma.dtype == tf.float32 and bool(tf.reduce_all(tf.math.is_finite(dgamma)))


@pytest.mark.parametrize("dtype,rank", [("float32", 2), ("float32", 3), ("bfloat16", 2)])
def test_encoding_graphs_take_onednns_layer_norm_with_keras_values(dtype, rank, monkeypatch):
    from keras_sentemb import compat

    layer = keras.layers.LayerNormalization(epsilon=1e-12, dtype=dtype)
    layer.build([None, 16])
    layer.gamma.assign(np.linspace(0.5, 2.0, 16))
    layer.beta.assign(np.linspace(-1.0, 1.0, 16))
    install_fused_layer_norm(layer)
    shape = (4, 16) if rank == 2 else (2, 3, 16)
    x = tf.constant(np.random.default_rng(rank).standard_normal(shape) * 3 + 1, dtype)
    keras_own = type(layer).call(layer, x)
    calls = spy_calls(monkeypatch, compat, "onednn_layer_norm")
    got = run_in_graph(lambda: layer(x), forward_only=True)
    assert calls == [1] and got.dtype == keras_own.dtype
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    assert rel(got, keras_own, 1.0) < tolerance
    # Not in exported float graphs (they also run where oneDNN is off) ...
    run_in_graph(lambda: layer(x), plain=True)
    run_in_graph(lambda: layer(x), forward_only=True, serving=True)
    assert calls == [1]
    # ... but in int8 serving graphs, which need oneDNN anyway; and never without oneDNN.
    run_in_graph(lambda: layer(x), forward_only=True, serving=True, int8=True)
    assert calls == [1, 1]
    monkeypatch.setattr(compat, "onednn_enabled", lambda: False)
    run_in_graph(lambda: layer(x), forward_only=True)
    assert calls == [1, 1]
