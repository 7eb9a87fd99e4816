"""Embedding quantization (int8 / uint8 / binary) and search over quantized vectors.

A float32 index of `n` vectors of `d` dimensions takes `4nd` bytes. Scalar
quantization keeps one byte per dimension (4x smaller): each dimension's
calibration range `[min, max]` is cut into 256 equal buckets, and a value is
stored as its bucket (`uint8`: 0..255, `int8`: the same minus 128). Binary
quantization keeps one bit per dimension (32x smaller): `x > 0`, packed
eight to a byte (`ubinary`: uint8 bytes, `binary`: the same minus 128 as
int8). These are the conventions of sentence-transformers'
`quantize_embeddings`, so indexes built by either library agree.

The calibration ranges belong with the index: queries must be quantized with
the ranges the corpus was quantized with. `QuantizationCalibration` holds
them and saves / loads them as a small JSON file.

`quantized_search` searches a quantized corpus: int8 / uint8 by the inner
product of the codes, binary by Hamming distance on the packed bits (XOR and
a population count, 64 bits at a time). With `rescore=True` the best
`top_k * oversampling` candidates of each query are scored again with the
float32 query, against the float32 documents when given (for example a
memory-mapped `.npy` file) or else against the dequantized candidates, and
re-ranked.

References:
    - [Shakir, Aarsen & Lee, 2024](https://huggingface.co/blog/embedding-quantization)
      (embedding quantization with rescoring)
    - [Jacob et al., 2018](https://arxiv.org/abs/1712.05877) (scalar quantization)
"""

import json
import os

import numpy as np

from keras_sentemb.evaluation.search import check_similarity
from keras_sentemb.evaluation.search import exact_search
from keras_sentemb.evaluation.search import merge_top_k
from keras_sentemb.evaluation.search import select_top_k

PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")
CALIBRATION_FORMAT = 1


def check_precision(precision):
    """`precision` if it is one of `PRECISIONS`, else a clear error."""
    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {PRECISIONS}. Received: precision={precision!r}.")
    return precision


def _float_matrix(x, name="embeddings"):
    x = np.asarray(x)
    if x.dtype.kind not in "f":
        raise ValueError(f"`{name}` must be floating point; received dtype {x.dtype}.")
    if x.ndim != 2:
        raise ValueError(f"`{name}` must be a 2-D array [n, dim]; received shape {x.shape}.")
    return x


class QuantizationCalibration:
    """Per-dimension ranges for int8 / uint8 quantization, saved beside an index.

    Args:
        minimum: float array `[dim]`. Lower end of each dimension's range.
        maximum: float array `[dim]`. Upper end of each dimension's range.

    Examples:

    >>> calibration = QuantizationCalibration.from_embeddings(np.array([[0.0, -1.0], [1.0, 1.0]]))
    >>> calibration.dim
    2
    >>> quantize_embeddings(np.array([[0.5, 0.0]]), "uint8", calibration=calibration).tolist()
    [[127, 127]]
    """

    def __init__(self, minimum, maximum):
        minimum = np.asarray(minimum, np.float32).reshape(-1)
        maximum = np.asarray(maximum, np.float32).reshape(-1)
        if minimum.shape != maximum.shape or minimum.size == 0:
            raise ValueError(
                f"`minimum` and `maximum` must be non-empty vectors of one length; received "
                f"{minimum.shape} and {maximum.shape}."
            )
        if not (np.isfinite(minimum).all() and np.isfinite(maximum).all()):
            raise ValueError("Calibration ranges must be finite.")
        if np.any(maximum < minimum):
            raise ValueError("Calibration `maximum` is below `minimum` in some dimension.")
        self.minimum = minimum
        self.maximum = maximum

    @property
    def dim(self):
        """The number of dimensions calibrated."""
        return int(self.minimum.size)

    @property
    def ranges(self):
        """`[2, dim]` float32: row 0 the minima, row 1 the maxima."""
        return np.stack([self.minimum, self.maximum])

    @classmethod
    def from_embeddings(cls, embeddings):
        """Ranges from the minimum and maximum of each dimension of `embeddings` (2+ rows)."""
        embeddings = _float_matrix(embeddings, "calibration embeddings")
        if embeddings.shape[0] < 2:
            raise ValueError(
                f"Calibration needs at least 2 embeddings; received {embeddings.shape[0]}."
            )
        return cls(embeddings.min(axis=0), embeddings.max(axis=0))

    def steps(self):
        """The bucket width of each dimension (1 where the range is empty)."""
        steps = (self.maximum - self.minimum) / np.float32(255)
        return np.where(steps == 0, np.float32(1), steps).astype(np.float32)

    def check_dim(self, dim):
        """Refuse embeddings of another dimension than the calibration's."""
        if dim != self.dim:
            raise ValueError(
                f"The calibration has {self.dim} dimensions but the embeddings have {dim}; "
                "quantize with the calibration of the same model (and truncate_dim)."
            )

    def save(self, path):
        """Write the ranges as JSON (float32 values round-trip exactly)."""
        data = {
            "format_version": CALIBRATION_FORMAT,
            "dim": self.dim,
            "minimum": [float(v) for v in self.minimum],
            "maximum": [float(v) for v in self.maximum],
        }
        path = os.fspath(path)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path):
        """Read ranges written by `save`."""
        path = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            return cls(data["minimum"], data["maximum"])
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{path} is not a quantization calibration file ({e}).") from None

    def __repr__(self):
        return f"QuantizationCalibration(dim={self.dim})"


def _resolve_calibration(calibration, embeddings):
    if isinstance(calibration, QuantizationCalibration):
        return calibration
    if calibration is None:
        return QuantizationCalibration.from_embeddings(embeddings)
    calibration = np.asarray(calibration)
    if calibration.ndim != 2:
        raise ValueError(
            "`calibration` must be a QuantizationCalibration, calibration embeddings "
            f"[n, dim] or None; received an array of shape {calibration.shape}."
        )
    return QuantizationCalibration.from_embeddings(calibration)


def quantize_embeddings(embeddings, precision="float32", calibration=None):
    """Quantize float embeddings to `float32`, `int8`, `uint8`, `binary` or `ubinary`.

    - `uint8`: dimension `j` of range `[min_j, max_j]` is cut into 256
      buckets of width `(max_j - min_j) / 255`; a value becomes its bucket
      `floor((x - min_j) / width)`, clipped to 0..255.
    - `int8`: the `uint8` bucket minus 128.
    - `ubinary`: `x > 0` per dimension, packed into bytes (big-endian bit
      order, `np.packbits`); `[n, ceil(dim / 8)]` uint8.
    - `binary`: the `ubinary` bytes minus 128, as int8.
    - `float32`: a float32 copy.

    The ranges come from `calibration`: a `QuantizationCalibration` (for
    example loaded from beside the index), calibration embeddings
    `[m, dim]` (their per-dimension minimum and maximum), or `None` (the
    embeddings' own ranges; fine for a corpus, wrong for a handful of
    queries, which must use the corpus' calibration).

    Args:
        embeddings: float array `[n, dim]`.
        precision: str. One of `PRECISIONS`. Defaults to `"float32"`.
        calibration: `QuantizationCalibration`, float array `[m, dim]` or
            None. Used by `int8` / `uint8` only. Defaults to `None`.

    Returns:
        numpy array: float32 `[n, dim]`, int8 / uint8 `[n, dim]`, or int8 /
        uint8 `[n, ceil(dim / 8)]` for the binary precisions.

    Examples:

    >>> x = np.array([[0.2, -0.4, 0.0, 0.9, -0.1, 0.3, 0.5, -0.2, 0.7]])
    >>> quantize_embeddings(x, "ubinary").tolist()
    [[150, 128]]

    References:
        - [Shakir, Aarsen & Lee, 2024](https://huggingface.co/blog/embedding-quantization)
    """
    check_precision(precision)
    embeddings = _float_matrix(embeddings)
    if precision == "float32":
        return embeddings.astype(np.float32)
    if precision in ("binary", "ubinary"):
        packed = np.packbits(embeddings > 0, axis=-1)
        return packed if precision == "ubinary" else (packed.astype(np.int16) - 128).astype(np.int8)
    calibration = _resolve_calibration(calibration, embeddings)
    calibration.check_dim(embeddings.shape[1])
    x = embeddings.astype(np.float32, copy=False)
    buckets = np.clip(np.floor((x - calibration.minimum) / calibration.steps()), 0, 255)
    if precision == "uint8":
        return buckets.astype(np.uint8)
    return (buckets - 128).astype(np.int8)


def dequantize_embeddings(quantized, precision, calibration=None, dim=None):
    """Float32 vectors standing for quantized ones (for rescoring).

    `int8` / `uint8`: the centre of each bucket (needs the calibration).
    `binary` / `ubinary`: +1 for a set bit, -1 otherwise (the first `dim`
    bits; defaults to all of them).

    Args:
        quantized: array from `quantize_embeddings`.
        precision: str. The precision it was quantized to.
        calibration: `QuantizationCalibration` or None. Required for int8 /
            uint8.
        dim: int or None. Dimensions of the binary vectors. Defaults to
            `8 * bytes`.

    Returns:
        float32 array `[n, dim]`.
    """
    check_precision(precision)
    q = np.asarray(quantized)
    if precision == "float32":
        return q.astype(np.float32)
    if precision in ("binary", "ubinary"):
        packed = q.astype(np.uint8) if precision == "ubinary" else (q.astype(np.int16) + 128).astype(
            np.uint8)
        bits = np.unpackbits(packed, axis=-1, count=dim)
        return bits.astype(np.float32) * 2 - 1
    if not isinstance(calibration, QuantizationCalibration):
        raise ValueError(f"Dequantizing {precision} needs its QuantizationCalibration.")
    calibration.check_dim(q.shape[1])
    buckets = q.astype(np.float32) + (128 if precision == "int8" else 0)
    return calibration.minimum + (buckets + 0.5) * calibration.steps()


def _as_uint64_words(packed):
    """Packed bits `[n, bytes]` (uint8) as `[n, words]` uint64, zero-padded."""
    packed = np.ascontiguousarray(packed, np.uint8)
    pad = (-packed.shape[1]) % 8
    if pad:
        packed = np.concatenate([packed, np.zeros((packed.shape[0], pad), np.uint8)], axis=1)
    return packed.view(np.uint64)


def _hamming_top_k(query_words, corpus_words, k, query_chunk_size, corpus_chunk_size):
    """Smallest Hamming distances (as scores `-distance`), best first."""
    n_q, n_d = query_words.shape[0], corpus_words.shape[0]
    out_v = np.zeros((n_q, k), np.float32)
    out_i = np.zeros((n_q, k), np.int64)
    for qb in range(0, n_q, query_chunk_size):
        q = query_words[qb : qb + query_chunk_size]
        best_v = np.zeros((q.shape[0], 0), np.float32)
        best_i = np.zeros((q.shape[0], 0), np.int64)
        for cb in range(0, n_d, corpus_chunk_size):
            c = corpus_words[cb : cb + corpus_chunk_size]
            distance = np.zeros((q.shape[0], c.shape[0]), np.int32)
            for w in range(q.shape[1]):  # one 64-bit word at a time: bounded memory
                distance += np.bitwise_count(q[:, w, None] ^ c[None, :, w])
            v, i = select_top_k(-distance.astype(np.float32), k, offset=cb)
            best_v, best_i = merge_top_k(best_v, best_i, v, i.astype(np.int64), k)
        out_v[qb : qb + q.shape[0]] = best_v
        out_i[qb : qb + q.shape[0]] = best_i
    return out_v, out_i


def quantized_search(
    query_embeddings,
    corpus,
    precision,
    top_k=10,
    calibration=None,
    rescore=True,
    oversampling=4,
    rescore_embeddings=None,
    similarity="cosine",
    query_chunk_size=256,
    corpus_chunk_size=None,
):
    """Top-k search over a quantized corpus, optionally rescored in float32.

    First pass: the float32 queries are quantized like the corpus (int8 /
    uint8 with the corpus' `calibration`) and compared with it: int8 / uint8
    by the inner product of the codes (exact integer sums, computed in
    float32; divided by the codes' norms for `"cosine"`), binary by Hamming distance on packed bits (score = minus the
    distance), float32 by `similarity`. With `rescore`, the first pass
    returns `top_k * oversampling` candidates per query, which are scored
    again by `similarity` between the float32 query and either
    `rescore_embeddings` (the float32 corpus, e.g. `np.load(path,
    mmap_mode="r")`: only the candidates' rows are read) or the dequantized
    candidates (`dequantize_embeddings`), and the best `top_k` are kept.
    When `top_k * oversampling` covers the corpus and `rescore_embeddings`
    is given, the result is exact search's.

    Args:
        query_embeddings: float array `[queries, dim]`.
        corpus: the quantized corpus (`quantize_embeddings(..., precision)`).
        precision: str. The corpus' precision.
        top_k: int. Documents per query. Defaults to `10`.
        calibration: `QuantizationCalibration` or None. The corpus'
            calibration; required for int8 / uint8.
        rescore: bool. Re-rank the candidates with float32 queries.
            Defaults to `True`.
        oversampling: int. Candidates per query are `top_k * oversampling`.
            Defaults to `4`.
        rescore_embeddings: float array `[documents, dim]` or None. Float32
            documents for rescoring. Defaults to `None` (dequantized).
        similarity: str. `"cosine"` or `"dot"`, for float32 scores. Defaults
            to `"cosine"`.
        query_chunk_size: int. Queries at once. Defaults to `256`.
        corpus_chunk_size: int or None. Documents at once; defaults to
            `50_000` (`4_096` for binary precisions).

    Returns:
        `(scores, indices)`, `[queries, k]` each, best first: rescored
        float32 similarities, or first-pass scores without `rescore`.

    Examples:

    >>> corpus = np.array([[1.0, 0.2], [-0.5, 1.0], [0.3, -1.0]])
    >>> index = quantize_embeddings(corpus, "ubinary")
    >>> quantized_search(np.array([[0.9, 0.1]]), index, "ubinary", top_k=1)[1].tolist()
    [[0]]
    """
    check_precision(precision)
    check_similarity(similarity)
    queries, corpus = _search_inputs(query_embeddings, corpus, precision, top_k, oversampling,
                                     calibration)
    dim = queries.shape[1]
    n_docs = corpus.shape[0]
    k = min(int(top_k), n_docs)
    depth = min(k * int(oversampling), n_docs) if rescore else k
    if corpus_chunk_size is None:
        corpus_chunk_size = 4096 if precision in ("binary", "ubinary") else 50_000
    scores, indices = _first_pass_top_k(queries, corpus, precision, calibration, similarity,
                                        depth, query_chunk_size, corpus_chunk_size)
    if not rescore:
        return scores, indices
    candidate_rows = _candidate_reader(rescore_embeddings, corpus, precision, calibration, dim)
    return _rescore_top_k(queries, indices, k, candidate_rows, similarity, query_chunk_size)


def _search_inputs(query_embeddings, corpus, precision, top_k, oversampling, calibration):
    """`quantized_search`'s checked queries (a float 2-D array) and corpus (an array).

    Raises ValueError for a corpus that is not 2-D or does not fit the
    queries' dimension, a `top_k` / `oversampling` that is not a positive
    int, or an int8 / uint8 corpus without a matching calibration.
    """
    queries = _float_matrix(query_embeddings, "query_embeddings")
    corpus = np.asarray(corpus)
    if corpus.ndim != 2:
        raise ValueError(f"`corpus` must be a 2-D array; received shape {corpus.shape}.")
    for name, value in (("top_k", top_k), ("oversampling", oversampling)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"`{name}` must be a positive int; received {value!r}.")
    binary = precision in ("binary", "ubinary")
    dim = queries.shape[1]
    expected = (dim + 7) // 8 if binary else dim
    if corpus.shape[1] != expected:
        raise ValueError(
            f"A {precision} corpus for {dim}-dimensional queries has {expected} columns; "
            f"received {corpus.shape[1]}."
        )
    if precision in ("int8", "uint8"):
        if not isinstance(calibration, QuantizationCalibration):
            raise ValueError(
                f"Searching a {precision} corpus needs its QuantizationCalibration (`calibration`)."
            )
        calibration.check_dim(dim)
    return queries, corpus


def _first_pass_top_k(queries, corpus, precision, calibration, similarity, depth,
                      query_chunk_size, corpus_chunk_size):
    """`quantized_search`'s first pass: the best `depth` documents per query.

    float32 by `similarity`, binary precisions by minus the Hamming distance,
    int8 / uint8 by the product (or cosine) of the codes; see
    `quantized_search`.
    """
    if precision == "float32":
        return exact_search(queries, corpus, depth, similarity, query_chunk_size,
                            corpus_chunk_size)
    if precision in ("binary", "ubinary"):
        q = quantize_embeddings(queries, precision)
        to_bytes = (lambda a: a) if precision == "ubinary" else (
            lambda a: (a.astype(np.int16) + 128).astype(np.uint8))
        return _hamming_top_k(_as_uint64_words(to_bytes(q)), _as_uint64_words(to_bytes(corpus)),
                              depth, query_chunk_size, corpus_chunk_size)
    q = quantize_embeddings(queries, precision, calibration=calibration)
    shift = 0 if precision == "int8" else -128  # codes centred on 0
    return _code_product_top_k(q, corpus, shift, depth, query_chunk_size, corpus_chunk_size,
                               cosine=similarity == "cosine")


def _candidate_reader(rescore_embeddings, corpus, precision, calibration, dim):
    """A function from sorted document ids to their float32 vectors, for rescoring.

    The rows of `rescore_embeddings` (checked to be `[documents, dim]`)
    when given, else the corpus' rows dequantized.
    """
    if rescore_embeddings is None:
        return lambda rows: dequantize_embeddings(corpus[rows], precision, calibration, dim=dim)
    n_docs = corpus.shape[0]
    # A memory-mapped array stays one: only the candidates' rows are read.
    documents = rescore_embeddings
    if not hasattr(documents, "shape"):
        documents = np.asarray(documents)
    if documents.shape != (n_docs, dim):
        raise ValueError(
            f"`rescore_embeddings` must have shape [{n_docs}, {dim}]; received {documents.shape}."
        )
    return lambda rows: np.asarray(documents[rows], np.float32)


def _rescore_top_k(queries, indices, k, candidate_rows, similarity, query_chunk_size):
    """The best `k` of each query's candidates `indices`, by float32 `similarity`.

    `candidate_rows(rows)` returns the float32 vectors of the sorted,
    unique document ids `rows`. Ties go to the lower document id. Returns
    `(scores, indices)`, `[queries, k]` each, best first.
    """
    q_all = np.asarray(queries, np.float32)
    if similarity == "cosine":
        q_all = q_all / np.maximum(np.linalg.norm(q_all, axis=1, keepdims=True), 1e-12)
    out_scores = np.zeros((queries.shape[0], k), np.float32)
    out_indices = np.zeros((queries.shape[0], k), np.int64)
    # Rescored a block of queries at a time: the candidates' vectors take
    # `query_chunk_size x depth x dim` floats, never `queries x depth x dim`.
    for begin in range(0, queries.shape[0], query_chunk_size):
        block = indices[begin : begin + query_chunk_size]
        flat = np.unique(block)
        candidates = candidate_rows(flat)
        if similarity == "cosine":
            candidates = candidates / np.maximum(
                np.linalg.norm(candidates, axis=1, keepdims=True), 1e-12)
        position = np.searchsorted(flat, block)
        rescored = np.einsum("qd,qkd->qk", q_all[begin : begin + query_chunk_size],
                             candidates[position])
        order = np.lexsort((block, -rescored), axis=-1)[:, :k]
        out_scores[begin : begin + block.shape[0]] = np.take_along_axis(rescored, order, axis=1)
        out_indices[begin : begin + block.shape[0]] = np.take_along_axis(block, order, axis=1)
    return out_scores, out_indices


def _code_product_top_k(query_codes, corpus_codes, shift, k, query_chunk_size, corpus_chunk_size,
                        cosine=False):
    """Top-k by the inner product (or cosine) of (shifted) integer codes.

    Codes are at most 128 in magnitude, so every product sum below 2**24
    (any dimension up to 1,024) is an exact integer in float32: the BLAS
    product is exact. For cosine, it is divided by the two codes' norms.
    """
    n_q, n_d = query_codes.shape[0], corpus_codes.shape[0]
    out_v = np.zeros((n_q, k), np.float32)
    out_i = np.zeros((n_q, k), np.int64)
    for qb in range(0, n_q, query_chunk_size):
        q = query_codes[qb : qb + query_chunk_size].astype(np.float32) + shift
        best_v = np.zeros((q.shape[0], 0), np.float32)
        best_i = np.zeros((q.shape[0], 0), np.int64)
        for cb in range(0, n_d, corpus_chunk_size):
            c = corpus_codes[cb : cb + corpus_chunk_size].astype(np.float32) + shift
            scores = q @ c.T
            if cosine:
                scores /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
                scores /= np.maximum(np.linalg.norm(c, axis=1), 1e-12)[None, :]
            v, i = select_top_k(scores, k, offset=cb)
            best_v, best_i = merge_top_k(best_v, best_i, v, i.astype(np.int64), k)
        out_v[qb : qb + q.shape[0]] = best_v
        out_i[qb : qb + q.shape[0]] = best_i
    return out_v, out_i
