"""Whole-process encode: `keras-sentemb encode` against sentence-transformers' equivalent script.

    python benchmarks/encode_process.py --n 100 --rounds 5                 # cold start
    python benchmarks/encode_process.py --n 100 --sides ours-float32,ours-float32-allextras
    python benchmarks/encode_process.py --n 2000 --rounds 3 \
        --sides ours-float32,ours-bfloat16,st-float32,st-bfloat16          # precision
    python benchmarks/encode_process.py --n 2000 --max-isa avx2            # AVX2-only, emulated

Each side is one fresh process that imports its toolkit, loads the bundled
all-MiniLM-L6-v2, encodes the first `--n` wiki sentences from a file and
writes a `.npy`: ours is `python -m keras_sentemb encode --model default
--input F --output X.npy [--precision bfloat16]`; sentence-transformers'
(`st_encode_process.py`, run by `ST_PYTHON`, default this Python) loads
`SentenceTransformer(folder)` (`.bfloat16()` for its bfloat16), calls
`encode` at its default batch size and `np.save`s the float32 result. The
sides alternate round by round (ours, theirs, ours, ...), in one process
tree, so a change in the machine's load hits both. Reports each side's median
and best wall time and peak RSS (from `wait4`), the machine's load average
before and after, the ratios of medians, the cosine of each side's vectors
to our float32 vectors, the CPU model and flags; one JSON line (also
appended to `--out`).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    add_max_isa_argument, apply_max_isa, cpu_info, measure, read_lines, sentences_file,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


# `ours-float32-allextras`: the same command with Keras importing every
# optional package it finds (what the CLI avoids), to see what that saves.
ALL_EXTRAS = ("import sys; from keras_sentemb.cli import program; "
              "program.KERAS_IMPORT_TIME_EXTRAS = program.DOWNLOAD_EXTRAS = (); "
              "sys.exit(program.main(sys.argv[1:]))")
SIDES = ("ours-float32", "ours-bfloat16", "ours-float32-allextras", "st-float32", "st-bfloat16")


def command(side, inp, outp, st_python, batch_size):
    toolkit, precision = side.split("-")[:2]
    if toolkit == "ours":
        start = ([sys.executable, "-c", ALL_EXTRAS] if side.endswith("allextras")
                 else [sys.executable, "-m", "keras_sentemb"])
        cmd = start + ["encode", "--model", "default",
                       "--input", inp, "--output", outp, "--precision", precision]
        if batch_size:
            cmd += ["--batch-size", str(batch_size)]
        return cmd
    cmd = [st_python, str(HERE / "st_encode_process.py"), "--input", inp, "--output", outp,
           "--precision", precision]
    if batch_size:
        cmd += ["--batch-size", str(batch_size)]
    return cmd


def cosine_min(a, b):
    import numpy as np

    num = (a * b).sum(1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return float(np.min(num / np.maximum(den, 1e-12)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", default=None)
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--sides", default="ours-float32,st-float32")
    p.add_argument("--batch-size", type=int, default=None,
                   help="both sides' batch size (default: each toolkit's own default)")
    p.add_argument("--st-python", default=os.environ.get("ST_PYTHON", sys.executable))
    p.add_argument("--out", default=str(REPO / "runs" / "encode_process.jsonl"))
    add_max_isa_argument(p)
    args = p.parse_args()
    apply_max_isa(args.max_isa)
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    for side in sides:
        if side not in SIDES:
            p.error(f"unknown side {side!r}")

    import numpy as np

    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TF_CPP_MIN_LOG_LEVEL="2")
    lines = read_lines(sentences_file(args.sentences), args.n)
    times = {s: [] for s in sides}
    rss = {s: [] for s in sides}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "input.txt")
        with open(inp, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        vectors = {}
        for r in range(args.rounds):
            order = sides if r % 2 == 0 else sides[::-1]
            for side in order:
                outp = os.path.join(tmp, f"{side}.npy")
                wall, peak = measure(command(side, inp, outp, args.st_python, args.batch_size),
                                     env)
                times[side].append(wall)
                rss[side].append(peak)
                vectors[side] = np.load(outp)
                print(f"round {r} {side}: {wall:.2f} s, peak RSS {peak:.0f} MiB", file=sys.stderr)
    load_after = os.getloadavg()
    result = {"benchmark": "encode_process", "n": len(lines), "rounds": args.rounds,
              "batch_size": args.batch_size, **cpu_info(),
              "loadavg_before": [round(x, 2) for x in load_before],
              "loadavg_after": [round(x, 2) for x in load_after], "sides": {}}
    reference = vectors.get("ours-float32")
    for side in sides:
        entry = {"median_s": round(statistics.median(times[side]), 2),
                 "best_s": round(min(times[side]), 2),
                 "all_s": [round(t, 2) for t in times[side]],
                 "peak_rss_mib": round(max(rss[side]))}
        if reference is not None:
            entry["min_cosine_to_ours_float32"] = round(cosine_min(vectors[side], reference), 5)
        result["sides"][side] = entry
    ratios = {}
    for ours in [s for s in sides if s.startswith("ours")]:
        for st in [s for s in sides if s.startswith("st")]:
            ratios[f"{ours}_vs_{st}"] = round(
                result["sides"][st]["median_s"] / result["sides"][ours]["median_s"], 2)
    result["speedup_by_median"] = ratios  # > 1: ours faster
    line = json.dumps(result)
    print(line)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a", encoding="utf-8") as f:
        f.write(line + "\n")


if __name__ == "__main__":
    main()
