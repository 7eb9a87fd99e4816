"""Document retrieval on the BEIR layout: nDCG@10, MRR@10, MAP@100, Recall@k.

A BEIR folder holds `corpus.jsonl` (one JSON object per line with `_id`,
`title`, `text`), `queries.jsonl` (`_id`, `text`) and `qrels/test.tsv`
(and `qrels/dev.tsv`), tab-separated `query-id`, `corpus-id`, `score` with a
header line. `evaluate_retrieval` encodes the queries and the corpus
(documents as BEIR joins them: `"title text"`), runs an exact search in
bounded memory (`keras_sentemb.evaluation.search.exact_search`), optionally
an approximate one (faiss HNSW) whose recall against the exact one is
reported, and scores the ranking with trec_eval.

The metrics come from pytrec_eval (the `pytrec-eval-terrier` wheels, an
optional dependency: `pip install -e ".[retrieval]"`). It is chosen
over ir-measures because it *is* trec_eval, the reference implementation,
bound to Python, and BEIR computes its published numbers with it (so numbers
here compare with BEIR's); ir-measures is a front end that mostly delegates
to the same library, adding a dependency but no measure needed here. MRR@10
is trec_eval's `recip_rank` on the run cut at 10 documents, the same
quantity as BEIR's MRR@10.
"""

import json
import os
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

import numpy as np

from keras_sentemb.evaluation.search import approximate_search
from keras_sentemb.evaluation.search import check_similarity
from keras_sentemb.evaluation.search import exact_search
from keras_sentemb.evaluation.search import recall_at_k
from keras_sentemb.evaluation.sts import keras_hub_encoder
from keras_sentemb.missing_dependency import import_optional
from keras_sentemb.kernels.precision import reproducible

SPLITS = ("test", "dev", "train")
# Reported metric name -> (trec_eval measure, key in its output, run cut-off).
MEASURES = {
    "ndcg@10": ("ndcg_cut.10", "ndcg_cut_10", None),
    "mrr@10": ("recip_rank", "recip_rank", 10),
    "map@100": ("map_cut.100", "map_cut_100", None),
    "recall@1": ("recall.1", "recall_1", None),
    "recall@10": ("recall.10", "recall_10", None),
    "recall@100": ("recall.100", "recall_100", None),
}


class BeirFormatError(ValueError):
    """A BEIR file that cannot be read (the message names the file and line)."""


@dataclass
class BeirData:
    """A BEIR retrieval set held in memory.

    Args:
        corpus: dict. Document id -> `{"title": str, "text": str}`.
        queries: dict. Query id -> text.
        qrels: dict. Query id -> {document id: graded relevance (int)}.
        split: str. The qrels split this holds. Defaults to `"test"`.
        name: str. A name for reports. Defaults to `""`.
    """

    corpus: dict
    queries: dict
    qrels: dict
    split: str = "test"
    name: str = ""
    info: dict = field(default_factory=dict)


def _read_jsonl(path, kind):
    rows = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise BeirFormatError(f"{path} line {number}: not valid JSON ({e.msg})") from None
            if not isinstance(obj, dict) or "_id" not in obj:
                raise BeirFormatError(f"{path} line {number}: expected a JSON object with an '_id'")
            text = obj.get("text")
            if not isinstance(text, str):
                raise BeirFormatError(f"{path} line {number}: '{kind}' has no 'text' string")
            key = str(obj["_id"])
            if key in rows:
                raise BeirFormatError(f"{path} line {number}: duplicate _id {key!r}")
            title = obj.get("title") or ""
            if not isinstance(title, str):
                raise BeirFormatError(f"{path} line {number}: 'title' must be a string")
            rows[key] = {"title": title, "text": text} if kind == "document" else text
    return rows


def _read_qrels(path, corpus, queries):
    qrels = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            parts = line.split("\t")
            if len(parts) != 3:
                raise BeirFormatError(
                    f"{path} line {number}: expected 3 tab-separated fields "
                    f"(query-id, corpus-id, score), found {len(parts)}"
                )
            query_id, doc_id, score = parts
            try:
                score = int(score)
            except ValueError:
                if number == 1:
                    continue  # the header line
                raise BeirFormatError(
                    f"{path} line {number}: score must be an integer, found {score!r}"
                ) from None
            if query_id not in queries:
                raise BeirFormatError(
                    f"{path} line {number}: query id {query_id!r} is not in queries.jsonl"
                )
            if doc_id not in corpus:
                raise BeirFormatError(
                    f"{path} line {number}: corpus id {doc_id!r} is not in corpus.jsonl"
                )
            qrels.setdefault(query_id, {})[doc_id] = score
    return qrels


def load_beir(data_dir, split="test"):
    """Read a BEIR folder (`corpus.jsonl`, `queries.jsonl`, `qrels/SPLIT.tsv`).

    Only the queries judged in the split are kept. Malformed input (a line
    that is not JSON, a qrels id missing from the corpus or the queries, no
    judged query) raises `BeirFormatError` naming the file and line.

    Args:
        data_dir: str or path. The BEIR folder.
        split: str. `"test"`, `"dev"` or `"train"`. Defaults to `"test"`.

    Returns:
        `BeirData`.

    Examples:

    ```python
    data = load_beir("datasets/quora", split="dev")
    print(len(data.corpus), len(data.queries))
    ```
    """
    if split not in SPLITS:
        raise ValueError(f"`split` must be one of {SPLITS}. Received: split={split!r}.")
    folder = Path(os.fspath(data_dir))
    if not folder.is_dir():
        raise FileNotFoundError(f"BEIR folder not found: {folder}")
    paths = {
        "corpus": folder / "corpus.jsonl",
        "queries": folder / "queries.jsonl",
        "qrels": folder / "qrels" / f"{split}.tsv",
    }
    for path in paths.values():
        if not path.is_file():
            raise FileNotFoundError(f"BEIR file not found: {path}")
    corpus = _read_jsonl(paths["corpus"], "document")
    if not corpus:
        raise BeirFormatError(f"{paths['corpus']}: no documents")
    queries = _read_jsonl(paths["queries"], "query")
    qrels = _read_qrels(paths["qrels"], corpus, queries)
    if not qrels:
        raise BeirFormatError(f"{paths['qrels']}: no judged query (empty query set)")
    queries = {q: queries[q] for q in qrels}
    return BeirData(corpus=corpus, queries=queries, qrels=qrels, split=split, name=folder.name)


def document_text(document):
    """A document as BEIR encodes it: `"title text"`, stripped (no title: the text)."""
    return (document.get("title", "") + " " + document["text"]).strip()


def retrieval_metrics(qrels, run):
    """nDCG@10, MRR@10, MAP@100 and Recall@1/10/100 (x100) by trec_eval.

    Each metric is computed per query by pytrec_eval and averaged over the
    queries of `qrels` (a query missing from `run` counts as 0). Documents
    with relevance > 0 are relevant; nDCG uses the graded relevance.

    Args:
        qrels: dict. Query id -> {document id: relevance (int)}.
        run: dict. Query id -> {document id: score}; higher is better.

    Returns:
        dict of metric name -> float (x100), plus `queries` (the count).

    Examples:

    >>> qrels = {"q1": {"d1": 1}, "q2": {"d3": 1}}
    >>> run = {"q1": {"d1": 2.0, "d2": 1.0}, "q2": {"d1": 2.0, "d3": 1.0}}
    >>> retrieval_metrics(qrels, run)["mrr@10"]
    75.0
    """
    # Optional dependency: trec_eval's metrics are needed only here.
    pytrec_eval = import_optional("pytrec_eval", "Retrieval metrics", "retrieval")
    if not qrels:
        raise ValueError("`qrels` is empty: no query to evaluate.")
    qrels = {str(q): {str(d): int(r) for d, r in docs.items()} for q, docs in qrels.items()}
    run = {str(q): {str(d): float(s) for d, s in docs.items()} for q, docs in run.items()}
    sums = {name: 0.0 for name in MEASURES}
    for name, (measure, key, cut) in MEASURES.items():
        this_run = run
        if cut is not None:
            # trec_eval's order: score descending, ties by document id descending.
            this_run = {q: dict(sorted(docs.items(), key=lambda x: (x[1], x[0]), reverse=True)[:cut])
                        for q, docs in run.items()}
        this_run = {q: docs for q, docs in this_run.items() if q in qrels and docs}
        per_query = pytrec_eval.RelevanceEvaluator(qrels, {measure}).evaluate(this_run)
        sums[name] = sum(values[key] for values in per_query.values())
    result = {name: round(100.0 * total / len(qrels), 4) for name, total in sums.items()}
    result["queries"] = len(qrels)
    return result


def _prompted(texts, prompt):
    return [prompt + t for t in texts] if prompt else list(texts)


def _encode(encoder, texts, batch_size, truncate_dim, show_progress, precision=None):
    if hasattr(encoder, "encode"):
        kwargs = {"batch_size": batch_size, "show_progress": show_progress}
        if truncate_dim is not None:
            kwargs["truncate_dim"] = truncate_dim
        if precision is not None:
            kwargs["precision"] = precision
        vectors = encoder.encode(texts, **reproducible(encoder.encode, kwargs))
    elif callable(encoder):
        if truncate_dim is not None:
            raise ValueError("`truncate_dim` needs an encoder with an `encode` method.")
        vectors = np.concatenate(
            [np.asarray(encoder(texts[i : i + batch_size]), np.float32)
             for i in range(0, len(texts), batch_size)]
        ) if texts else np.zeros((0, 0), np.float32)
    else:
        raise TypeError(
            "`encoder` must have an `encode(sentences, ...)` method or be a callable on a "
            f"list of strings. Received: {type(encoder).__name__}"
        )
    vectors = np.asarray(vectors, np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(texts):
        raise ValueError(
            f"The encoder must return an array of shape [{len(texts)}, dim]; received "
            f"{vectors.shape}."
        )
    return vectors


def ranked_run(query_ids, doc_ids, indices, top_k, ignore_identical_ids=True):
    """Run dict from search indices; scores are `top_k - rank` (the ranking as searched).

    trec_eval re-sorts a run by score (ties by document id); passing scores
    that decrease with the rank keeps exactly the order the search chose.
    """
    run = {}
    for qid, row in zip(query_ids, indices):
        docs = [doc_ids[i] for i in row if i >= 0]
        if ignore_identical_ids:
            docs = [d for d in docs if d != qid]
        docs = docs[:top_k]
        run[qid] = {d: float(top_k - rank) for rank, d in enumerate(docs)}
    return run


def _given_corpus_vectors(corpus_embeddings, documents, dim):
    """`corpus_embeddings` as an array, checked to hold one `dim`-wide row per document."""
    vectors = np.asarray(corpus_embeddings)
    if vectors.shape != (documents, dim):
        raise ValueError(f"`corpus_embeddings` must have shape [{documents}, {dim}]; "
                         f"received {vectors.shape}.")
    return vectors


def evaluate_retrieval(
    encoder,
    data,
    split="test",
    truncate_dim=None,
    query_prompt=None,
    corpus_prompt=None,
    similarity="cosine",
    batch_size=128,
    top_k=100,
    query_chunk_size=256,
    corpus_chunk_size=50_000,
    ignore_identical_ids=True,
    approximate=False,
    ef_search=None,
    show_progress=None,
    corpus_embeddings=None,
    precision=None,
):
    """Evaluate an encoder on a BEIR retrieval set: nDCG@10, MRR@10, MAP@100, Recall@k.

    Queries and documents (`"title text"`, as BEIR joins them) are encoded,
    optionally with prompts (`query_prompt="query: "`); each query's top
    `top_k` documents are found by exact search in blocks (float32, a
    running top-k, never a queries x corpus matrix); the ranking is scored
    by trec_eval (pytrec_eval) and reported x100. As in BEIR, a document
    whose id equals the query id is not counted as retrieved
    (`ignore_identical_ids`), so a question never finds itself.

    With `approximate=True`, a faiss HNSW index is searched as well and the
    result gains `approximate` (the same metrics on its ranking) and
    `approximate_recall@TOP_K` (x100): the share of the exact top `top_k`
    documents it found.

    Args:
        encoder: a `SentenceEncoder` (anything with `encode(sentences,
            batch_size=..., show_progress=...)`), a keras-hub `TextEmbedder`,
            or a callable `f(list[str]) -> array [n, dim]`.
        data: str, path or `BeirData`. A BEIR folder or data already read
            with `load_beir`.
        split: str. The qrels split when `data` is a folder. Defaults to
            `"test"`.
        truncate_dim: int or None. Keep the first `truncate_dim` dimensions
            (see `SentenceEncoder.encode`). Defaults to `None` (all).
        query_prompt: str or None. Prefix of every query. Defaults to `None`.
        corpus_prompt: str or None. Prefix of every document. Defaults to
            `None`.
        similarity: str. `"cosine"` or `"dot"`: the score the model was
            trained with (every keras_sentemb method trains with cosine).
            Defaults to `"cosine"`.
        batch_size: int. Encoding batch size. Defaults to `128`.
        top_k: int. Documents retrieved per query (the run's depth; MAP and
            Recall are cut at 100). Defaults to `100`.
        query_chunk_size: int. Queries scored at once. Defaults to `256`.
        corpus_chunk_size: int. Documents scored at once. Defaults to
            `50_000`.
        ignore_identical_ids: bool. Drop a retrieved document whose id is the
            query's id. Defaults to `True`.
        approximate: bool. Also search a faiss HNSW index (needs faiss) and
            report its recall against exact search. Defaults to `False`.
        ef_search: int or None. HNSW search breadth (see
            `approximate_search`). Defaults to `None`.
        show_progress: bool or None. Progress bars for encoding and search;
            `None` shows them for 5,000 texts or more.
        corpus_embeddings: array or None. Precomputed document vectors
            (rows in `data.corpus` order), to evaluate many query settings
            against one encoded corpus. Defaults to `None` (encode).
        precision: str or None. What a `SentenceEncoder` encodes in
            (`"float32"`, `"bfloat16"`, `"int8"`). Defaults to `None`:
            float32, the same scores on every CPU.

    Returns:
        dict with `ndcg@10`, `mrr@10`, `map@100`, `recall@1`, `recall@10`,
        `recall@100` (x100), `queries`, `documents`, and `protocol`
        (split, similarity, prompts, dimension, top_k, search).

    Examples:

    ```python
    import keras_sentemb

    encoder = keras_sentemb.SentenceEncoder.from_preset("default")
    result = keras_sentemb.evaluate_retrieval(encoder, "datasets/quora", split="test")
    print(result["ndcg@10"])
    ```

    References:
        - [Thakur et al., 2021](https://arxiv.org/abs/2104.08663) (BEIR)
    """
    check_similarity(similarity)
    encoder = keras_hub_encoder(encoder)
    if truncate_dim is not None and (
        not isinstance(truncate_dim, (int, np.integer)) or isinstance(truncate_dim, bool)
        or truncate_dim < 1
    ):
        raise ValueError(f"`truncate_dim` must be a positive int; received {truncate_dim!r}.")
    if not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise ValueError(f"`top_k` must be a positive int; received {top_k!r}.")
    if not isinstance(data, BeirData):
        data = load_beir(data, split=split)
    if not data.queries:
        raise ValueError("The BEIR set has no query to evaluate.")
    doc_ids = list(data.corpus)
    query_ids = list(data.queries)
    if show_progress is None:
        show_progress = len(doc_ids) >= 5000
    queries = _prompted([data.queries[q] for q in query_ids], query_prompt)
    query_vectors = _encode(encoder, queries, batch_size, truncate_dim, show_progress, precision)
    if corpus_embeddings is None:
        documents = _prompted([document_text(data.corpus[d]) for d in doc_ids], corpus_prompt)
        corpus_vectors = _encode(encoder, documents, batch_size, truncate_dim, show_progress,
                                 precision)
    else:
        corpus_vectors = _given_corpus_vectors(corpus_embeddings, len(doc_ids),
                                               query_vectors.shape[1])
    # One more than top_k per query so that dropping the query's own id
    # still leaves top_k documents.
    depth = top_k + (1 if ignore_identical_ids else 0)
    _, indices = exact_search(
        query_vectors, corpus_vectors, top_k=depth, similarity=similarity,
        query_chunk_size=query_chunk_size, corpus_chunk_size=corpus_chunk_size,
        show_progress=show_progress,
    )
    run = ranked_run(query_ids, doc_ids, indices, top_k, ignore_identical_ids)
    result = retrieval_metrics(data.qrels, run)
    result["documents"] = len(doc_ids)
    result["protocol"] = {
        "name": "BEIR retrieval (trec_eval via pytrec_eval)",
        "data": data.name,
        "split": data.split,
        "similarity": similarity,
        "query_prompt": query_prompt,
        "corpus_prompt": corpus_prompt,
        "dim": int(query_vectors.shape[1]),
        "truncate_dim": truncate_dim,
        "precision": precision or "float32",
        "top_k": int(top_k),
        "ignore_identical_ids": bool(ignore_identical_ids),
        "search": "exact",
    }
    if approximate:
        _, approx = approximate_search(
            query_vectors, corpus_vectors, top_k=depth, similarity=similarity,
            ef_search=ef_search,
        )
        result["approximate"] = retrieval_metrics(
            data.qrels, ranked_run(query_ids, doc_ids, approx, top_k, ignore_identical_ids)
        )
        result["approximate"]["index"] = "faiss IndexHNSWFlat (M=32, efConstruction=200)"
        result[f"approximate_recall@{top_k}"] = round(
            100.0 * recall_at_k(approx[:, :top_k], indices[:, :top_k]), 4)
    return result


def retrieval_markdown(result):
    """A markdown table of an `evaluate_retrieval` result."""
    protocol = result.get("protocol", {})
    names = list(MEASURES)
    lines = [
        f"## Retrieval: {protocol.get('data') or 'BEIR'} ({protocol.get('split')})",
        "",
        f"{result['queries']} queries, {result['documents']} documents; {protocol.get('similarity')}, "
        f"dim {protocol.get('dim')}, exact search; x100.",
        "",
        "| search | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
        "| exact | " + " | ".join(f"{result[n]:.2f}" for n in names) + " |",
    ]
    if "approximate" in result:
        lines.append("| HNSW | " + " | ".join(f"{result['approximate'][n]:.2f}" for n in names) + " |")
        recall = [k for k in result if k.startswith("approximate_recall@")]
        if recall:
            lines += ["", f"HNSW {recall[0].replace('approximate_', '')} against exact search: "
                          f"{result[recall[0]]:.2f}"]
    return "\n".join(lines) + "\n"
