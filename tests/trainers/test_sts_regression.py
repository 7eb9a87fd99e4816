"""`STSRegression` trainer: MSE of the encoder's cosines, learning on a fixed batch."""

import keras
import numpy as np

from keras_sentemb.methods.sts_regression.trainer import STSRegression
from tests.conftest import make_tiny_encoder
from tests.helpers.batches import pair_batch
from tests.helpers.corpora import STS_PAIRS as PAIRS


def _cosines(a, b):
    return np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_loss_is_mse_of_encoder_cosines():
    encoder = make_tiny_encoder()
    trainer = STSRegression(encoder)
    assert trainer.pooling == "mean" and trainer.get_config()["pooling"] == "mean"
    batch = pair_batch(encoder, PAIRS[:6])
    a = encoder(batch["sentence1"], training=False).numpy()
    b = encoder(batch["sentence2"], training=False).numpy()
    targets = batch["label"].numpy()
    got = trainer.compute_loss_terms(batch, training=False).loss
    np.testing.assert_allclose(got, np.mean((_cosines(a, b) - targets) ** 2), rtol=1e-4)


def test_pooling_argument_overrides_the_encoders():
    encoder = make_tiny_encoder(pooling="mean")
    trainer = STSRegression(encoder, pooling="cls")
    batch = pair_batch(encoder, PAIRS[:6])
    a = encoder(batch["sentence1"], pooling="cls").numpy()
    b = encoder(batch["sentence2"], pooling="cls").numpy()
    got = trainer.compute_loss_terms(batch, training=False).loss
    np.testing.assert_allclose(got, np.mean((_cosines(a, b) - batch["label"].numpy()) ** 2), rtol=1e-4)
    assert encoder.declared_pooling == "mean"  # the trainer declares nothing


def test_training_lowers_the_loss_on_a_fixed_batch():
    encoder = make_tiny_encoder()
    trainer = STSRegression(encoder)
    trainer.compile(optimizer=keras.optimizers.Adam(1e-3))
    batch = pair_batch(encoder)
    before = float(trainer.compute_loss_terms(batch, training=False).loss)
    for _ in range(5):
        logs = trainer.train_step(batch)
    assert float(logs["nonfinite"]) == 0.0
    after = float(trainer.compute_loss_terms(batch, training=False).loss)
    assert after < 0.8 * before, (before, after)
