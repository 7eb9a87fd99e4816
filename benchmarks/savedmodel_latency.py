"""Latency and throughput of an exported keras_sentemb SavedModel (CPU).

Calls the `serving_default` signature in-process, the way TF Serving runs it
(one request = one call on a batch of raw strings: tokenization, the
Transformer, pooling and normalisation in the graph), for requests of 1, 32
and 256 sentences drawn from the bundled Wikipedia sample (each request takes
the next sentences of a shuffled list, so requests differ). Each batch size
gets warm-up calls, then timed calls until both `--min-requests` and
`--min-seconds` are reached.

    python benchmarks/savedmodel_latency.py                      # exports "default" first
    python benchmarks/savedmodel_latency.py --saved-model saved_models/minilm
    python benchmarks/savedmodel_latency.py --json results.json

Prints a table and one JSON line: per batch size the median and p90 latency of
a request (ms) and the throughput (sentences/s = sentences sent / time spent
in the timed requests), plus the machine's CPU count and load average, since
shared machines make the numbers noisy.
"""

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

WIKI = Path(__file__).resolve().parents[1] / "keras_sentemb" / "resources" / "wiki" / "wiki10k.txt"


def read_sentences(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def resolve_version(path):
    """A version folder, or the highest numbered version under a base folder."""
    path = Path(path)
    if (path / "saved_model.pb").exists():
        return path
    versions = [p for p in path.iterdir() if p.is_dir() and p.name.isdigit()] if path.is_dir() else []
    if not versions:
        raise SystemExit(f"No SavedModel at {path} (expected saved_model.pb or NAME/<version>/).")
    return max(versions, key=lambda p: int(p.name))


def percentile(values, q):
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def bench(fn, sentences, batch_size, warmup, min_requests, min_seconds, rng):
    import tensorflow as tf

    order = list(range(len(sentences)))
    rng.shuffle(order)
    cursor = 0

    def next_batch():
        nonlocal cursor
        if cursor + batch_size > len(order):
            rng.shuffle(order)
            cursor = 0
        batch = [sentences[i] for i in order[cursor : cursor + batch_size]]
        cursor += batch_size
        return tf.constant(batch)

    for _ in range(warmup):
        fn(sentences=next_batch())["embeddings"].numpy()
    latencies = []
    began = time.perf_counter()
    while len(latencies) < min_requests or time.perf_counter() - began < min_seconds:
        batch = next_batch()
        start = time.perf_counter()
        out = fn(sentences=batch)["embeddings"].numpy()
        latencies.append(time.perf_counter() - start)
    assert out.shape[0] == batch_size
    total = sum(latencies)
    return {
        "batch_size": batch_size,
        "requests": len(latencies),
        "median_ms": 1000 * statistics.median(latencies),
        "p90_ms": 1000 * percentile(latencies, 0.9),
        "mean_ms": 1000 * total / len(latencies),
        "sentences_per_s": batch_size * len(latencies) / total,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--saved-model", default=None,
                   help="version folder or model base folder; default: export --model to a temp folder")
    p.add_argument("--model", default="default", help="model to export when --saved-model is not given")
    p.add_argument("--chunk-size", type=int, default=None,
                   help="export option: sentences per length-sorted chunk, 0 = one batch; default: the exporter's")
    p.add_argument("--sentences", default=str(WIKI))
    p.add_argument("--batch-sizes", default="1,32,256")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--min-requests", type=int, default=20)
    p.add_argument("--min-seconds", type=float, default=10.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the results to this file")
    args = p.parse_args(argv)

    sentences = read_sentences(args.sentences)
    load_before = os.getloadavg()
    tmp = None
    if args.saved_model is None:
        from keras_sentemb.export.saved_model import DEFAULT_CHUNK_SIZE, export_saved_model
        from keras_sentemb.models import SentenceEncoder

        tmp = tempfile.TemporaryDirectory(prefix="sentemb-bench-")
        encoder = SentenceEncoder.from_preset(args.model)
        chunk = DEFAULT_CHUNK_SIZE if args.chunk_size is None else args.chunk_size
        chunk = None if chunk == 0 else chunk
        began = time.perf_counter()
        path = Path(export_saved_model(encoder, Path(tmp.name) / "model", chunk_size=chunk))
        export_s = time.perf_counter() - began
        print(f"exported {args.model} in {export_s:.1f} s (chunk_size={chunk})", file=sys.stderr)
        del encoder
    else:
        path = resolve_version(args.saved_model)

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    began = time.perf_counter()
    model = tf.saved_model.load(str(path))
    fn = model.signatures["serving_default"]
    load_s = time.perf_counter() - began
    began = time.perf_counter()
    fn(sentences=tf.constant(sentences[:1]))["embeddings"].numpy()
    first_call_s = time.perf_counter() - began

    rng = random.Random(args.seed)
    results = []
    for batch_size in (int(b) for b in args.batch_sizes.split(",")):
        results.append(
            bench(fn, sentences, batch_size, args.warmup, args.min_requests, args.min_seconds, rng)
        )
    meta_file = path / "assets.extra" / "sentemb_export.json"
    meta = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    report = {
        "benchmark": "savedmodel_latency",
        "saved_model": str(path) if tmp is None else f"{args.model} (exported to a temp folder)",
        "chunk_size": meta.get("chunk_size"),
        "max_length": meta.get("max_length"),
        "sentences_file": os.path.basename(args.sentences),
        "load_s": round(load_s, 2),
        "first_call_s": round(first_call_s, 2),
        "results": [{k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()}
                    for r in results],
        "cpu_count": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "tensorflow": tf.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    print(f"SavedModel: {report['saved_model']}  (load {load_s:.1f} s, first call {first_call_s:.2f} s)")
    print(f"{'batch':>6} {'requests':>9} {'median ms':>10} {'p90 ms':>9} {'sentences/s':>12}")
    for r in results:
        print(f"{r['batch_size']:>6} {r['requests']:>9} {r['median_ms']:>10.1f} "
              f"{r['p90_ms']:>9.1f} {r['sentences_per_s']:>12.1f}")
    print(f"load average before/after: {report['loadavg_before']} / {report['loadavg_after']} "
          f"on {report['cpu_count']} CPUs")
    print(json.dumps(report))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    if tmp is not None:
        tmp.cleanup()
    return report


if __name__ == "__main__":
    main()
