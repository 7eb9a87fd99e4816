"""Nearest-neighbour search over embeddings: exact (chunked) and approximate.

`exact_search` scores queries against a corpus a block at a time and keeps a
running top-k per query, so memory is bounded by the two block sizes (never
`queries x corpus`, and never a float64 copy of the corpus). Ties are broken
by corpus index (lower first), so the result does not depend on the block
sizes: searching in blocks returns exactly what one full product would.

`approximate_search` builds a faiss HNSW index (an optional dependency,
`pip install -e ".[retrieval]"`) for corpora too large to scan.
faiss is the maintained reference library for vector search (Meta AI, MIT
licence, CPU wheels on PyPI for every major platform); its HNSW graph needs
no training pass, works with inner products (cosine on unit vectors) and has
a single accuracy knob at search time (`ef_search`). `recall_at_k` measures
how many of the exact neighbours it finds.
"""

import numpy as np

from keras_sentemb.missing_dependency import import_optional

SIMILARITIES = ("cosine", "dot")


def check_similarity(similarity):
    """`similarity` if it is one of `SIMILARITIES`, else a clear error."""
    if similarity not in SIMILARITIES:
        raise ValueError(
            f"`similarity` must be one of {SIMILARITIES}. Received: similarity={similarity!r}."
        )
    return similarity


def _as_matrix(x, name):
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"`{name}` must be a 2-D array [n, dim]; received shape {x.shape}.")
    return x


def _unit_rows(x):
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, np.float32(1e-12))


def _check_positive(value, name):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"`{name}` must be a positive int; received {value!r}.")
    return int(value)


def select_top_k(scores, k, offset=0):
    """The `k` best columns of each row of `scores`, ties broken by column.

    Linear time per row (a partition, not a sort): the k-th best value is
    found with `np.partition`; every column scoring above it is kept, and of
    the columns equal to it, the first ones in column order.

    Args:
        scores: float array `[rows, columns]`.
        k: int. Columns to keep per row (at most `columns`).
        offset: int. Added to the returned column indices.

    Returns:
        `(values, indices)`, each `[rows, k]`, in column order (unsorted).
    """
    rows, columns = scores.shape
    k = min(k, columns)
    if k == columns:
        indices = np.broadcast_to(np.arange(columns), (rows, columns))
        return scores.copy(), indices + offset
    kth = np.partition(scores, columns - k, axis=1)[:, columns - k : columns - k + 1]
    above = scores > kth
    ties = scores == kth
    room = k - above.sum(axis=1, keepdims=True)
    keep = above | (ties & (np.cumsum(ties, axis=1, dtype=np.int32) <= room))
    rows_idx, cols_idx = np.nonzero(keep)
    cols_idx = cols_idx.reshape(rows, k)
    values = np.take_along_axis(scores, cols_idx, axis=1)
    return values, cols_idx + offset


def merge_top_k(values_a, indices_a, values_b, indices_b, k):
    """Merge two candidate lists per row into the best `k`, sorted.

    Order: higher value first, lower index first among equal values.
    """
    values = np.concatenate([values_a, values_b], axis=1)
    indices = np.concatenate([indices_a, indices_b], axis=1)
    order = np.lexsort((indices, -values), axis=-1)[:, :k]
    return np.take_along_axis(values, order, axis=1), np.take_along_axis(indices, order, axis=1)


def exact_search(
    query_embeddings,
    corpus_embeddings,
    top_k=100,
    similarity="cosine",
    query_chunk_size=256,
    corpus_chunk_size=50_000,
    show_progress=False,
):
    """Exact top-k search by cosine or dot product, in bounded memory.

    Queries are taken `query_chunk_size` at a time; each block is scored
    against `corpus_chunk_size` documents at a time in float32, and a running
    top-k per query keeps the best documents seen so far. Peak memory is
    about `query_chunk_size x corpus_chunk_size` scores besides the inputs.
    The result is the same for any chunk sizes: rows are sorted by score,
    ties by corpus index.

    Args:
        query_embeddings: array `[queries, dim]`.
        corpus_embeddings: array `[documents, dim]`.
        top_k: int. Documents returned per query (at most the corpus size).
            Defaults to `100`.
        similarity: str. `"cosine"` (rows are L2-normalised first) or
            `"dot"`. Defaults to `"cosine"`.
        query_chunk_size: int. Queries scored at once. Defaults to `256`.
        corpus_chunk_size: int. Documents scored at once. Defaults to
            `50_000`.
        show_progress: bool. A Keras progress bar over query blocks.
            Defaults to `False`.

    Returns:
        `(scores, indices)`: float32 `[queries, k]` and int64
        `[queries, k]`, best first, with `k = min(top_k, documents)`.

    Examples:

    >>> corpus = np.eye(4, dtype="float32")
    >>> scores, indices = exact_search(corpus[[2, 0]], corpus, top_k=2)
    >>> indices.tolist()
    [[2, 0], [0, 1]]
    """
    queries = _as_matrix(query_embeddings, "query_embeddings")
    corpus = _as_matrix(corpus_embeddings, "corpus_embeddings")
    if queries.shape[1] != corpus.shape[1]:
        raise ValueError(
            f"Queries and corpus must have the same dimension; received {queries.shape[1]} "
            f"and {corpus.shape[1]}."
        )
    check_similarity(similarity)
    top_k = _check_positive(top_k, "top_k")
    query_chunk_size = _check_positive(query_chunk_size, "query_chunk_size")
    corpus_chunk_size = _check_positive(corpus_chunk_size, "corpus_chunk_size")
    n_queries, n_docs = queries.shape[0], corpus.shape[0]
    k = min(top_k, n_docs)
    out_scores = np.zeros((n_queries, k), np.float32)
    out_indices = np.zeros((n_queries, k), np.int64)
    if n_queries == 0 or n_docs == 0:
        return out_scores, out_indices
    normalize = similarity == "cosine"
    progbar = None
    if show_progress:
        import keras  # only for its progress bar

        progbar = keras.utils.Progbar(n_queries, unit_name="query")
    # Corpus blocks are normalised once per query block: converting the whole
    # corpus up front would double its memory.
    for q_begin in range(0, n_queries, query_chunk_size):
        q = queries[q_begin : q_begin + query_chunk_size]
        q = _unit_rows(q) if normalize else np.asarray(q, np.float32)
        best_v = np.full((q.shape[0], 0), -np.inf, np.float32)
        best_i = np.zeros((q.shape[0], 0), np.int64)
        for c_begin in range(0, n_docs, corpus_chunk_size):
            c = corpus[c_begin : c_begin + corpus_chunk_size]
            c = _unit_rows(c) if normalize else np.asarray(c, np.float32)
            scores = q @ c.T
            v, i = select_top_k(scores, k, offset=c_begin)
            best_v, best_i = merge_top_k(best_v, best_i, v, i.astype(np.int64), k)
        out_scores[q_begin : q_begin + q.shape[0]] = best_v
        out_indices[q_begin : q_begin + q.shape[0]] = best_i
        if progbar is not None:
            progbar.add(q.shape[0])
    return out_scores, out_indices


def approximate_search(
    query_embeddings,
    corpus_embeddings,
    top_k=100,
    similarity="cosine",
    m=32,
    ef_construction=200,
    ef_search=None,
):
    """Approximate top-k search with a faiss HNSW index (inner product).

    Needs faiss (`pip install -e ".[retrieval]"` or `pip install faiss-cpu`).
    For `"cosine"`, rows are L2-normalised first, so the inner product is the
    cosine. The graph is built once over the corpus (`m` links per node,
    `ef_construction` candidates while building); `ef_search` candidates are
    explored per query (more: slower, closer to exact). faiss draws the
    graph levels from a fixed seed, so a build is reproducible.

    Args:
        query_embeddings: array `[queries, dim]`.
        corpus_embeddings: array `[documents, dim]`.
        top_k: int. Documents per query. Defaults to `100`.
        similarity: str. `"cosine"` or `"dot"`. Defaults to `"cosine"`.
        m: int. HNSW links per node. Defaults to `32`.
        ef_construction: int. Build-time breadth. Defaults to `200`.
        ef_search: int or None. Search-time breadth. Defaults to
            `max(2 * top_k, 64)`.

    Returns:
        `(scores, indices)` like `exact_search` (index `-1` where the
        index returned fewer than `k` documents).
    """
    # Optional dependency: only approximate search needs faiss.
    faiss = import_optional("faiss", "Approximate search", "retrieval")
    queries = _as_matrix(query_embeddings, "query_embeddings")
    corpus = _as_matrix(corpus_embeddings, "corpus_embeddings")
    check_similarity(similarity)
    top_k = _check_positive(top_k, "top_k")
    k = min(top_k, corpus.shape[0])
    if similarity == "cosine":
        queries, corpus = _unit_rows(queries), _unit_rows(corpus)
    queries = np.ascontiguousarray(queries, np.float32)
    corpus = np.ascontiguousarray(corpus, np.float32)
    index = faiss.IndexHNSWFlat(corpus.shape[1], int(m), faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = int(ef_construction)
    index.hnsw.efSearch = int(ef_search or max(2 * k, 64))
    index.add(corpus)
    scores, indices = index.search(queries, k)
    return scores.astype(np.float32), indices.astype(np.int64)


def recall_at_k(approximate_indices, exact_indices):
    """Mean fraction of each query's exact top-k found by the approximate top-k.

    Args:
        approximate_indices: int array `[queries, k]`.
        exact_indices: int array `[queries, k]`.

    Returns:
        float in [0, 1].

    Examples:

    >>> recall_at_k(np.array([[0, 1], [2, 5]]), np.array([[1, 0], [2, 3]]))
    0.75
    """
    approx = np.asarray(approximate_indices)
    exact = np.asarray(exact_indices)
    if approx.shape != exact.shape:
        raise ValueError(
            f"Both index arrays must have the same shape; received {approx.shape} and {exact.shape}."
        )
    if exact.size == 0:
        return 1.0
    hits = [len(set(a.tolist()) & set(e.tolist())) for a, e in zip(approx, exact)]
    return float(np.sum(hits) / exact.size)
