"""Latency of `SentenceEncoder.encode` per request, in each precision (a service's view).

A service calls `encode` once per request, often with one sentence. What a
call costs besides its forward pass then decides the latency: in bfloat16 and
int8 a float32 encoder computes through a copy (its bfloat16 twin, its int8
weights), and keeping that copy current must not cost a pass over every
weight at every call.

    python benchmarks/encode_request_latency.py
    python benchmarks/encode_request_latency.py --precisions float32,bfloat16,int8,auto \\
        --batch-sizes 1,32 --json benchmarks/results/encode_request_latency.json

One process: the model loaded once (float32, as `from_preset` loads it), then
for each precision and request size, warm-up calls, then timed calls until
both `--min-requests` and `--min-seconds` are reached, each request the next
sentences of a shuffled list of the bundled Wikipedia sample. Prints a table
and writes a JSON with the median and p90 latency per request (ms), the CPU
and the load average before and after (shared machines make the numbers noisy).
"""

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cpu_info  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

WIKI = Path(__file__).resolve().parents[1] / "keras_sentemb" / "resources" / "wiki" / "wiki10k.txt"


def percentile(values, q):
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def requests(sentences, batch_size, rng):
    """Endless requests of `batch_size` sentences, the next of a shuffled list each time."""
    order = list(range(len(sentences)))
    cursor = len(order)
    while True:
        if cursor + batch_size > len(order):
            rng.shuffle(order)
            cursor = 0
        yield [sentences[i] for i in order[cursor:cursor + batch_size]]
        cursor += batch_size


def time_requests(call, batch_size, sentences, warmup, min_requests, min_seconds, seed=0):
    """Median / p90 latency (ms) of `call(request)` on requests of `batch_size` sentences."""
    source = requests(sentences, batch_size, random.Random(seed))
    for _ in range(warmup):
        call(next(source))
    latencies = []
    began = time.perf_counter()
    while len(latencies) < min_requests or time.perf_counter() - began < min_seconds:
        batch = next(source)
        start = time.perf_counter()
        call(batch)
        latencies.append(time.perf_counter() - start)
    return {"batch_size": batch_size, "requests": len(latencies),
            "median_ms": round(1000 * statistics.median(latencies), 2),
            "p90_ms": round(1000 * percentile(latencies, 0.9), 2)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default")
    p.add_argument("--precisions", default="float32,bfloat16,int8,auto",
                   help="comma-separated; `auto` is `encode`'s default (no `precision`)")
    p.add_argument("--batch-sizes", default="1,32")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--min-requests", type=int, default=30)
    p.add_argument("--min-seconds", type=float, default=5.0)
    p.add_argument("--json", default=None, help="also write the results to this file")
    args = p.parse_args(argv)

    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.kernels.precision import resolve_encode_precision

    with open(WIKI, encoding="utf-8") as f:
        sentences = [line.rstrip("\n") for line in f if line.strip()]
    load_before = os.getloadavg()
    encoder = SentenceEncoder.from_preset(args.model)
    rows = []
    for precision in args.precisions.split(","):
        kwargs = {} if precision == "auto" else {"precision": precision}
        for batch_size in (int(b) for b in args.batch_sizes.split(",")):
            row = time_requests(lambda batch: encoder.encode(batch, **kwargs), batch_size,
                                sentences, args.warmup, args.min_requests, args.min_seconds)
            row["precision"] = precision
            row["resolved"] = resolve_encode_precision(kwargs.get("precision"))
            rows.append(row)
            print(f"{precision:>9} ({row['resolved']}) x {batch_size:>3}: median "
                  f"{row['median_ms']:8.2f} ms, p90 {row['p90_ms']:8.2f} ms", file=sys.stderr)
    result = {"command": "python benchmarks/encode_request_latency.py " + " ".join(
                  argv if argv is not None else sys.argv[1:]),
              "model": args.model, "machine": {**cpu_info(), "load_average": load_before,
                                               "load_average_end": os.getloadavg()},
              "rows": rows}
    print("| precision | sentences a request | median (ms) | p90 (ms) |\n|---|---|---|---|")
    for row in rows:
        print(f"| {row['precision']} ({row['resolved']}) | {row['batch_size']} | "
              f"{row['median_ms']:.1f} | {row['p90_ms']:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
