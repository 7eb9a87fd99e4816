"""Chunked exact search equals one full product; HNSW recall against it."""

import numpy as np
import pytest

from keras_sentemb.evaluation.search import approximate_search
from keras_sentemb.evaluation.search import exact_search
from keras_sentemb.evaluation.search import recall_at_k
from keras_sentemb.evaluation.search import select_top_k


def _full_search(queries, corpus, k, similarity):
    """Reference: the whole score matrix in float64, a stable sort per row."""
    q = np.asarray(queries, np.float64)
    c = np.asarray(corpus, np.float64)
    if similarity == "cosine":
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
        c = c / np.linalg.norm(c, axis=1, keepdims=True)
    scores = q @ c.T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), order


@pytest.fixture(scope="module")
def vectors():
    rng = np.random.default_rng(0)
    queries = rng.normal(size=(53, 16)).astype(np.float32)
    # Integer-valued vectors: every product is exact in float32, so ties are
    # real ties and their order (lower index first) is checked too.
    corpus = rng.integers(-3, 4, size=(1009, 16)).astype(np.float32)
    corpus[500] = corpus[3]
    corpus[900] = corpus[3]
    queries[:5] = corpus[[3, 10, 20, 500, 7]]
    return np.round(queries).astype(np.float32), corpus


@pytest.mark.parametrize("similarity", ["dot", "cosine"])
@pytest.mark.parametrize("chunks", [(1, 1009), (7, 97), (64, 10), (1000, 100000)])
def test_chunked_equals_full_search(vectors, similarity, chunks):
    queries, corpus = vectors
    scores, indices = exact_search(queries, corpus, top_k=25, similarity=similarity,
                                   query_chunk_size=chunks[0], corpus_chunk_size=chunks[1])
    ref_scores, ref_indices = _full_search(queries, corpus, 25, similarity)
    assert scores.dtype == np.float32 and indices.shape == (53, 25)
    if similarity == "dot":  # exact integers: identical rankings, ties included
        np.testing.assert_array_equal(indices, ref_indices)
        np.testing.assert_array_equal(scores, ref_scores.astype(np.float32))
    else:
        # Near-ties may swap under float32 rounding; each returned document
        # must still carry the score of its rank in the float64 reference.
        np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=1e-6)
        q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
        c = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)
        true = np.take_along_axis(q.astype(np.float64) @ c.T.astype(np.float64), indices, axis=1)
        np.testing.assert_allclose(true, ref_scores, rtol=1e-5, atol=1e-6)
        assert len({tuple(row) for row in indices}) > 1 and all(
            len(set(row)) == 25 for row in indices.tolist())


def test_ties_go_to_the_lower_index(vectors):
    queries, corpus = vectors
    _, indices = exact_search(queries[:1], corpus, top_k=3, similarity="dot", corpus_chunk_size=11)
    assert indices[0].tolist() == [3, 500, 900]


def test_select_top_k_keeps_first_tied_columns():
    scores = np.array([[1.0, 5.0, 5.0, 5.0, 0.0], [2.0, 2.0, 2.0, 2.0, 2.0]])
    values, cols = select_top_k(scores, 2, offset=10)
    assert cols.tolist() == [[11, 12], [10, 11]]
    assert values.tolist() == [[5.0, 5.0], [2.0, 2.0]]


def test_top_k_larger_than_corpus_and_empty_inputs():
    corpus = np.eye(3, dtype=np.float32)
    scores, indices = exact_search(corpus, corpus, top_k=10)
    assert indices.shape == (3, 3) and indices[:, 0].tolist() == [0, 1, 2]
    scores, indices = exact_search(np.zeros((0, 3)), corpus, top_k=2)
    assert scores.shape == (0, 2)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="same dimension"):
        exact_search(np.zeros((2, 3)), np.zeros((4, 5)))
    with pytest.raises(ValueError, match="similarity"):
        exact_search(np.zeros((2, 3)), np.zeros((4, 3)), similarity="l2")
    with pytest.raises(ValueError, match="top_k"):
        exact_search(np.zeros((2, 3)), np.zeros((4, 3)), top_k=0)
    with pytest.raises(ValueError, match="2-D"):
        exact_search(np.zeros(3), np.zeros((4, 3)))


def test_recall_at_k():
    assert recall_at_k([[1, 2], [3, 4]], [[2, 1], [3, 5]]) == 0.75
    with pytest.raises(ValueError, match="same shape"):
        recall_at_k([[1]], [[1, 2]])


def test_hnsw_finds_the_exact_neighbours():
    pytest.importorskip("faiss")
    rng = np.random.default_rng(1)
    corpus = rng.normal(size=(2000, 24)).astype(np.float32)
    queries = rng.normal(size=(50, 24)).astype(np.float32)
    _, exact = exact_search(queries, corpus, top_k=10)
    scores, approx = approximate_search(queries, corpus, top_k=10, ef_search=200)
    assert recall_at_k(approx, exact) >= 0.95
    assert np.all(np.diff(scores, axis=1) <= 1e-6)  # best first
