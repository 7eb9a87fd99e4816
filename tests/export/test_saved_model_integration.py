"""The exported default model (all-MiniLM-L6-v2) reproduces `encode()`."""

import json

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.data.resources import bundled_sts_dir
from keras_sentemb.evaluation.readers import read_stsb
from keras_sentemb.export.saved_model import METADATA_FILE, export_saved_model

from tests.numeric import assert_close_vectors

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def exported_default(default_encoder, tmp_path_factory):
    base = tmp_path_factory.mktemp("export") / "minilm"
    path = export_saved_model(default_encoder, base)
    return path, tf.saved_model.load(path)


@pytest.fixture(scope="module")
def stsb_sentences():
    pairs = read_stsb(bundled_sts_dir(), split="test")
    return list(dict.fromkeys(s for a, b, _ in pairs for s in (a, b)))


def _embed(loaded, sentences, batch_size=256):
    fn = loaded.signatures["serving_default"]
    parts = [
        fn(sentences=tf.constant(sentences[i : i + batch_size]))["embeddings"].numpy()
        for i in range(0, len(sentences), batch_size)
    ]
    return np.concatenate(parts)


def test_default_model_equals_encode_on_stsb_test(
    exported_default, default_encoder, stsb_sentences
):
    path, loaded = exported_default
    assert len(stsb_sentences) > 2000
    served = _embed(loaded, stsb_sentences)
    eager = default_encoder.encode(stsb_sentences, precision="float32")
    assert served.shape == eager.shape == (len(stsb_sentences), 384)
    max_diff = float(np.abs(served - eager).max())
    assert max_diff <= 1e-5, max_diff
    # all-MiniLM-L6-v2 normalizes (its sentence-transformers config).
    np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-5)
    meta = json.loads(open(f"{path}/{METADATA_FILE}").read())
    assert meta["pooling"] == "mean" and meta["normalize"] and meta["max_length"] == 256


def test_default_model_edge_inputs(exported_default, default_encoder):
    _, loaded = exported_default
    sentences = [
        "", "   ", "A man is playing a guitar. " * 2000, "😀👍🏽 🇫🇷", "東京は日本の首都です。",
        "Résumé CAFÉ naïve",
    ]
    served = _embed(loaded, sentences)
    assert np.isfinite(served).all()
    assert_close_vectors(served, default_encoder.encode(sentences, precision="float32"), rtol=1e-5)
    bad = loaded.signatures["serving_default"](
        sentences=tf.constant([b"caf\xc3\xa9 \xff\xfe", b""])
    )["embeddings"].numpy()
    assert bad.shape == (2, 384) and np.isfinite(bad).all()
    empty = loaded.signatures["serving_default"](sentences=tf.constant([], tf.string))
    assert empty["embeddings"].shape == (0, 384)
