"""quantize_embeddings (equal to sentence-transformers'), calibration files, quantized search."""

import numpy as np
import pytest

from keras_sentemb.evaluation.search import exact_search
from keras_sentemb.evaluation.search import recall_at_k
from keras_sentemb.quantization import PRECISIONS
from keras_sentemb.quantization import QuantizationCalibration
from keras_sentemb.quantization import dequantize_embeddings
from keras_sentemb.quantization import quantize_embeddings
from keras_sentemb.quantization import quantized_search


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    # Clustered vectors (documents near a few centres), like real embeddings.
    centres = rng.normal(size=(20, 40))
    corpus = (centres[rng.integers(0, 20, 600)] + 0.3 * rng.normal(size=(600, 40))).astype(np.float32)
    queries = (centres[rng.integers(0, 20, 30)] + 0.3 * rng.normal(size=(30, 40))).astype(np.float32)
    calibration = rng.normal(size=(300, 40)).astype(np.float32)
    return corpus, queries, calibration


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("how", ["embeddings", "ranges", "own"])
def test_equal_to_sentence_transformers(data, precision, how, torch_worker):
    # sentence-transformers runs in its own interpreter (it imports torch).
    corpus, _, calibration = data
    if how == "embeddings":
        ours = quantize_embeddings(corpus, precision, calibration=calibration)
        inputs = torch_worker.save_inputs(embeddings=corpus, calibration_embeddings=calibration)
    elif how == "ranges":
        ranges = QuantizationCalibration.from_embeddings(calibration)
        ours = quantize_embeddings(corpus, precision, calibration=ranges)
        inputs = torch_worker.save_inputs(embeddings=corpus, ranges=np.asarray(ranges.ranges))
    else:
        ours = quantize_embeddings(corpus, precision)
        inputs = torch_worker.save_inputs(embeddings=corpus)
    _, arrays = torch_worker.request("st_quantize", inputs=inputs, precision=precision)
    theirs = arrays["quantized"]
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)


def test_closed_form_values():
    calibration = QuantizationCalibration([0.0, -1.0], [255.0, 1.0])
    x = np.array([[0.0, -1.0], [254.9, 0.996], [300.0, 0.0], [-5.0, 0.004]], np.float32)
    np.testing.assert_array_equal(quantize_embeddings(x, "uint8", calibration=calibration),
                                  [[0, 0], [254, 254], [255, 127], [0, 128]])
    np.testing.assert_array_equal(quantize_embeddings(x, "int8", calibration=calibration),
                                  [[-128, -128], [126, 126], [127, -1], [-128, 0]])
    bits = np.array([[1, -1, 0, 2, 3, -2, -3, 1, 5, -1]], np.float32)
    np.testing.assert_array_equal(quantize_embeddings(bits, "ubinary"), [[0b10011001, 0b10000000]])
    np.testing.assert_array_equal(quantize_embeddings(bits, "binary"), [[0b10011001 - 128, 0]])
    np.testing.assert_array_equal(
        dequantize_embeddings(quantize_embeddings(bits, "ubinary"), "ubinary", dim=10),
        np.where(bits > 0, 1.0, -1.0))


def test_calibration_round_trip_and_refusals(tmp_path, data):
    corpus, _, calibration = data
    ranges = QuantizationCalibration.from_embeddings(calibration)
    path = ranges.save(tmp_path / "calibration.json")
    loaded = QuantizationCalibration.load(path)
    np.testing.assert_array_equal(loaded.ranges, ranges.ranges)
    np.testing.assert_array_equal(quantize_embeddings(corpus, "int8", calibration=loaded),
                                  quantize_embeddings(corpus, "int8", calibration=ranges))
    with pytest.raises(ValueError, match="calibration has 40 dimensions but the embeddings have 8"):
        quantize_embeddings(corpus[:, :8], "int8", calibration=loaded)
    with pytest.raises(ValueError, match="calibration has 40 dimensions"):
        quantize_embeddings(corpus[:, :8], "uint8", calibration=calibration)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a quantization calibration file"):
        QuantizationCalibration.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="precision"):
        quantize_embeddings(corpus, "int4")
    with pytest.raises(ValueError, match="floating point"):
        quantize_embeddings(corpus.astype(np.int8), "int8")
    with pytest.raises(ValueError, match="at least 2"):
        quantize_embeddings(corpus[:1], "int8")


@pytest.mark.parametrize("precision", PRECISIONS)
def test_rescoring_over_the_whole_corpus_is_exact_search(data, precision):
    corpus, queries, _ = data
    calibration = QuantizationCalibration.from_embeddings(corpus)
    index = quantize_embeddings(corpus, precision, calibration=calibration)
    exact_scores, exact = exact_search(queries, corpus, top_k=10)
    scores, found = quantized_search(queries, index, precision, top_k=10, calibration=calibration,
                                     oversampling=60, rescore_embeddings=corpus,
                                     corpus_chunk_size=97)
    np.testing.assert_array_equal(found, exact)
    np.testing.assert_allclose(scores, exact_scores, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
def test_quantized_search_finds_most_neighbours_and_rescoring_helps(data, precision):
    corpus, queries, _ = data
    calibration = QuantizationCalibration.from_embeddings(corpus)
    index = quantize_embeddings(corpus, precision, calibration=calibration)
    _, exact = exact_search(queries, corpus, top_k=10)
    _, first = quantized_search(queries, index, precision, top_k=10, calibration=calibration,
                                rescore=False)
    _, rescored = quantized_search(queries, index, precision, top_k=10, calibration=calibration,
                                   oversampling=4)
    floor = 0.8 if precision.endswith("int8") else 0.4
    assert recall_at_k(first, exact) >= floor
    assert recall_at_k(rescored, exact) >= recall_at_k(first, exact) - 0.02


def test_hamming_distance_by_hand():
    corpus = np.array([[1, 1, 1, 1], [1, -1, 1, -1], [-1, -1, -1, -1]], np.float32)
    index = quantize_embeddings(corpus, "ubinary")
    scores, indices = quantized_search(np.array([[1, -1, 1, 1]], np.float32), index, "ubinary",
                                       top_k=3, rescore=False)
    assert indices.tolist() == [[0, 1, 2]] and scores.tolist() == [[-1.0, -1.0, -3.0]]


def test_search_refuses_mismatches(data):
    corpus, queries, _ = data
    index = quantize_embeddings(corpus, "int8")
    with pytest.raises(ValueError, match="needs its QuantizationCalibration"):
        quantized_search(queries, index, "int8")
    with pytest.raises(ValueError, match="has 5 columns"):
        quantized_search(queries, quantize_embeddings(corpus[:, :8], "ubinary"), "ubinary")
    with pytest.raises(ValueError, match="oversampling"):
        quantized_search(queries, quantize_embeddings(corpus, "ubinary"), "ubinary", oversampling=0)
