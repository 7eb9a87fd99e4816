"""Streamed training data: peak memory and time to the first step do not grow with the corpus.

    python benchmarks/streamed_corpus_memory.py --output benchmarks/results/streamed_corpus_memory.json

Writes two corpora under a scratch folder: 10 million lines in 10 files and
100,000 lines in 1 file (the bundled wiki sentences, each line numbered so
no two lines are the same), then trains on each exactly as a user runs it,
in a fresh process:

    keras-sentemb train simcse --model default --train-file 'DIR/part-*.txt' \
        --output OUT --steps 30 --batch-size 16 --dev none

A glob is streamed (a shuffle buffer of 10,000 rows; nothing counts the
lines). A third run trains on the 100k-line file given as a plain path, read
into memory as before (the reference). For each run: the child's own peak
resident memory (`ru_maxrss` from `os.wait4`), the seconds to the end of the
first training step (the first `1/30` of the progress bar on stderr) and to
the end; for the streamed corpora also the seconds from nothing to the first
batch of the stream alone (no model; median of 3, in its own process). One
JSON record with the CPU model and flags; the times are
wall-clock and only comparable within one run on an otherwise idle machine.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import BUNDLED_SENTENCES  # noqa: E402
from _common import cpu_info  # noqa: E402

FIRST_STEP = re.compile(rb"(?<![0-9])1/(\d+)")


def write_corpus(folder, lines, files, source):
    """`lines` numbered lines of `source`'s sentences in `files` files `part-K.txt`."""
    with open(source, encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()]
    os.makedirs(folder, exist_ok=True)
    per_file = -(-lines // files)
    written = 0
    for k in range(files):
        n = min(per_file, lines - written)
        with open(os.path.join(folder, f"part-{k}.txt"), "w", encoding="utf-8") as out:
            chunk = []
            for i in range(written, written + n):
                chunk.append(f"{sentences[i % len(sentences)]} ({i})\n")
                if len(chunk) == 100_000:
                    out.write("".join(chunk))
                    chunk = []
            out.write("".join(chunk))
        written += n
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))


FIRST_BATCH = """
import statistics, sys, time
import keras_sentemb
from keras_sentemb.data.stream_batches import stream_batches
times = []
for _ in range(3):
    t = time.perf_counter()
    ds = stream_batches(keras_sentemb.streamed(sys.argv[1]), ("sentence",), int(sys.argv[2]),
                        no_duplicates=True)
    next(iter(ds))
    times.append(time.perf_counter() - t)
print(round(statistics.median(times), 3))
"""


def first_batch_seconds(train_file, args):
    """Median of 3: seconds from nothing to the first batch of the stream (data only, no model)."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE) + os.pathsep
               + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-c", FIRST_BATCH, train_file, str(args.batch_size)],
                         env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def train(train_file, args, scratch, name):
    out = os.path.join(scratch, f"out_{name}")
    cmd = [sys.executable, "-m", "keras_sentemb", "train", "simcse", "--model", args.model,
           "--train-file", train_file, "--output", out, "--steps", str(args.steps),
           "--batch-size", str(args.batch_size), "--dev", "none", "--verbose", "1"]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE) + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    log = os.path.join(scratch, f"log_{name}.txt")
    first_step = None
    t = time.perf_counter()
    with open(log, "wb") as stderr:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
        while True:  # os.wait4, not Popen.poll: it gives this child's own peak RSS
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if first_step is None:
                with open(log, "rb") as f:
                    if any(int(m.group(1)) == args.steps for m in FIRST_STEP.finditer(f.read())):
                        first_step = time.perf_counter() - t
            time.sleep(0.2)
    seconds = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        with open(log, encoding="utf-8", errors="replace") as f:
            raise SystemExit(f.read()[-3000:])
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(out + ".backup", ignore_errors=True)
    return {
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "seconds_to_first_step": None if first_step is None else round(first_step, 1),
        "seconds": round(seconds, 1),
        "command": "keras-sentemb " + " ".join(cmd[3:]).replace(scratch, "DIR"),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=10_000_000)
    p.add_argument("--files", type=int, default=10)
    p.add_argument("--small-lines", type=int, default=100_000)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--model", default="default")
    p.add_argument("--scratch", default=None, help="folder for the corpora (default: a temp dir, "
                   "removed at the end)")
    p.add_argument("--output", default=None, help="write the JSON record here too")
    args = p.parse_args()
    scratch = args.scratch or tempfile.mkdtemp(prefix="streamed_corpus_")
    try:
        big = os.path.join(scratch, "big")
        small = os.path.join(scratch, "small")
        t = time.perf_counter()
        big_bytes = write_corpus(big, args.lines, args.files, BUNDLED_SENTENCES)
        small_bytes = write_corpus(small, args.small_lines, 1, BUNDLED_SENTENCES)
        written_s = time.perf_counter() - t
        runs = {
            "streamed_big": dict(
                lines=args.lines, files=args.files, bytes=big_bytes,
                stream_first_batch_seconds=first_batch_seconds(
                    os.path.join(big, "part-*.txt"), args),
                **train(os.path.join(big, "part-*.txt"), args, scratch, "big")),
            "streamed_small": dict(
                lines=args.small_lines, files=1, bytes=small_bytes,
                stream_first_batch_seconds=first_batch_seconds(
                    os.path.join(small, "part-*.txt"), args),
                **train(os.path.join(small, "part-*.txt"), args, scratch, "small")),
            "in_memory_small": dict(lines=args.small_lines, files=1, bytes=small_bytes,
                                    **train(os.path.join(small, "part-0.txt"), args, scratch,
                                            "memory")),
        }
    finally:
        if args.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)
    big_run, small_run = runs["streamed_big"], runs["streamed_small"]
    record = {
        "benchmark": "streamed_corpus_memory",
        "steps": args.steps, "batch_size": args.batch_size, "model": args.model,
        "runs": runs,
        "peak_rss_ratio_big_vs_small": round(big_run["peak_rss_mib"] / small_run["peak_rss_mib"], 3),
        "seconds_writing_corpora": round(written_s, 1),
        "timing_note": "wall-clock seconds on the machine as it was (possibly shared): "
                       "compare them only within this record",
        **cpu_info(),
    }
    text = json.dumps(record, indent=1)
    print(text)
    if args.output:
        tmp = args.output + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, args.output)


if __name__ == "__main__":
    main()
