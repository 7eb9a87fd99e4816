"""Whitening: closed forms, and the post-processing layer of a SentenceEncoder
(encode, save / from_preset, .keras, clone, pooling rules)."""

import json

import keras
import numpy as np
import pytest

from keras_sentemb.models import SentenceEncoder
from keras_sentemb.models.whitening import Whitening
from keras_sentemb.models.whitening import whitening_weights
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS
from tests.numeric import assert_close_vectors
from keras_sentemb.kernels.precision import PIN_ENV


@pytest.fixture(autouse=True)
def float32_encode(monkeypatch):
    """These tests check results against float32 references (a SavedModel, closed forms, the
    model's own forward pass), so `"auto"` computes float32 here; the default precision is
    tested in tests/test_default_precision.py."""
    monkeypatch.setenv(PIN_ENV, "float32")


RNG = np.random.default_rng(0)
X = RNG.normal(size=(400, 6)) @ RNG.normal(size=(6, 6)) + RNG.normal(size=6)


def test_whitened_fitting_set_has_zero_mean_and_identity_covariance():
    mean, kernel = whitening_weights(X)
    z = (X - mean) @ kernel
    np.testing.assert_allclose(z.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(np.cov(z.T), np.eye(6), atol=1e-10)


def test_kept_dimensions_are_the_largest_variance_directions():
    mean, kernel = whitening_weights(X)
    _, kernel3 = whitening_weights(X, dim=3)
    np.testing.assert_allclose(kernel3, kernel[:, :3])
    # Column j of the kernel is eigenvector j of the covariance over sqrt(eigenvalue j).
    values, vectors = np.linalg.eigh(np.cov(X.T))
    top = vectors[:, ::-1][:, :3] / np.sqrt(values[::-1][:3])
    np.testing.assert_allclose(np.abs(kernel3), np.abs(top), rtol=1e-8)
    np.testing.assert_allclose(np.cov(((X - mean) @ kernel3).T), np.eye(3), atol=1e-10)


def test_errors_for_bad_dims_and_degenerate_sets():
    with pytest.raises(ValueError, match=r"must be in \[1, 6\]"):
        whitening_weights(X, dim=7)
    with pytest.raises(ValueError, match="at least 2 vectors"):
        whitening_weights(X[:1])
    flat = np.hstack([X[:, :3], X[:, :3] @ RNG.normal(size=(3, 3))])  # rank 3 of 6
    with pytest.raises(ValueError, match="span only 3 of 6 dimensions"):
        whitening_weights(flat, dim=4)
    # dim=None keeps the directions of non-zero variance only, and whitens them.
    mean, kernel = whitening_weights(flat)
    assert kernel.shape == (6, 3)
    np.testing.assert_allclose(np.cov(((flat - mean) @ kernel).T), np.eye(3), atol=1e-8)
    assert Whitening.from_vectors(flat).output_dim == 3
    with pytest.raises(ValueError, match="all equal"):
        whitening_weights(np.ones((5, 3)))
    with pytest.raises(ValueError, match="at most input_dim"):
        Whitening(4, dim=5)


def test_layer_applies_the_closed_form_and_round_trips_its_config():
    layer = Whitening.from_vectors(X, dim=4, pooling="mean")
    mean, kernel = whitening_weights(X, dim=4)
    np.testing.assert_allclose(np.asarray(layer(X[:5])), (X[:5] - mean) @ kernel, rtol=1e-5,
                               atol=1e-5)
    config = layer.get_config()
    assert config["input_dim"] == 6 and config["dim"] == 4 and config["pooling"] == "mean"
    clone = Whitening.from_config(config)
    clone.build()
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(np.asarray(clone(X[:5])), np.asarray(layer(X[:5])))


@pytest.fixture(scope="module")
def whitened():
    encoder = make_tiny_encoder(normalize=True)
    raw = encoder.encode(CORPUS, precision="float32")
    encoder.postprocess = Whitening.from_vectors(raw, dim=8, pooling="mean")
    return encoder, raw


def test_encoder_whitens_its_own_vectors(whitened):
    encoder, raw = whitened
    assert encoder.output_dim == 8 and encoder.base_output_dim == 32
    out = encoder.encode(CORPUS)
    np.testing.assert_allclose(np.cov(out.T), np.eye(8), atol=1e-4)
    assert_close_vectors(encoder.encode(CORPUS[:5], postprocess=False), raw[:5], rtol=1e-5)
    # Pooling, projection and normalisation come before the whitening: call() agrees.
    inputs = encoder.preprocess(np.array(CORPUS[:5]))
    assert_close_vectors(np.asarray(encoder(inputs)), out[:5], rtol=1e-4)
    assert encoder.encode(CORPUS[0]).shape == (8,) and encoder.encode([]).shape == (0, 8)


def test_other_poolings_are_refused(whitened):
    encoder, _ = whitened
    with pytest.raises(ValueError, match="fitted on mean pooling; it cannot post-process cls"):
        encoder.encode(["a man"], pooling="cls")
    with pytest.raises(ValueError, match="fitted on mean pooling"):
        encoder.pooling = "max"
    assert encoder.encode(["a man"], pooling="cls", postprocess=False).shape == (1, 32)


def test_save_and_from_preset_round_trip(whitened, tmp_path):
    encoder, _ = whitened
    encoder.save(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "sentemb_config.json").read_text())
    assert config["format_version"] == 2
    assert config["postprocess"]["class_name"] == "Whitening"
    loaded = SentenceEncoder.from_preset(str(tmp_path / "m"))
    assert isinstance(loaded.postprocess, Whitening) and loaded.declared_pooling == "mean"
    assert_close_vectors(loaded.encode(CORPUS[:8]), encoder.encode(CORPUS[:8]), rtol=1e-5)
    with pytest.raises(ValueError, match="fitted on mean pooling"):
        SentenceEncoder.from_preset(str(tmp_path / "m"), pooling="cls")
    (tmp_path / "m" / "sentemb_postprocess.npz").unlink()
    with pytest.raises(ValueError, match="has no sentemb_postprocess.npz"):
        SentenceEncoder.from_preset(str(tmp_path / "m"))


def test_keras_archive_and_clone(whitened, tmp_path):
    encoder, _ = whitened
    encoder.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert_close_vectors(loaded.encode(CORPUS[:8]), encoder.encode(CORPUS[:8]), rtol=1e-5)
    copy = encoder.clone()
    assert copy.postprocess is not encoder.postprocess
    assert_close_vectors(copy.encode(CORPUS[:8]), encoder.encode(CORPUS[:8]), rtol=1e-5)


def test_removing_the_layer_untracks_its_weights():
    encoder = make_tiny_encoder()
    n = len(encoder.weights)
    encoder.postprocess = Whitening.from_vectors(encoder.encode(CORPUS), dim=8, pooling="mean")
    assert len(encoder.weights) == n + 2
    encoder.postprocess = None
    assert len(encoder.weights) == n and encoder.output_dim == 32
    assert encoder.encode(["a man"]).shape == (1, 32)
    with pytest.raises(ValueError, match="takes 6-dimensional vectors; this encoder outputs 32"):
        encoder.postprocess = Whitening.from_vectors(X)
    with pytest.raises(TypeError, match="PostProcessing layer"):
        encoder.postprocess = keras.layers.Dense(3)


def test_trainers_refuse_a_post_processed_encoder(whitened):
    from keras_sentemb.methods.simcse.trainer import SimCSE

    with pytest.raises(ValueError, match="training the encoder would invalidate it"):
        SimCSE(whitened[0])
