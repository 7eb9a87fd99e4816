"""Parity of the default model with sentence-transformers (stored reference).

The fixtures were generated once with sentence-transformers / Hugging Face
(tests/fixtures/make_reference.py, see tests/fixtures/README.md).
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.evaluation.sts import evaluate_sts
from tests.conftest import FIXTURES

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def reference():
    return np.load(FIXTURES / "st_reference.npz")


def cosine(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(1)


def test_token_ids_equal_the_reference_tokenizer(default_encoder, reference):
    sentences = [str(s) for s in reference["sentences"]]
    for i, sentence in enumerate(sentences):
        expected = reference["token_ids"][i][: reference["token_lengths"][i]].tolist()
        got = default_encoder.preprocess(tf.constant([sentence]))["token_ids"][0]
        assert got.numpy().tolist() == expected, sentence
    resume = default_encoder.tokenize(tf.constant(["résumé", "resume"])).to_list()
    assert resume[0] == resume[1] and 100 not in resume[0]


@pytest.mark.parametrize(
    "key,pooling,normalize",
    [
        ("embeddings", None, None),
        ("mean_unnormalized", "mean", False),
        ("cls", "cls", False),
        ("max", "max", False),
        ("mean_last2", "mean_last2", False),
        ("first_last", "first_last", False),
        ("layer0", "layer:0", False),
    ],
)
def test_pooled_vectors_equal_the_reference(default_encoder, reference, key, pooling, normalize):
    sentences = [str(s) for s in reference["sentences"]]
    saved = default_encoder.normalize
    if normalize is not None:
        default_encoder.normalize = normalize
    try:
        got = default_encoder.encode(sentences, pooling=pooling, precision="float32")
    finally:
        default_encoder.normalize = saved
    # The checkpoint's own exact GELU (`hidden_act="gelu"`): equal to float rounding.
    assert cosine(got, reference[key]).min() >= 0.99999
    relative = (np.linalg.norm(got - reference[key], axis=1)
                / np.linalg.norm(reference[key], axis=1))
    assert relative.max() <= 1e-5, relative.max()


def test_stsb_test_embeddings_and_spearman(default_encoder):
    ref = np.load(FIXTURES / "stsb_test_reference.npz")
    sentences = [str(s) for s in ref["sentences"]]
    got = default_encoder.encode(sentences, precision="float32")
    cos = cosine(got, ref["embeddings"].astype(np.float32))
    assert cos.min() >= 0.99999, (cos.min(), sentences[int(cos.argmin())])
    from keras_sentemb.data.resources import bundled_sts_dir

    result = evaluate_sts(default_encoder, bundled_sts_dir(), tasks=["STSBenchmark"])
    assert result["STSBenchmark"]["test"]["spearman"] == pytest.approx(82.03, abs=0.01)
    assert result["STSBenchmark"]["test"]["spearman"] == pytest.approx(
        float(ref["spearman_x100"]), abs=0.005
    )
