"""Dropout from 16-bit random integers: its rate, scale, gradient, seeds and installation."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.kernels import fast_dropout
from keras_sentemb.kernels.fast_dropout import DISABLE_ENV
from keras_sentemb.kernels.fast_dropout import drop_threshold
from keras_sentemb.kernels.fast_dropout import dropout
from keras_sentemb.kernels.fast_dropout import install_fast_dropout
from keras_sentemb.kernels.fast_dropout import random_uint16
from tests.conftest import make_tiny_encoder, run_in_graph, spy_calls
from tests.helpers.models import make_tiny_roberta

SEED = tf.constant([7, 11], tf.int32)


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5])
def test_drops_at_the_rate_and_scales_by_the_inverse_keep_probability(rate):
    x = tf.ones([1000, 1000])
    y = dropout(x, rate, SEED).numpy()
    dropped = (y == 0).mean()
    p = drop_threshold(rate) / 65536
    assert abs(p - rate) <= 0.5 / 65536
    # Binomial(10^6, p): 5 standard deviations.
    assert abs(dropped - p) < 5 * np.sqrt(p * (1 - p) / x.shape.num_elements())
    kept = np.unique(y[y != 0])
    np.testing.assert_allclose(kept, [1 / (1 - p)], rtol=1e-7)
    # Unbiased: E[y] = x.
    assert abs(y.mean() - 1.0) < 5 * np.sqrt(p / (1 - p) / x.shape.num_elements())


def test_both_halves_of_each_draw_are_independent_masks():
    bits = random_uint16([200_000], SEED).numpy().astype(np.int64)
    assert bits.min() >= 0 and bits.max() < 65536
    even, odd = bits[0::2] < 6554, bits[1::2] < 6554  # the two halves of each 32-bit word
    corr = np.corrcoef(even, odd)[0, 1]
    assert abs(corr) < 0.02
    # Uniform over the 16 bits: each byte of the value is uniform.
    counts = np.bincount(bits >> 8, minlength=256)
    assert counts.min() > 0.8 * counts.mean() and counts.max() < 1.2 * counts.mean()


@pytest.mark.parametrize("shape", [[3, 5, 7], [1], [2, 4, 6, 6]])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gradient_is_the_same_mask_and_scale(shape, dtype):
    x = tf.cast(tf.random.stateless_normal(shape, [1, 2]), dtype)
    dy = tf.cast(tf.random.stateless_normal(shape, [3, 4]), dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = dropout(x, 0.4, SEED)
    g = tape.gradient(y, x, output_gradients=dy)
    assert y.dtype == x.dtype and g.dtype == x.dtype and y.shape == x.shape
    keep = (y.numpy() != 0) | (x.numpy() == 0)
    scale = tf.cast(65536 / (65536 - drop_threshold(0.4)), dtype).numpy().astype(np.float32)
    expected = np.where(keep, dy.numpy().astype(np.float32) * scale, 0)
    np.testing.assert_allclose(g.numpy().astype(np.float32), expected, rtol=1e-2 if
                               dtype == "bfloat16" else 1e-6)


def test_same_seed_same_mask_other_seed_other_mask():
    x = tf.ones([64, 64])
    a, b = dropout(x, 0.2, SEED), dropout(x, 0.2, SEED)
    c = dropout(x, 0.2, tf.constant([7, 12]))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # Keras' int64 seed state maps to the same int32 seed as in Keras.
    np.testing.assert_array_equal(dropout(x, 0.2, tf.constant([7, 11], tf.int64)), a)


def test_installed_on_every_dropout_of_the_backbone_and_only_in_training():
    enc = make_tiny_encoder()
    layers = [layer for layer in enc.backbone._flatten_layers()
              if isinstance(layer, keras.layers.Dropout)]
    assert layers and all(fast_dropout._is_fast(layer) for layer in layers)
    assert install_fast_dropout(enc.backbone) == 0  # idempotent
    roberta = make_tiny_roberta()
    assert all(fast_dropout._is_fast(layer) for layer in roberta.backbone._flatten_layers()
               if isinstance(layer, keras.layers.Dropout))
    layer = layers[0]
    x = tf.ones([8, 32])
    np.testing.assert_array_equal(layer(x, training=False), x)
    y = layer(x, training=True).numpy()
    assert (y == 0).any() and np.allclose(y[y != 0], 65536 / (65536 - drop_threshold(layer.rate)))
    # The layer's config and class are Keras' own: saving is unaffected.
    assert type(layer) is keras.layers.Dropout and "call" not in layer.get_config()


def test_the_environment_variable_keeps_keras_dropout(monkeypatch):
    x = tf.ones([4000])
    fast = keras.layers.Dropout(0.5, seed=3)
    install_fast_dropout(fast)
    fast_out = fast(x, training=True).numpy()
    monkeypatch.setenv(DISABLE_ENV, "1")
    patched = keras.layers.Dropout(0.5, seed=3)
    install_fast_dropout(patched)
    plain = keras.layers.Dropout(0.5, seed=3)(x, training=True).numpy()
    np.testing.assert_array_equal(patched(x, training=True).numpy(), plain)  # Keras' draws
    assert not np.array_equal(fast_out, plain)


def test_noise_shape_and_rate_zero_keep_keras_behaviour():
    layer = keras.layers.Dropout(0.5, noise_shape=(4, 1), seed=1)
    install_fast_dropout(layer)
    y = layer(tf.ones([4, 6]), training=True).numpy()
    assert all(len(set(row)) == 1 for row in y)  # one decision per row
    zero = keras.layers.Dropout(0.0)
    install_fast_dropout(zero)
    np.testing.assert_array_equal(zero(tf.ones([3, 3]), training=True), tf.ones([3, 3]))


@pytest.mark.parametrize("shape", [[64, 12, 9], [3, 7, 5], [1]])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_xla_masking_keeps_the_masks_and_scales_exactly_once(shape, dtype, monkeypatch):
    x = tf.cast(tf.random.stateless_normal(shape, [1, 2]) + 3.0, dtype)  # no zeros in x
    dy = tf.cast(tf.random.stateless_normal(shape, [3, 4]) + 3.0, dtype)
    calls = spy_calls(monkeypatch, fast_dropout, "_apply_mask")

    def value_and_grad():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = dropout(x, 0.1, SEED)
        return y, tape.gradient(y, x, output_gradients=dy)

    y, g = value_and_grad()
    assert len(calls) == 2  # forward and backward
    y_ops, g_ops = run_in_graph(value_and_grad, plain=True)  # the separate ops
    assert len(calls) == 2
    np.testing.assert_array_equal(y.numpy() == 0, y_ops.numpy() == 0)
    np.testing.assert_array_equal(g.numpy() == 0, y.numpy() == 0)
    scale = 65536 / (65536 - drop_threshold(0.1))  # exact, in float32
    for got, inputs in ((y, x), (g, dy)):
        want = tf.cast(tf.where(y_ops != 0, tf.cast(inputs, tf.float32) * scale, 0.0), dtype)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
