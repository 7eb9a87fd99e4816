"""SBERT-WK pooling against a numpy re-computation of the authors' algorithm."""

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.models.sbert_wk import layer_windows
from keras_sentemb.models.sbert_wk import sbert_wk_pool
from tests.conftest import make_tiny_encoder
from tests.numeric import assert_close_vectors
from keras_sentemb.kernels.precision import PIN_ENV


@pytest.fixture(autouse=True)
def float32_encode(monkeypatch):
    """These tests check results against float32 references (a SavedModel, closed forms, the
    model's own forward pass), so `"auto"` computes float32 here; the default precision is
    tested in tests/test_default_precision.py."""
    monkeypatch.setenv(PIN_ENV, "float32")


def _unit_columns(a):
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    return a / norms


def _cosine_matrix(x):
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    x = x / norms
    return x @ x.T


def reference_sbert_wk(states, masks, layer_start, window):
    """The authors' `dissecting` embedding (utils.py of BinWang28/SBERT-WK),
    re-written token by token with numpy: states `[B, L + 1, T, D]`, masks `[B, T]`."""
    lengths = masks.sum(axis=1) - 1  # [SEP] left out
    states = states[:, layer_start:]
    out = []
    for i, length in enumerate(lengths):
        feature = states[i, :, :length, :]  # [layers, tokens, D]
        tokens = []
        for t in range(feature.shape[1]):
            layers = feature[:, t, :]
            alignment = np.zeros(len(layers))
            novelty = np.zeros(len(layers))
            for k in range(len(layers)):
                block = np.vstack([layers[k - window:k], layers[k + 1:k + window + 1],
                                   layers[k][None, :]])
                _, r = np.linalg.qr(block.T)
                column = r[:, -1]
                cos = np.mean(_unit_columns(r[:-1, :-1]), axis=1).dot(r[:-1, -1])
                cos /= np.linalg.norm(column[:-1])
                alignment[k] = 1.0 / (cos * block.shape[0] * 2)
                novelty[k] = abs(column[-1]) / np.linalg.norm(column)
            alpha = alignment / alignment.sum() + novelty / novelty.sum()
            tokens.append(layers.T.dot(alpha / alpha.sum()))
        tokens = np.array(tokens)
        variance = np.array([
            np.var(_cosine_matrix(feature[:, t, :]).diagonal(-1)) for t in range(feature.shape[1])
        ])
        out.append(tokens.T.dot(variance / variance.sum()))
    return np.array(out)


RNG = np.random.default_rng(0)
MASKS = np.zeros((3, 9), np.int32)
MASKS[0, :9], MASKS[1, :5], MASKS[2, :3] = 1, 1, 1


@pytest.mark.parametrize("layer_start,window", [(4, 2), (0, 2), (1, 1), (2, 3), (0, 5)])
def test_equals_the_reference_in_float64(layer_start, window):
    states = RNG.normal(size=(3, 7, 9, 16))  # 6 layers + embeddings
    expected = reference_sbert_wk(states, MASKS, layer_start, window)
    got = sbert_wk_pool(
        [tf.constant(states[:, k]) for k in range(7)], tf.constant(MASKS), layer_start, window
    )
    assert got.dtype == tf.float64
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-9, atol=1e-9)


def test_float32_close_to_the_reference_on_correlated_layers():
    # Real layers are strongly correlated (random ones are near-orthogonal,
    # where 1/cos amplifies float32 rounding).
    base = RNG.normal(size=(3, 1, 9, 16))
    states = base + 0.3 * RNG.normal(size=(3, 7, 9, 16))
    expected = reference_sbert_wk(states, MASKS, 2, 2)
    got = sbert_wk_pool(
        [tf.constant(states[:, k], tf.float32) for k in range(7)], tf.constant(MASKS), 2, 2
    )
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-4)


def test_windows_follow_python_slicing_of_the_authors_code():
    # Left windows are empty while k < window (negative slice start).
    assert layer_windows(5, 2) == [[1, 2, 0], [2, 3, 1], [0, 1, 3, 4, 2], [1, 2, 4, 3],
                                   [2, 3, 4]]


def test_encoder_pooling_matches_the_reference_and_padding_does_not_leak():
    encoder = make_tiny_encoder(num_layers=3)
    sentences = ["a man plays the guitar", "the cat", "a woman is playing the piano in the park"]
    pooling = "sbert_wk:1:2"
    batch = encoder.encode(sentences, pooling=pooling)
    alone = np.stack([encoder.encode([s], pooling=pooling)[0] for s in sentences])
    assert_close_vectors(batch, alone, rtol=1e-5)
    inputs = encoder.preprocess(tf.constant(sentences))
    states = np.stack([s.numpy() for s in encoder.hidden_states(inputs)], axis=1)
    expected = reference_sbert_wk(
        states.astype(np.float64), inputs["padding_mask"].numpy(), 1, 2
    )
    assert_close_vectors(batch, expected, rtol=1e-4)


def test_parse_forms_and_errors():
    assert parse_pooling("sbert_wk") == "sbert_wk:4:2"
    assert parse_pooling("SBERT_WK:1") == "sbert_wk:1:2"
    assert parse_pooling("sbert_wk:-3:1", num_layers=6) == "sbert_wk:4:1"
    assert parse_pooling("sbert_wk:0:2", num_layers=2) == "sbert_wk:0:2"
    with pytest.raises(ValueError, match="needs at least"):
        parse_pooling("sbert_wk:0:3", num_layers=2)  # layer 2 would have no neighbour
    with pytest.raises(ValueError, match="fuses 2 hidden states"):
        parse_pooling("sbert_wk:5", num_layers=6)
    with pytest.raises(ValueError, match="out of range"):
        parse_pooling("sbert_wk:9", num_layers=6)
    with pytest.raises(ValueError, match="window must be >= 1"):
        parse_pooling("sbert_wk:1:0")
    with pytest.raises(ValueError, match="out of range"):
        make_tiny_encoder().encode(["a"], pooling="sbert_wk")  # 2 layers: start 4 is out
