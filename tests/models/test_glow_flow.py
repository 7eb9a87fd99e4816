"""GlowFlow (BERT-flow): inverse and log-determinant against closed forms."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.models.glow_flow import GlowFlow

RNG = np.random.default_rng(0)
X = RNG.normal(size=(64, 8)) @ RNG.normal(size=(8, 8)) + 3.0


def _random_flow(dtype="float64", **kwargs):
    """A flow whose every weight is non-trivial (the couplings' last Dense is zero-initialised)."""
    kwargs = {"levels": 2, "depth": 2, "coupling_width": 6, "seed": 3, **kwargs}
    flow = GlowFlow(8, dtype=dtype, **kwargs)
    flow.build()
    flow.initialize(X)
    rng = np.random.default_rng(1)
    for coupling in flow.couplings:
        kernel, bias = coupling.out.get_weights()
        coupling.out.set_weights([rng.normal(scale=0.3, size=kernel.shape),
                                  rng.normal(scale=0.3, size=bias.shape)])
    for linear in flow.linears:
        if linear.mode == "lu":
            size = (linear.dim, linear.dim)
            linear.upper.assign(linear.upper + rng.normal(scale=0.2, size=size))
            linear.lower.assign(linear.lower + rng.normal(scale=0.2, size=size))
    return flow


@pytest.mark.parametrize("coupling,permutation", [("affine", "lu"), ("additive", "reverse")])
def test_inverse_and_log_determinant(coupling, permutation):
    flow = _random_flow(coupling=coupling, permutation=permutation)
    x = tf.constant(X[:6])
    z, log_det = flow.forward(x)
    np.testing.assert_allclose(flow.inverse(z).numpy(), X[:6], atol=1e-10)
    # log |det dz/dx| from the full Jacobian, per vector.
    with tf.GradientTape() as tape:
        tape.watch(x)
        z = flow.forward(x)[0]
    jacobian = tape.batch_jacobian(z, x).numpy()
    expected = [np.linalg.slogdet(j)[1] for j in jacobian]
    np.testing.assert_allclose(log_det.numpy(), expected, atol=1e-9)
    # log p(x) = log N(z; 0, I) + log |det|.
    prior = -0.5 * np.sum(z.numpy() ** 2, axis=1) - 4 * math.log(2 * math.pi)
    np.testing.assert_allclose(flow.log_prob(x).numpy(), prior + expected, atol=1e-9)
    if coupling == "additive" and permutation == "reverse":
        # Only the actnorms change volume.
        total = sum(float(np.sum(a.log_scale.numpy())) for a in flow.actnorms)
        np.testing.assert_allclose(log_det.numpy(), total, atol=1e-12)


def test_actnorm_initialisation_standardises_the_data():
    flow = GlowFlow(8, levels=1, depth=1, dtype="float64")
    flow.build()
    flow.initialize(X)
    y, _ = flow.actnorms[0].forward(tf.constant(X))
    np.testing.assert_allclose(y.numpy().mean(axis=0), 0.0, atol=1e-9)
    np.testing.assert_allclose(y.numpy().std(axis=0), 1.0, atol=1e-5)


def test_config_round_trip_and_float32_layer_call():
    flow = _random_flow(dtype="float32")
    copy = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(flow))
    assert copy.built  # Keras rebuilds it from its build config
    copy.set_weights(flow.get_weights())
    x = X[:5].astype("float32")
    np.testing.assert_allclose(np.asarray(copy(x)), np.asarray(flow(x)), atol=1e-6)
    assert flow.output_dim == 8 and np.asarray(flow(x)).shape == (5, 8)


def test_argument_errors():
    with pytest.raises(ValueError, match="needs input_dim >= 8"):
        GlowFlow(4, levels=3)
    with pytest.raises(ValueError, match="coupling"):
        GlowFlow(8, coupling="spline")
