"""The Keras `Loss` wrappers equal the loss functions and work in compile/fit."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb import losses

RNG = np.random.default_rng(0)
A, B, C = (RNG.normal(size=(6, 5)).astype("float32") for _ in range(3))
LABELS = np.array([1, 0, 0, 1, 0, 0], "float32")
TARGETS = np.linspace(0.1, 0.9, 6).astype("float32")


def stacked(*cols):
    return tf.stack(cols, axis=1)


@pytest.mark.parametrize(
    "loss,y_true,y_pred,expected",
    [
        (losses.InfoNCELoss(temperature=0.1), LABELS, stacked(A, B),
         losses.info_nce_loss(A, B, temperature=0.1)),
        (losses.InfoNCELoss(hard_negative_weight=0.3), LABELS, stacked(A, B, C),
         losses.info_nce_loss(A, B, hard_negatives=C, hard_negative_weight=0.3)),
        (losses.NTXentLoss(temperature=0.2), LABELS, stacked(A, B),
         losses.nt_xent_loss(A, B, temperature=0.2)),
        (losses.ContrastiveTensionLoss(), LABELS, stacked(A, B),
         losses.contrastive_tension_loss(A, B, LABELS)),
        (losses.ContrastiveTensionInBatchLoss(scale=10.0), LABELS, stacked(A, B),
         losses.contrastive_tension_in_batch_loss(A, B, np.log(10.0))),
        (losses.CosineMSELoss(), TARGETS, stacked(A, B),
         losses.cosine_mse_loss(A, B, TARGETS)),
    ],
    ids=["info_nce", "info_nce_hard", "nt_xent", "ct", "ct_in_batch", "cosine_mse"],
)
def test_wrapper_equals_function_and_round_trips(loss, y_true, y_pred, expected):
    np.testing.assert_allclose(float(loss(y_true, y_pred)), float(expected), rtol=1e-5)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored) is type(loss) and restored.get_config() == loss.get_config()
    np.testing.assert_allclose(float(restored(y_true, y_pred)), float(expected), rtol=1e-5)


def test_wrong_layout_is_a_clear_error():
    with pytest.raises(ValueError, match=r"shape \[batch, 2, dim\]"):
        losses.NTXentLoss()(LABELS, stacked(A, B, C))


def test_compile_and_fit_a_siamese_model():
    """A Keras model whose output stacks two views learns with InfoNCELoss."""
    inputs = keras.Input((5,))
    dense = keras.layers.Dense(4)
    noise = keras.layers.GaussianNoise(0.1)
    outputs = keras.ops.stack([dense(noise(inputs)), dense(noise(inputs))], axis=1)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss=losses.InfoNCELoss(temperature=0.1))
    x = RNG.normal(size=(64, 5)).astype("float32")
    y = np.zeros(64, "float32")
    before = model.evaluate(x, y, batch_size=16, verbose=0)
    model.fit(x, y, batch_size=16, epochs=15, verbose=0)
    after = model.evaluate(x, y, batch_size=16, verbose=0)
    assert after < 0.8 * before
