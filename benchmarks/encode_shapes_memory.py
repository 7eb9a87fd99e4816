"""What each new batch shape costs a long-running `encode` process, with TensorFlow's oneDNN ops on and off.

`encode` pads each batch to one of a bounded set of shapes (rows up to
`batch_size`, widths from `ENCODE_BUCKETS` / `EXACT_BUCKETS`). A service meets
those shapes one by one, over many requests. This script meets them on
purpose: one call per shape of a grid of row counts and widths, reading the
process's RSS and glibc's heap in use (`mallinfo2`) after every `--every`
new shapes, then a second pass over the same shapes (no new shape: what the
process holds should not move). Each setting runs in a fresh process:

- `onednn`: TensorFlow's defaults (its oneDNN kernels on, x86 CPUs);
- `no_onednn`: `TF_ENABLE_ONEDNN_OPTS=0` (Eigen's kernels instead).

```
python benchmarks/encode_shapes_memory.py --model small
python benchmarks/encode_shapes_memory.py --model default --rows 1-32:2 --widths 4-120:4
python benchmarks/encode_shapes_memory.py --model small --precision float32,bfloat16
```

`--precision` names what `encode` computes in (`auto`, the default: bfloat16 on a CPU
that computes it natively, float32 elsewhere); each precision runs every setting, and
the table names the precision each process resolved.

The table gives, per setting, the heap in use after each block of new shapes,
after the second pass, and the time of both passes.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SETTINGS = {"onednn": {}, "no_onednn": {"TF_ENABLE_ONEDNN_OPTS": "0"}}
WORDS = ("alpha", "beta", "gamma", "delta", "epsilon")


def span(text):
    """`"a-b:s"` -> `range(a, b + 1, s)` (`:s` optional, 1 by default)."""
    bounds, _, step = text.partition(":")
    low, _, high = bounds.partition("-")
    return range(int(low), int(high or low) + 1, int(step or 1))


def shapes(rows, widths):
    """The grid, widths outer: each `(rows, words)` a batch of its own shape."""
    return [(r, w) for w in widths for r in rows]


def worker(args):
    """One setting in this process: prints one JSON line."""
    from soak import heap_mib
    from soak import rss_mib

    from keras_sentemb import SentenceEncoder

    encoder = SentenceEncoder.from_preset(args.model_path)
    grid = shapes(span(args.rows), span(args.widths))

    def call(rows, words):
        sentences = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(words))
                     for i in range(rows)]
        encoder.encode(sentences, batch_size=max(span(args.rows)), precision=args.precision)

    call(1, 1)
    samples = [(0, round(rss_mib()), round(heap_mib()[0], 1))]
    start = time.perf_counter()
    for n, (rows, words) in enumerate(grid, start=1):
        call(rows, words)
        if n % args.every == 0 or n == len(grid):
            samples.append((n, round(rss_mib()), round(heap_mib()[0], 1)))
    first = time.perf_counter() - start
    start = time.perf_counter()
    for rows, words in grid:
        call(rows, words)
    second = time.perf_counter() - start
    from keras_sentemb.kernels.precision import resolve_encode_precision

    print(json.dumps({"precision": resolve_encode_precision(args.precision),
                      "shapes": len(grid), "samples": samples,
                      "again": (round(rss_mib()), round(heap_mib()[0], 1)),
                      "first_pass_s": round(first, 1), "second_pass_s": round(second, 1)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="small", help="small, default or a folder")
    parser.add_argument("--rows", default="1-32:2", help="row counts, a-b:step")
    parser.add_argument("--widths", default="2-119:3", help="words per sentence, a-b:step")
    parser.add_argument("--every", type=int, default=100, help="new shapes between samples")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--precision", default="auto",
                        help="what encode computes in: auto, float32, bfloat16 (comma-separated)")
    parser.add_argument("--json", default=None, help="write every number to this file")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model-path", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    import soak
    from _common import cpu_info

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model
        if args.model == "small":
            path = str(soak.small_model(Path(tmp) / "small"))
        for precision in args.precision.split(","):
            for name in args.settings.split(","):
                env = dict(os.environ, **SETTINGS[name])
                out = subprocess.run(
                    [sys.executable, __file__, "--worker", "--model-path", path, "--rows",
                     args.rows, "--widths", args.widths, "--every", str(args.every),
                     "--precision", precision],
                    env=env, capture_output=True, text=True, check=True)
                key = name if precision == "auto" else f"{name} {precision}"
                results[key] = json.loads(out.stdout.strip().splitlines()[-1])
    print("| setting | computes in | shapes | heap in use after 0 / each block of new shapes (MiB) "
          "| after a second pass | RSS start / end (MiB) | first / second pass (s) |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        heap = " / ".join(f"{h:.0f}" for _, _, h in r["samples"])
        print(f"| {name} | {r['precision']} | {r['shapes']} | {heap} | {r['again'][1]:.0f} | "
              f"{r['samples'][0][1]} / {r['again'][0]} | {r['first_pass_s']} / "
              f"{r['second_pass_s']} |")
    if args.json:
        # Absolute paths (a model folder, the output) are written by their names only.
        words = [Path(a).name if os.path.isabs(a) else a for a in sys.argv[1:]]
        record = {"command": "python benchmarks/encode_shapes_memory.py " + " ".join(words),
                  "model": Path(args.model).name,
            "rows": args.rows, "widths": args.widths, "precision": args.precision,
            "results": results,
            "machine": {**cpu_info(), "load_average": os.getloadavg()}}
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
