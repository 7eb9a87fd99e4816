"""Bitext retrieval accuracy: find each sentence's translation by cosine similarity."""

import numpy as np

from keras_sentemb import validation
from keras_sentemb.kernels.precision import reproducible


def _normalize(x):
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"Embeddings must be a 2-D array [n, dim], received shape {x.shape}.")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def _ranks(queries, candidates, block_size):
    """Rank of each query's own candidate (row i of both) among all candidates.

    The rank of query `i` counts the candidates scored strictly higher than
    candidate `i` plus those scored equal with a smaller index, so rank 0 is
    exactly `argmax(scores[i]) == i` (first maximum). Scores are computed
    `block_size` queries at a time: memory is `block_size x n`, never
    `n x n`.
    """
    n = queries.shape[0]
    ranks = np.empty(n, np.int64)
    columns = np.arange(n)
    for begin in range(0, n, block_size):
        stop = min(begin + block_size, n)
        scores = queries[begin:stop] @ candidates.T
        rows = np.arange(stop - begin)
        own = scores[rows, begin + rows][:, None]
        ahead = (scores > own) | ((scores == own) & (columns[None, :] < (begin + rows)[:, None]))
        ranks[begin:stop] = ahead.sum(axis=1)
    return ranks


def bitext_retrieval_accuracy(source_embeddings, target_embeddings, k=1, block_size=1024):
    """Top-k accuracy (x100) of finding row i's translation, both directions.

    Row `i` of `source_embeddings` and row `i` of `target_embeddings` embed a
    translation pair. For `source_to_target`, each source row ranks all
    target rows by cosine similarity, and it counts as correct when target
    row `i` is among the first `k` (ties are ranked by row index, so with
    `k=1` this is `argmax == i`); `target_to_source` is the reverse. This is
    the Tatoeba similarity-search protocol of Artetxe & Schwenk (2019),
    reported as accuracy instead of error rate.

    The similarities are computed `block_size` queries at a time, so memory
    stays `block_size x n` for any number of pairs (the full `n x n`
    matrix is never built).

    Args:
        source_embeddings: array `[n, dim]`.
        target_embeddings: array `[n, dim]`.
        k: int. Correct when the translation is among the `k` nearest.
            Defaults to `1`.
        block_size: int. Queries scored at once. Defaults to `1024`.

    Returns:
        dict with `source_to_target`, `target_to_source` (accuracy x100),
        `mean` of the two and `n` (and `k` when it is not 1).

    Examples:

    >>> bitext_retrieval_accuracy([[1, 0], [0, 1]], [[0.9, 0.1], [0.2, 0.8]])
    {'source_to_target': 100.0, 'target_to_source': 100.0, 'mean': 100.0, 'n': 2}

    References:
        - [Artetxe & Schwenk, 2019. Massively Multilingual Sentence Embeddings
          for Zero-Shot Cross-Lingual Transfer and Beyond](https://arxiv.org/abs/1812.10464)
    """
    k = validation.positive_int(k, "k")
    block_size = validation.positive_int(block_size, "block_size")
    src = _normalize(source_embeddings)
    tgt = _normalize(target_embeddings)
    if src.shape != tgt.shape:
        raise ValueError(
            f"Source and target embeddings must have the same shape, received "
            f"{src.shape} and {tgt.shape}."
        )
    n = src.shape[0]
    if n == 0:
        raise ValueError("Bitext retrieval needs at least one pair, received 0.")
    s2t = float(np.mean(_ranks(src, tgt, block_size) < k) * 100)
    t2s = float(np.mean(_ranks(tgt, src, block_size) < k) * 100)
    out = {
        "source_to_target": s2t,
        "target_to_source": t2s,
        "mean": (s2t + t2s) / 2,
        "n": int(n),
    }
    if k != 1:
        out["k"] = k
    return out


def evaluate_bitext_retrieval(
    source_encoder,
    target_encoder,
    pairs,
    batch_size=128,
    max_length=None,
    source_pooling=None,
    target_pooling=None,
    k=1,
):
    """Bitext retrieval accuracy of two encoders on (source, target) pairs.

    Sources are embedded by `source_encoder`, targets by `target_encoder`
    (the same object for a shared multilingual encoder), each with its own
    pooling unless overridden; see `bitext_retrieval_accuracy`.

    Args:
        source_encoder: `SentenceEncoder` (or anything with `encode`).
        target_encoder: `SentenceEncoder`.
        pairs: list of (source, target) str.
        batch_size: int. Defaults to `128`.
        max_length: int or None. Token limit. Defaults to the encoders'.
        source_pooling: str or None. Overrides the source encoder's pooling.
        target_pooling: str or None. Overrides the target encoder's pooling.
        k: int. Top-k accuracy. Defaults to `1`.

    Returns:
        The dict of `bitext_retrieval_accuracy`.
    """
    pairs = list(pairs)
    if not pairs:
        raise ValueError("Bitext retrieval needs at least one pair, received 0.")
    src = source_encoder.encode([a for a, _ in pairs], **reproducible(source_encoder.encode, dict(
        batch_size=batch_size, max_length=max_length, pooling=source_pooling,
        show_progress=False)))
    tgt = target_encoder.encode([b for _, b in pairs], **reproducible(target_encoder.encode, dict(
        batch_size=batch_size, max_length=max_length, pooling=target_pooling,
        show_progress=False)))
    return bitext_retrieval_accuracy(src, tgt, k=k)
