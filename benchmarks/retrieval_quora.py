"""Retrieval on Quora duplicates (BEIR layout): models, truncation, quantization, HNSW.

    python benchmarks/quora_beir.py --output runs/quora-beir
    python benchmarks/retrieval_quora.py --data runs/quora-beir --split test \
        --models default,runs/untuned-minilm --output runs/retrieval_quora.json

For each model, the split's queries and the whole corpus are encoded once
(float32); then, on those vectors:

- `truncation`: nDCG@10, MRR@10, MAP@100, Recall@1/10/100 (x100, trec_eval)
  at each `--dims` (the first d dimensions, renormalised when the model
  normalises: what `encode(truncate_dim=d)` returns), exact search;
- `quantization` (full dimension): for float32, int8 and ubinary indexes,
  the index size, the search time and nDCG@10 (and its share of float32's)
  without rescoring, rescored against the dequantized candidates
  (`oversampling` x top-k candidates, float32 queries), and rescored
  against float32 documents read from a memory-mapped `.npy`;
- `hnsw`: a faiss HNSW index's build and search time, its recall@100
  against exact search and its nDCG@10.

Search times are the best of `--repeats` runs over all queries (one
process, 2 shared CPU cores here: compare within a run). One JSON document
(with the CPU model and flags) to stdout and `--output`.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from _common import cpu_info  # noqa: E402


def best_time(fn, repeats):
    best, out = None, None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        elapsed = time.perf_counter() - start
        best = elapsed if best is None else min(best, elapsed)
    return best, out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="BEIR folder (benchmarks/quora_beir.py)")
    p.add_argument("--split", default="test")
    p.add_argument("--models", default="default,runs/untuned-minilm")
    p.add_argument("--dims", default="384,256,128,64,32")
    p.add_argument("--top-k", type=int, default=100)
    p.add_argument("--oversampling", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--output", default=None)
    p.add_argument("--cache", default=None,
                   help="folder for the encoded vectors (a rerun skips encoding)")
    args = p.parse_args(argv)

    from keras_sentemb import SentenceEncoder
    from keras_sentemb.evaluation.beir import document_text
    from keras_sentemb.evaluation.beir import load_beir
    from keras_sentemb.evaluation.beir import ranked_run
    from keras_sentemb.evaluation.beir import retrieval_metrics
    from keras_sentemb.evaluation.search import approximate_search
    from keras_sentemb.evaluation.search import exact_search
    from keras_sentemb.evaluation.search import recall_at_k
    from keras_sentemb.models.truncation import truncate_embeddings
    from keras_sentemb.quantization import QuantizationCalibration
    from keras_sentemb.quantization import quantize_embeddings
    from keras_sentemb.quantization import quantized_search

    data = load_beir(args.data, split=args.split)
    query_ids, doc_ids = list(data.queries), list(data.corpus)
    queries = [data.queries[q] for q in query_ids]
    documents = [document_text(data.corpus[d]) for d in doc_ids]
    depth = args.top_k + 1  # the query's own id is dropped from its run

    def metrics(indices):
        return retrieval_metrics(data.qrels, ranked_run(query_ids, doc_ids, indices, args.top_k))

    result = {
        "benchmark": "retrieval_quora", "data": os.path.basename(os.path.normpath(args.data)),
        "split": args.split, "queries": len(queries), "documents": len(documents),
        "top_k": args.top_k, "oversampling": args.oversampling, "similarity": "cosine",
        "metrics": "trec_eval via pytrec_eval, x100", **cpu_info(), "models": {},
    }
    for model in [m for m in args.models.split(",") if m]:
        encoder = SentenceEncoder.from_preset(model)
        cache = None
        if args.cache:
            name = os.path.basename(os.path.normpath(model))
            cache = Path(args.cache) / f"{name}-{result['data']}-{args.split}.npz"
        if cache is not None and cache.is_file():
            saved = np.load(cache)
            q_full, d_full, encode_s = saved["queries"], saved["corpus"], float(saved["seconds"])
        else:
            start = time.perf_counter()
            q_full = encoder.encode(queries, batch_size=args.batch_size)
            d_full = encoder.encode(documents, batch_size=args.batch_size)
            encode_s = time.perf_counter() - start
            if cache is not None:
                cache.parent.mkdir(parents=True, exist_ok=True)
                np.savez(cache, queries=q_full, corpus=d_full, seconds=encode_s)
        entry = {"dim": int(d_full.shape[1]), "normalize": bool(encoder.normalize),
                 "encode_seconds": round(encode_s, 1), "truncation": {}, "quantization": {}}
        dims = {int(d) for d in args.dims.split(",") if int(d) <= d_full.shape[1]}
        for dim in sorted(dims | {int(d_full.shape[1])}, reverse=True):
            q = truncate_embeddings(q_full, dim, encoder.normalize)
            d = truncate_embeddings(d_full, dim, encoder.normalize)
            seconds, (_, indices) = best_time(lambda: exact_search(q, d, depth), args.repeats)
            entry["truncation"][dim] = dict(metrics(indices), search_seconds=round(seconds, 3))
            print(f"{model} dim {dim}: nDCG@10 {entry['truncation'][dim]['ndcg@10']:.2f}",
                  file=sys.stderr)
        full = entry["truncation"][d_full.shape[1]]["ndcg@10"]
        _, exact_indices = exact_search(q_full, d_full, depth)
        calibration = QuantizationCalibration.from_embeddings(d_full)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "corpus.npy")
            np.save(path, d_full)
            on_disk = np.load(path, mmap_mode="r")
            for precision in ("float32", "int8", "ubinary"):
                index = quantize_embeddings(d_full, precision, calibration=calibration)
                row = {"index_bytes": int(index.nbytes)}
                for label, kwargs in (
                    ("no_rescore", {"rescore": False}),
                    ("rescore_dequantized", {"rescore": True}),
                    ("rescore_float32_mmap", {"rescore": True, "rescore_embeddings": on_disk}),
                ):
                    if precision == "float32" and label != "no_rescore":
                        continue
                    seconds, (_, indices) = best_time(
                        lambda: quantized_search(q_full, index, precision, top_k=depth,
                                                 calibration=calibration,
                                                 oversampling=args.oversampling, **kwargs),
                        args.repeats)
                    scores = metrics(indices)
                    row[label] = {
                        "ndcg@10": scores["ndcg@10"], "recall@100": scores["recall@100"],
                        "ndcg@10_retained_%": round(100 * scores["ndcg@10"] / full, 2),
                        "search_seconds": round(seconds, 3),
                        "recall@100_vs_exact": round(100 * recall_at_k(indices[:, :100],
                                                                       exact_indices[:, :100]), 2),
                    }
                entry["quantization"][precision] = row
                print(f"{model} {precision}: {row}", file=sys.stderr)
        try:
            start = time.perf_counter()
            _, approx = approximate_search(q_full, d_full, top_k=depth)
            hnsw_s = time.perf_counter() - start
            entry["hnsw"] = {
                "index": "faiss IndexHNSWFlat M=32 efConstruction=200 efSearch=2*top_k",
                "build_and_search_seconds": round(hnsw_s, 2),
                "recall@100_vs_exact": round(100 * recall_at_k(approx[:, :100],
                                                               exact_indices[:, :100]), 2),
                "ndcg@10": metrics(approx)["ndcg@10"],
            }
        except ImportError as e:
            entry["hnsw"] = f"skipped: {e}"
        result["models"][model] = entry
        del encoder
    text = json.dumps(result, indent=2)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
