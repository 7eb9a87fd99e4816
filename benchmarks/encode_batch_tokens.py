"""Encode speed and peak memory against the cap on padded tokens per batch.

    python benchmarks/encode_batch_tokens.py --n 2000 --caps 1024,2048,4096,8192,none
    python benchmarks/encode_batch_tokens.py --n 2000 --caps 1024,2048,4096,8192,none --longest
    python benchmarks/encode_batch_tokens.py --n 2000 --caps 2048,4096,8192 --precision bfloat16

`encode(max_batch_tokens=...)` gives a batch at most that many padded tokens
(rows x width): batches of long sentences get fewer rows. Each cap runs in a
fresh process configured as `keras-sentemb encode` runs (two batches side by
side on a CPU-only host, `configure_encode_threads`), so its peak resident
memory (`ru_maxrss`) is its own. The default model encodes the first N
sentences of wiki100k (or the bundled 10k sample), or with `--longest` the N
longest ones, at batch size 128: one warm-up pass, then the best of
`--repeats` passes. One JSON line per cap (`"none"`: no cap), then a summary.
`--precision bfloat16` encodes as `keras-sentemb encode --precision bfloat16`
does (the encoder's bfloat16 twin).
"""

import argparse
import json
import os
import resource
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import configure_ours, cpu_info, our_encode_rate, sentences_file  # noqa: E402


def pick_sentences(path, n, longest):
    with open(path, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    if longest:
        lines = sorted(lines, key=len, reverse=True)
    return lines[:n]


def run_one(args):
    """The child: one cap, one process."""
    parallel = configure_ours(parallel_batches=None)
    from keras_sentemb import SentenceEncoder

    sentences = pick_sentences(sentences_file(args.sentences), args.n, args.longest)
    encoder = SentenceEncoder.from_preset("default")
    if args.precision != "float32":
        encoder = encoder.precision_twin(args.precision)
    cap = None if args.cap == "none" else int(args.cap)
    rate = our_encode_rate(
        encoder, sentences, args.repeats, batch_size=args.batch_size,
        max_length=args.max_length, parallel_batches=parallel,
        # No cap: a cap no batch reaches.
        max_batch_tokens=cap or args.batch_size * args.max_length,
    )
    print(json.dumps({
        "max_batch_tokens": args.cap if cap is None else cap,
        "precision": args.precision,
        "sentences_per_s": round(rate, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sentences", default=None)
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--longest", action="store_true",
                   help="the N longest sentences of the file instead of its first N")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--caps", default="1024,2048,4096,8192,none")
    p.add_argument("--precision", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--cap", default=None, help=argparse.SUPPRESS)  # the child's one cap
    args = p.parse_args()
    if args.cap is not None:
        run_one(args)
        return
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    rows = []
    for cap in args.caps.split(","):
        cmd = [sys.executable, os.path.abspath(__file__), "--cap", cap, "--n", str(args.n),
               "--batch-size", str(args.batch_size), "--max-length", str(args.max_length),
               "--repeats", str(args.repeats), "--precision", args.precision]
        if args.sentences:
            cmd += ["--sentences", args.sentences]
        if args.longest:
            cmd.append("--longest")
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if out.returncode != 0:
            sys.exit(f"cap {cap} failed:\n{out.stderr[-3000:]}")
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row.update({"n": args.n, "longest": args.longest, "batch_size": args.batch_size})
        print(json.dumps(row), flush=True)
        rows.append(row)
    best = max(rows, key=lambda r: r["sentences_per_s"])
    print(json.dumps({
        "summary": "encode_batch_tokens", "precision": args.precision, **cpu_info(),
        "fastest_cap": best["max_batch_tokens"],
        "sentences_per_s": {str(r["max_batch_tokens"]): r["sentences_per_s"] for r in rows},
        "peak_rss_mib": {str(r["max_batch_tokens"]): r["peak_rss_mib"] for r in rows},
    }))


if __name__ == "__main__":
    main()
