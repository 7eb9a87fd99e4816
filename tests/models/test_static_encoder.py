"""The static encoder and its distillation, against closed forms on a tiny vocabulary."""

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.methods.static import distill as static_distill
from keras_sentemb.models.static_encoder import StaticEncoder
from keras_sentemb.models.static_runtime import StaticTable
from tests.static_fixtures import TINY_SENTENCES
from tests.static_fixtures import cosines
from tests.static_fixtures import tiny_static


def test_zipf_weights_are_sif_of_rank_probabilities_without_reserved_tokens():
    tokens = ["[PAD]", "[unused0]", "a", "b", "c"]
    p = static_distill.zipf_probabilities(tokens)
    inverse = np.array([1 / 2, 1 / 3, 1 / 4])  # ranks 0, 1, 2 of a, b, c
    np.testing.assert_allclose(p[2:], inverse / inverse.sum())
    w = static_distill.sif_weights(p, 1e-4)
    np.testing.assert_allclose(w[2:], 1e-4 / (1e-4 + inverse / inverse.sum()), rtol=1e-6)
    assert w[2] < w[3] < w[4]  # frequent tokens weigh less


def test_pca_is_the_centred_projection_on_the_top_eigenvectors():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 6)) * np.array([5, 4, 3, 2, 1, 0.5])
    projected, mean, components = static_distill.pca(x, 3)
    np.testing.assert_allclose(mean, x.mean(0), atol=1e-6)
    eigenvalues, eigenvectors = np.linalg.eigh(np.cov((x - x.mean(0)).T))
    top = eigenvectors[:, ::-1][:, :3]
    np.testing.assert_allclose(np.abs((components * top).sum(0)), 1.0, atol=1e-5)
    np.testing.assert_allclose(projected, (x - x.mean(0)) @ components, atol=1e-4)
    assert np.all(np.diff(projected.var(0)) < 0)


def test_distilled_table_is_the_teachers_token_vectors_through_pca_with_zipf_weights():
    static, teacher = tiny_static(dims=4)
    size = teacher.tokenizer.vocabulary_size()
    ids = np.arange(size, dtype=np.int32)
    packed = np.stack([np.full_like(ids, teacher.start_token_id), ids,
                       np.full_like(ids, teacher.end_token_id)], 1)
    vectors = teacher.sentence_vectors({"token_ids": packed, "segment_ids": np.zeros_like(packed),
                                        "padding_mask": np.ones_like(packed, bool)}).numpy()
    expected, _, _ = static_distill.pca(vectors, 4)
    np.testing.assert_allclose(static.embeddings.numpy(), expected, atol=1e-4)
    tokens = teacher.tokenizer.get_vocabulary()
    np.testing.assert_allclose(static.token_weights.numpy(), static_distill.sif_weights(
        static_distill.zipf_probabilities(tokens)), rtol=1e-6)
    assert static.keep.numpy()[[teacher.start_token_id, teacher.end_token_id,
                                teacher.pad_token_id]].sum() == 0


def test_a_sentence_is_the_weighted_mean_of_its_token_vectors():
    static, teacher = tiny_static(dims=4)
    vocab = teacher.tokenizer.get_vocabulary()
    a, b = vocab.index("man"), vocab.index("guitar")
    table, w = static.embeddings.numpy(), static.token_weights.numpy()
    expected = (w[a] * table[a] + w[b] * table[b]) / 2
    np.testing.assert_allclose(static.encode("man guitar"), expected / np.linalg.norm(expected),
                               atol=1e-6)
    static.normalize = False
    np.testing.assert_allclose(static.encode("man guitar"), expected, atol=1e-6)


def test_the_numpy_path_and_the_keras_model_agree():
    static, teacher = tiny_static(dims=8)
    packed = teacher.preprocess(tf.constant(TINY_SENTENCES))
    keras_vectors = static(packed).numpy()
    assert cosines(keras_vectors, static.encode(TINY_SENTENCES)).min() > 0.99999


def test_save_and_load_in_every_table_dtype(tmp_path):
    static, _ = tiny_static(dims=8)
    reference = static.encode(TINY_SENTENCES)
    for dtype, floor in (("float32", 0.999999), ("float16", 0.9999), ("int8", 0.999)):
        static.table_dtype = dtype
        static.save(tmp_path / dtype)
        loaded = StaticEncoder.from_preset(tmp_path / dtype)
        assert loaded.table_dtype == dtype and loaded.pca is not None
        assert cosines(loaded.encode(TINY_SENTENCES), reference).min() > floor
        assert cosines(StaticTable.from_folder(tmp_path / dtype).encode(TINY_SENTENCES),
                       reference).min() > floor


def test_encode_takes_the_sentence_encoder_options():
    static, _ = tiny_static(dims=8)
    assert static.encode(TINY_SENTENCES[0]).shape == (8,)
    assert static.encode([]).shape == (0, 8)
    truncated = static.encode(TINY_SENTENCES, truncate_dim=4, pooling="mean", precision="auto")
    np.testing.assert_allclose(np.linalg.norm(truncated, axis=1), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match="averages its token vectors"):
        static.encode(TINY_SENTENCES, pooling="cls")
    with pytest.raises(ValueError, match="dims"):
        static_distill.distill_static(tiny_static()[1], dims=1000)
