"""Streaming encode to disk: peak RSS and time for growing corpora (linear, bounded memory).

    python benchmarks/streaming_encode.py --sizes 100000,300000,1000000 --shard-size 50000

For each size N the input is wiki100k repeated (and cut) to N lines, written
to a scratch folder, and encoded by the command line exactly as a user runs
it, in a fresh process:

    keras-sentemb encode --model default --input IN.txt --output OUT/ --shard-size S

The child's own peak resident memory (`ru_maxrss` from `os.wait4`) and the
wall time are reported, with the rate and the time per 100k lines; linear
time means a constant rate. While the child runs, its resident memory is read
every `--sample-s` seconds and each shard's progress line is stamped, so one
run also gives a trajectory: rows done, seconds and RSS at every shard (flat
memory and a constant rate within the run). One JSON line per size, then a
summary.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import re
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import sentences_file  # noqa: E402


def make_input(path, source, n):
    with open(source, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    with open(path, "w", encoding="utf-8") as out:
        written = 0
        while written < n:
            take = lines[: n - written]
            out.write("\n".join(take) + "\n")
            written += len(take)


SHARD_LINE = re.compile(r"^shard \S+: \d+ rows \((\d+) in all")


def resident_mib(pid):
    """Current resident memory of `pid` in MiB (None where /proc does not tell)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def stamp_shards(log, offset, trajectory, seconds, rss):
    """Append `{rows, seconds, rss_mib}` for each new shard line of `log`; the new offset."""
    with open(log, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    for line in data[:end].decode("utf-8", errors="replace").splitlines():
        m = SHARD_LINE.match(line)
        if m:
            trajectory.append({"rows": int(m.group(1)), "seconds": round(seconds, 1),
                               "rss_mib": rss})
    return offset + end


def run_one(n, args, scratch, source):
    text = os.path.join(scratch, f"in_{n}.txt")
    out = os.path.join(scratch, f"out_{n}")
    make_input(text, source, n)
    cmd = [sys.executable, "-m", "keras_sentemb", "encode", "--model", args.model,
           "--input", text, "--output", out, "--shard-size", str(args.shard_size),
           "--batch-size", str(args.batch_size)]
    if args.max_length:
        cmd += ["--max-length", str(args.max_length)]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE) + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    log = os.path.join(scratch, f"log_{n}.txt")
    t = time.perf_counter()
    with open(log, "wb") as stderr:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
        trajectory, rss_mib, read = [], [], 0
        while True:  # os.wait4, not Popen.poll: it gives this child's own peak RSS
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(args.sample_s)
            rss_mib.append(resident_mib(proc.pid))
            read = stamp_shards(log, read, trajectory, time.perf_counter() - t, rss_mib[-1])
    seconds = time.perf_counter() - t
    stamp_shards(log, read, trajectory, seconds, None)
    if os.waitstatus_to_exitcode(status) != 0:
        with open(log, encoding="utf-8", errors="replace") as f:
            raise SystemExit(f.read()[-3000:])
    result = {
        "lines": n, "shard_size": args.shard_size, "batch_size": args.batch_size,
        "seconds": round(seconds, 1), "lines_per_s": round(n / seconds, 1),
        "seconds_per_100k": round(seconds / n * 1e5, 1),
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "sampled_rss_mib": {"first": next((r for r in rss_mib if r), None),
                            "max": max((r for r in rss_mib if r), default=None),
                            "last": next((r for r in reversed(rss_mib) if r), None)},
        "trajectory": trajectory,
        "command": " ".join(cmd[1:]),
    }
    shutil.rmtree(out, ignore_errors=True)
    os.remove(text)
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100000,1000000")
    p.add_argument("--shard-size", type=int, default=50000)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-length", type=int, default=None)
    p.add_argument("--model", default="default")
    p.add_argument("--sentences", default=None)
    p.add_argument("--scratch", default=None)
    p.add_argument("--sample-s", type=float, default=2.0,
                   help="seconds between readings of the child's memory and progress")
    args = p.parse_args()
    source = sentences_file(args.sentences)
    scratch = args.scratch or tempfile.mkdtemp(prefix="stream_encode_")
    os.makedirs(scratch, exist_ok=True)
    results = []
    for n in sorted(int(x) for x in args.sizes.split(",")):
        r = run_one(n, args, scratch, source)
        results.append(r)
        print(json.dumps(r), flush=True)
    first, last = results[0], results[-1]
    print(json.dumps({
        "summary": "streaming_encode",
        "sizes": [r["lines"] for r in results],
        "seconds_per_100k": [r["seconds_per_100k"] for r in results],
        "time_ratio_last_vs_first_per_line": round(
            last["seconds_per_100k"] / first["seconds_per_100k"], 2),
        "peak_rss_mib": [r["peak_rss_mib"] for r in results],
    }))


if __name__ == "__main__":
    main()
