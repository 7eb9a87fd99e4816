"""Where a cold `keras-sentemb encode` spends its time: a phase table of the whole process.

    python benchmarks/cold_start_breakdown.py --n 100 --rounds 3
    git archive OLD_COMMIT | tar -x -C /tmp/before
    python benchmarks/cold_start_breakdown.py --n 100 --rounds 5 --baseline /tmp/before

Each round is one fresh process that runs what
`python -m keras_sentemb encode --model default --input F --output X.npy`
runs (`keras_sentemb.cli.program`: `run` where it exists, else `main`),
with timers wrapped around its steps: the interpreter's start, the imports
(TensorFlow, Keras, keras-hub, TensorFlow Text, ...: a meta-path hook times
each package's import, nested imports included, wherever it happens),
TensorFlow's start, reading the input, loading the model (the backbone:
built and its weights loaded; the tokenizer: constructed; the rest),
encoding (tokenizing, whose first call traces the tokenizer graph; the
first forward batch, which traces the forward pass and compiles its
kernels; the other batches), writing the `.npy` and the interpreter's exit.
For each phase it reports wall time and CPU time (user + system of all the
process' threads; CPU time is the steadier figure on a shared machine), the
median over `--rounds`. With `--baseline DIR` the checkout in DIR is
measured too, its rounds alternating with this checkout's, so that a change
in the machine's load hits both: a before/after table, with the cosine of
the two sides' vectors.

The top-level phases partition the process' wall time (`other` is what no
timer covers: argument parsing, Python's own work between steps); the
indented rows break a phase down. The forward batches run side by side on
worker threads: the first batch's row is its call (wall) and the whole
process' CPU time over it, which includes the second batch once the first
has traced the graph; the next row is from the end of the first batch to the
end of the last. The import table is
cumulative (a package's row includes the packages it imports first). One
JSON object with the CPU model and flags is written to `--out`; the tables
go to stdout.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cpu_info, read_lines, sentences_file  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# Packages whose import is timed (cumulative: nested imports included).
WATCHED_IMPORTS = ("numpy", "tensorflow", "keras", "keras_hub", "tensorflow_text",
                   "kagglehub", "scipy", "sklearn", "h5py", "safetensors",
                   "keras_sentemb.cli", "keras_sentemb.models.sentence_encoder")

# The child: runs `keras_sentemb.cli.main(argv)` with timers around its steps
# and writes what it measured as JSON to the file named by argv[1].
CHILD = r'''
import sys, time
_T0 = time.time()
_C0 = time.process_time()
import importlib.abc, importlib.machinery, json, os, threading

REPORT = sys.argv[1]
ARGV = sys.argv[2:]
WATCHED = set(WATCHED_IMPORTS)
events = {"start": [_T0, _C0], "phases": [], "imports": {}, "forward_calls": [], "traces": []}
_local = threading.local()


def now():
    return time.time(), time.process_time()


def timed(name, fn, record=None):
    """`fn` wrapped: its outermost call in the main thread is recorded as phase `name`."""
    def wrapper(*args, **kwargs):
        depth = getattr(_local, name, 0)
        setattr(_local, name, depth + 1)
        t0, c0 = now()
        try:
            return fn(*args, **kwargs)
        finally:
            setattr(_local, name, depth)
            if depth == 0 and threading.current_thread() is threading.main_thread():
                t1, c1 = now()
                (record if record is not None else events["phases"]).append([name, t0, t1, c0, c1])
    wrapper.__wrapped__ = fn
    return wrapper


PATCHES = {}


def patch_on_import(module, fn):
    PATCHES.setdefault(module, []).append(fn)


class Timer(importlib.abc.MetaPathFinder):
    """Times the import of watched packages and patches modules once imported."""

    def find_spec(self, name, path, target=None):
        if name not in WATCHED and name not in PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module):
            t0, c0 = now()
            run(module)
            t1, c1 = now()
            if name in WATCHED:
                events["imports"].setdefault(name, [t0, t1, c0, c1])
            for patch in PATCHES.get(name, ()):
                patch(module)

        loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, Timer())


def patch_program(program):
    program.import_keras_without_extras = timed(
        "import TensorFlow, Keras, keras-hub", program.import_keras_without_extras)
    program.start_tensorflow = timed("start TensorFlow", program.start_tensorflow)


def patch_encode_cli(encode):
    encode.read_lines = timed("read input", encode.read_lines)
    encode.load_encoder = timed("load model", encode.load_encoder)
    encode.write_file_atomic = timed("write .npy", encode.write_file_atomic)


def patch_keras_hub(keras_hub):
    backbone = keras_hub.models.Backbone
    from_preset = backbone.from_preset.__func__
    backbone.from_preset = classmethod(
        timed("  backbone: build and load weights", from_preset))
    for cls in (keras_hub.tokenizers.WordPieceTokenizer, keras_hub.tokenizers.BytePairTokenizer):
        cls.__init__ = timed("  tokenizer: construct", cls.__init__)


def patch_engine(engine):
    cls = engine.EncodingEngine
    cls.encode = timed("encode", cls.encode)
    cls._tokenize_to_numpy = timed("  tokenize (first call traces)", cls._tokenize_to_numpy)
    run_batches = engine.run_batches
    from keras_sentemb.models import encoder_forward
    hidden_states = encoder_forward.EncoderForward.hidden_states

    def run_batches_timed(fn, batches, parallel_batches=None):
        # On worker threads; the work itself runs on TensorFlow's thread pools,
        # so the CPU recorded is the whole process' (`process_time`).
        def forward(token_ids, mask):
            t0, c0 = now()
            out = fn(token_ids, mask)
            t1, c1 = now()
            events["forward_calls"].append([list(token_ids.shape), t0, t1, c0, c1])
            return out
        return run_batches(forward, batches, parallel_batches)

    def hidden_states_timed(self, inputs, training=False):
        # Called inside the encode graph's body only while it is traced
        # (Python on this thread: its own CPU time).
        if not engine.tf.inside_function():
            return hidden_states(self, inputs, training)
        t0, c0 = time.time(), time.thread_time()
        out = hidden_states(self, inputs, training)
        events["traces"].append([t0, time.time(), time.thread_time() - c0])
        return out

    engine.run_batches = run_batches_timed
    encoder_forward.EncoderForward.hidden_states = hidden_states_timed


patch_on_import("keras_sentemb.cli.program", patch_program)
patch_on_import("keras_sentemb.cli.encode", patch_encode_cli)
patch_on_import("keras_hub", patch_keras_hub)
patch_on_import("keras_sentemb.models.encoding_engine", patch_engine)

from keras_sentemb.cli import program  # noqa: E402

cli_main = program.main


def main(argv=None):
    try:
        return cli_main(argv)
    finally:
        events["end"] = list(now())
        events["modules"] = sorted({m.split(".")[0] for m in sys.modules})
        with open(REPORT, "w") as f:
            json.dump(events, f)


# As `keras-sentemb` runs: `program.run` (main, then the exit it chooses) where there is one.
program.main = main
sys.argv = ["keras-sentemb", *ARGV]
events["main"] = list(now())
if hasattr(program, "run"):
    program.run()
sys.exit(main(ARGV))
'''


def run_child(argv, env, cwd):
    """One cold process; returns (its events, wall seconds, CPU seconds, peak RSS MiB)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        report = f.name
    script = CHILD.replace("WATCHED_IMPORTS", repr(WATCHED_IMPORTS))
    try:
        spawn = time.time()
        # In the checkout: `python -c` puts the working folder first on sys.path.
        p = subprocess.Popen([sys.executable, "-c", script, report, *argv], env=env, cwd=cwd,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, err = p.communicate()
        end = time.time()
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode != 0:
            raise SystemExit(f"the encode process failed:\n{err.decode('utf-8', 'replace')[-3000:]}")
        with open(report) as f:
            events = json.load(f)
    finally:
        os.unlink(report)
    events["spawn"], events["exit"] = spawn, end
    return events, usage


def phase_rows(events, cpu_total):
    """[(name, wall_s, cpu_s)] of one process: top-level phases, indented breakdowns."""
    rows = []
    spawn, t_end = events["spawn"], events["exit"]
    start_wall, start_cpu = events["start"]
    main_wall, main_cpu = events["main"]
    end_wall, end_cpu = events["end"]
    rows.append(("interpreter start", start_wall - spawn, start_cpu))
    rows.append(("import the CLI (numpy, keras_sentemb.cli)", main_wall - start_wall,
                 main_cpu - start_cpu))
    top = [p for p in events["phases"] if not p[0].startswith("  ")]
    sub = [p for p in events["phases"] if p[0].startswith("  ")]
    covered_wall = covered_cpu = 0.0
    for name, t0, t1, c0, c1 in top:
        rows.append((name, t1 - t0, c1 - c0))
        covered_wall += t1 - t0
        covered_cpu += c1 - c0
        inside = [s for s in sub if t0 <= s[1] and s[2] <= t1]
        for sname, s0, s1, d0, d1 in inside:
            rows.append((sname, s1 - s0, d1 - d0))
        if name == "load model" and inside:
            rows.append(("  other (files, encoder, kernels)",
                         (t1 - t0) - sum(s[2] - s[1] for s in inside),
                         (c1 - c0) - sum(s[4] - s[3] for s in inside)))
        if name == "encode":
            calls = sorted(events["forward_calls"], key=lambda c: c[1])
            if calls:
                first = calls[0]
                last = max(calls, key=lambda c: c[2])
                rows.append(("  forward: first batch (trace, compile, run)",
                             first[2] - first[1], first[4] - first[3]))
                for t0, t1, cpu in events["traces"][:1]:
                    rows.append(("    of which: tracing the forward graph", t1 - t0, cpu))
                rows.append(("  forward: after the first batch ends", last[2] - first[2],
                             last[4] - first[4]))
    rows.append(("other (argument parsing, between steps)",
                 (end_wall - main_wall) - covered_wall, (end_cpu - main_cpu) - covered_cpu))
    rows.append(("interpreter exit", t_end - end_wall, cpu_total - end_cpu))
    rows.append(("total", t_end - spawn, cpu_total))
    return rows


def import_rows(events):
    return [(f"import {name}", t1 - t0, c1 - c0)
            for name, (t0, t1, c0, c1) in sorted(events["imports"].items(), key=lambda kv: kv[1][0])]


def medians(runs):
    """Per row name, the median wall and CPU over runs (rows in the first run's order)."""
    names = []
    for rows in runs:
        for name, _, _ in rows:
            if name not in names:
                names.append(name)
    out = []
    for name in names:
        walls = [w for rows in runs for n, w, _ in rows if n == name]
        cpus = [c for rows in runs for n, _, c in rows if n == name and c is not None]
        out.append({"phase": name, "wall_s": round(statistics.median(walls), 3),
                    "cpu_s": round(statistics.median(cpus), 3) if cpus else None,
                    "rounds": len(walls)})
    return out


def table(sides, key):
    """The `key` rows ("phases" or "imports") of each side, side by side: wall and CPU seconds."""
    labels = list(sides)
    names = []
    for label in labels:
        names += [r["phase"] for r in sides[label][key] if r["phase"] not in names]
    head = f"{'':48s}" + "".join(f" {label + ' wall':>14s} {label + ' CPU':>14s}" for label in labels)
    lines = [head]
    for name in names:
        line = f"{name:48s}"
        for label in labels:
            row = next((r for r in sides[label][key] if r["phase"] == name), None)
            wall = "" if row is None else f"{row['wall_s']:.2f}"
            cpu = "" if row is None or row["cpu_s"] is None else f"{row['cpu_s']:.2f}"
            line += f" {wall:>14s} {cpu:>14s}"
        lines.append(line)
    return "\n".join(lines)


def cosine_min(a, b):
    import numpy as np

    num = (a * b).sum(1)
    return float(np.min(num / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1),
                                         1e-12)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", default=None)
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--model", default="default")
    p.add_argument("--label", default="this", help="this checkout's name in the table and JSON")
    p.add_argument("--baseline", default=None,
                   help="another checkout (e.g. an export of an earlier commit) measured in "
                        "the same run, rounds alternating with this one's: a before/after table")
    p.add_argument("--baseline-label", default="before")
    p.add_argument("--out", default=str(HERE / "results" / "cold_start_breakdown.json"))
    args = p.parse_args()
    import numpy as np

    checkouts = {args.label: str(REPO)}
    if args.baseline:
        checkouts = {args.baseline_label: str(Path(args.baseline).resolve()), **checkouts}
    lines = read_lines(sentences_file(args.sentences), args.n)
    load_before = os.getloadavg()
    runs = {label: {"phases": [], "imports": [], "modules": [], "batches": []}
            for label in checkouts}
    vectors = {}
    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "input.txt")
        with open(inp, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        for r in range(args.rounds):
            order = list(checkouts) if r % 2 == 0 else list(checkouts)[::-1]
            for label in order:
                repo = checkouts[label]
                env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                    x for x in (repo, os.environ.get("PYTHONPATH")) if x), TF_CPP_MIN_LOG_LEVEL="2")
                outp = os.path.join(tmp, f"{label}.npy")
                argv = ["encode", "--model", args.model, "--input", inp, "--output", outp]
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                events, after = run_child(argv, env, repo)
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                rows = phase_rows(events, cpu)
                runs[label]["phases"].append(rows)
                runs[label]["imports"].append(import_rows(events))
                runs[label]["modules"] = events["modules"]
                runs[label]["batches"] = [c[0] for c in sorted(events["forward_calls"],
                                                               key=lambda c: c[1])]
                vectors[label] = np.load(outp)
                print(f"round {r} {label}: {rows[-1][1]:.2f} s wall, {cpu:.2f} s CPU",
                      file=sys.stderr)
    reference = vectors[next(iter(checkouts))]
    sides = {}
    for label, run in runs.items():
        sides[label] = {
            "phases": medians(run["phases"]), "imports": medians(run["imports"]),
            "forward_batches": run["batches"],
            "optional_packages_loaded": [m for m in ("tensorflow_text", "kagglehub", "sklearn",
                                                     "matplotlib", "IPython", "cv2", "scipy",
                                                     "h5py") if m in run["modules"]],
            "output_shape": list(vectors[label].shape),
            "min_cosine_to_first": round(cosine_min(vectors[label], reference), 6),
        }
    result = {"benchmark": "cold_start_breakdown", "n": len(lines), "rounds": args.rounds,
              "command": f"python -m keras_sentemb encode --model {args.model} --input F.txt "
                         "--output X.npy",
              **cpu_info(),
              "loadavg_before": [round(x, 2) for x in load_before],
              "loadavg_after": [round(x, 2) for x in os.getloadavg()],
              "sides": sides}
    print(f"median of {args.rounds} cold processes, {len(lines)} sentences (seconds)")
    print(table(sides, "phases"))
    print()
    print(table(sides, "imports"))
    for label, side in sides.items():
        print(f"\n{label}: forward batches (rows, width) {side['forward_batches']}; optional "
              f"packages loaded {side['optional_packages_loaded']}; min cosine to "
              f"{next(iter(checkouts))} {side['min_cosine_to_first']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
