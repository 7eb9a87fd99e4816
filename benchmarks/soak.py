"""A long-running process, tried: many `encode` calls, a SavedModel's calls, repeated `fit_*`.

    python benchmarks/soak.py                                  # the full run: 20,000 calls, 30 fits
    python benchmarks/soak.py --calls 300 --fits 16 --json benchmarks/results/soak.json
    python benchmarks/soak.py --model small --parts encode,savedmodel   # 20,000 calls in minutes
    python benchmarks/soak.py --model small --parts encode --malloc-trim-every 100

Three parts, each in processes of its own (a fresh interpreter per part, as a
service or a notebook starts):

- `encode`: `--calls` calls of `SentenceEncoder.encode` in one process per
  precision (`float32`, `bfloat16`, `int8`), each on a request of random
  size: 1-256 sentences (log-uniform, so small and large requests both come
  often), each 0-5,000 characters (log-uniform) of mixed scripts (Latin,
  Cyrillic, Greek, Arabic, Devanagari, Chinese, emoji), different every call.
- `savedmodel`: the same requests sent to the exported SavedModel's
  `serving_default` in a process that imports only TensorFlow and
  tensorflow-text (as TF Serving runs it).
- `fit`: `--fits` calls of `keras_sentemb.fit(method, ...)` in one process,
  the methods that train on plain sentences in turn, each a few steps on
  the bundled Wikipedia sample, seed 0. After each, a fresh process fits
  one round of the methods (as the long process's first round) and then
  the same method, timed: its vectors each run in the long process must
  equal, and its time the control of the long process's (the host's speed
  drifts over a long run; a fresh process at the same moment drifts with
  it).

For each it records the resident memory (RSS, from /proc) at the start (the
model loaded), after the warm-up (the first `--warmup` share of the calls)
and at the end, its growth after the warm-up, the number of traced
functions (`tf.function` traces of the encoder's forward passes and
tokenizer, in every precision it built; they must stay at their bound:
one per forward-pass variant used, one tokenizer graph), and the p50 / p99
latency of a call after the warm-up (the first and last tenth apart, to
show the late calls cost what the early ones did). Beside each RSS sample:
glibc's heap in use and the freed memory it keeps (`mallinfo2`), which tell
memory the process holds from memory its allocator keeps. The fits: RSS after
each (also by kind of mapping: brk heap, anonymous, files), each run's
seconds (wall and CPU) and its CPU seconds over the fresh process's fit
right after it, a method's late runs against its early ones (the median of
its last three over that of its runs 2-4; within 10 %), by seconds and by
that ratio to the fresh process, the same late / early ratio for each phase
of a fit (its setup up to the first batch, the first batch with its trace,
the median later batch, and what follows the last batch), and the largest
relative difference of each run's vectors from the fresh process's.

`--model small` runs the default model's tokenizer, vocabulary, text
cleaning and pooling over a random 2-layer, 64-wide BERT: every step of a
call (tokenizing, packing, batching, tracing, the forward pass, pooling) at
a fraction of the arithmetic, so that 20,000 calls take minutes instead of
the default model's hours (about a second a call, on average, on 2 cores).

`--malloc-trim-every N` calls glibc's `malloc_trim(0)` after every N calls
(what a service can do to hand freed memory back to the system), and records
what the trims took, apart from the calls' latencies; in the `fit` part, after
every N fits (the finished run's model released), with the RSS after the
trim beside the RSS before it: what of the RSS was memory glibc had freed.

Prints a markdown table; `--json` writes every number.
"""

import argparse
import ctypes
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_info  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WIKI = REPO / "keras_sentemb" / "resources" / "wiki" / "wiki10k.txt"
PRECISIONS = ("float32", "bfloat16", "int8")
# The methods that train on plain sentences (the bundled sample), with options that keep each
# run a few steps long; supervised methods need labelled files the package does not bundle.
FIT_METHODS = {
    "simcse": {}, "ct": {"negatives": "k3"}, "consert": {}, "sg": {}, "mlm": {},
    "whitening": {}, "flow": {}, "static": {"dims": 32},
}
PROBE = ["A man is playing a guitar.", "Ein Hund läuft im Park.", "猫がマットの上に座っている。",
         "Кошка сидит на коврике.", ""]

# Characters of each script the requests mix.
SCRIPTS = [
    "abcdefghijklmnopqrstuvwxyz", "абвгдежзийклмнопрстуфхцчшщыэюя", "αβγδεζηθικλμνξοπρστυφχψω",
    "ابتثجحخدذرزسشصضطظعغفقكلمنهوي", "अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशषसह",
    "的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年", "😀😂👍🎉🔥❤️🌍🚀",
]


def rss_mib():
    """This process's resident memory now (MiB)."""
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _mallinfo2():
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2
    except (OSError, AttributeError):
        return None
    return libc.mallinfo2()


def heap_mib():
    """glibc's heap now: `(in use, free but kept)` in MiB (mallinfo2: bytes allocated by malloc
    and not freed, counting mmap'd blocks, and freed bytes the allocator still holds), or None
    where the C library has no mallinfo2. RSS that grows while the first stays flat is memory
    the allocator keeps, not memory the program holds."""
    info = _mallinfo2()
    if info is None:
        return None
    return ((info.uordblks + info.hblkhd) / 2**20, info.fordblks / 2**20)


def mapped_blocks_mib():
    """MiB of the blocks glibc mapped on their own (mallinfo2's `hblkhd`: each allocation above
    its mmap threshold), or None: with `rss_by_mapping`'s `malloc_arenas` and the brk heap,
    every mapping glibc's allocator owns."""
    info = _mallinfo2()
    return None if info is None else info.hblkhd / 2**20


# glibc reserves each per-thread arena's heap aligned to HEAP_MAX_SIZE: 64 MiB on 64-bit systems.
_ARENA_ALIGNMENT = 64 * 2**20


def rss_by_mapping():
    """Resident MiB by kind of mapping (/proc/self/smaps): `heap` (brk), `anonymous` (mmap'd
    memory with no file: glibc's large blocks and other arenas, allocators that map their own
    memory, JIT-compiled code), `files` (shared libraries and mapped files) and `other`
    (stacks, vdso). Shows where growth that glibc's heap counters do not see lives. Two parts of
    `anonymous` are told apart: `anonymous_executable` (pages that may run: code compiled at run
    time, XLA's and oneDNN's kernels), `thread_stacks` (a writable mapping right above a
    small inaccessible one, the guard page glibc puts under every thread's stack) and
    `malloc_arenas` (writable mappings that start on a 64 MiB boundary: the heaps of glibc's
    per-thread arenas, each reserved 64 MiB-aligned); `threads` counts the process's threads.
    What is left of `anonymous` is glibc's blocks mapped on their own (its `hblkhd`) and
    memory mapped outside `malloc`."""
    kinds = {"heap": 0.0, "anonymous": 0.0, "files": 0.0, "other": 0.0,
             "anonymous_executable": 0.0, "thread_stacks": 0.0, "malloc_arenas": 0.0}
    kind, sub, guard_end = "other", None, None
    try:
        with open("/proc/self/smaps", encoding="utf-8") as f:
            for line in f:
                head = line.split()
                if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                    low, high = (int(x, 16) for x in head[0].split("-"))
                    perms, path = head[1], head[5] if len(head) > 5 else ""
                    kind = ("heap" if path == "[heap]" else "anonymous" if not path
                            else "other" if path.startswith("[") else "files")
                    sub = None
                    if kind == "anonymous":
                        if "x" in perms:
                            sub = "anonymous_executable"
                        elif perms.startswith("rw") and guard_end == low:
                            sub = "thread_stacks"
                        elif perms.startswith("rw") and low % _ARENA_ALIGNMENT == 0:
                            sub = "malloc_arenas"
                    small_guard = kind == "anonymous" and perms.startswith("---") \
                        and high - low <= 2**16
                    guard_end = high if small_guard else None
                elif head and head[0] == "Rss:":
                    kinds[kind] += int(head[1]) / 1024
                    if sub:
                        kinds[sub] += int(head[1]) / 1024
        with open("/proc/self/status", encoding="utf-8") as f:
            threads = next((int(line.split()[1]) for line in f if line.startswith("Threads:")), 0)
    except OSError:
        return None
    return {**{k: round(v, 3) for k, v in kinds.items()}, "threads": threads}


def percentile(values, q):
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def log_uniform(rng, low, high):
    """An int in [low, high], log-uniform (`low` may be 0: drawn as 1 and shifted)."""
    import math

    return int(math.exp(rng.uniform(0, math.log(high - low + 1)))) - 1 + low


def request(rng, words):
    """1-256 sentences of 0-5,000 characters, words of every script mixed."""
    sentences = []
    for _ in range(log_uniform(rng, 1, 256)):
        size, parts = log_uniform(rng, 0, 5000), []
        total = 0
        while total < size:
            if rng.random() < 0.6:
                part = rng.choice(words)
            else:
                script = rng.choice(SCRIPTS)
                part = "".join(rng.choice(script) for _ in range(rng.randint(1, 8)))
            parts.append(part)
            total += len(part) + 1
        sentences.append(" ".join(parts)[:size])
    return sentences


def requests(calls, seed=0):
    import random

    rng = random.Random(seed)
    words = WIKI.read_text(encoding="utf-8").split()[:20000]
    for _ in range(calls):
        yield request(rng, words)


def traced_functions(encoder):
    """`{"count", "variants"}`: traces of the encoder's forward passes and tokenizer graphs,
    over the encoder and the twins it built for other precisions (int8 included)."""
    seen, count, variants = set(), 0, 0
    stack = [encoder]
    while stack:
        model = stack.pop()
        if id(model) in seen or model is None:
            continue
        seen.add(id(model))
        for fn in getattr(model, "_encode_fns", {}).values():
            count += fn.experimental_get_tracing_count()
            variants += 1
        graph = getattr(model, "_tokenize_graph", None)
        if graph is not None:
            count += graph.experimental_get_tracing_count()
            variants += 1
        stack.extend(getattr(model, "_precision_twins", {}).values())
        stack.append(getattr(model, "_int8_twin", None))
    return {"count": count, "variants": variants}


def _summary(latencies, rss, warm_index, traced=None):
    timed = latencies[warm_index:]
    tenth = max(1, len(timed) // 10)
    out = {
        "calls": len(latencies),
        "warmup_calls": warm_index,
        "rss_start_mib": round(rss["start"], 1),
        "rss_warm_mib": round(rss["warm"], 1),
        "rss_end_mib": round(rss["end"], 1),
        "rss_growth_after_warmup_pct": round(100 * (rss["end"] - rss["warm"]) / rss["warm"], 2),
        "rss_samples_mib": [round(v, 1) for v in rss["samples"]],
        "p50_ms": round(1000 * percentile(timed, 0.5), 2),
        "p99_ms": round(1000 * percentile(timed, 0.99), 2),
        "first_tenth_p50_ms": round(1000 * percentile(timed[:tenth], 0.5), 2),
        "last_tenth_p50_ms": round(1000 * percentile(timed[-tenth:], 0.5), 2),
    }
    if rss.get("heap"):
        out["heap_in_use_samples_mib"] = [round(used, 1) for used, _ in rss["heap"]]
        out["heap_free_kept_samples_mib"] = [round(free, 1) for _, free in rss["heap"]]
    if traced is not None:
        out["traced"] = traced
    return out


def malloc_trim():
    """glibc's `malloc_trim(0)`: hands the free memory of every arena back to the system; its
    seconds (None where the C library has no such call). Its own lookup, not
    `keras_sentemb.kernels.heap_trim`'s: the SavedModel worker imports nothing of the package."""
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    start = time.perf_counter()
    trim(0)
    return time.perf_counter() - start


def trimmed():
    """`malloc_trim(0)`, then the RSS (in all and by mapping) and glibc's heap in use after it:
    set beside the numbers read before the trim, what of the RSS was memory glibc had freed
    and kept. `{}` where the C library has no `malloc_trim`."""
    seconds = malloc_trim()
    if seconds is None:
        return {}
    heap = heap_mib()
    return {"trim_seconds": round(seconds, 4), "rss_after_trim_mib": round(rss_mib(), 1),
            **({} if heap is None else {"heap_in_use_after_trim_mib": round(heap[0], 1),
                                        "heap_free_kept_after_trim_mib": round(heap[1], 1),
                                        "heap_mapped_blocks_after_trim_mib":
                                            round(mapped_blocks_mib(), 1)}),
            "rss_by_mapping_after_trim_mib": rss_by_mapping()}


def _soak(call, calls, warmup, traced=None, trim_every=0):
    """Runs `call(sentences)` on `calls` requests; RSS, latency and traces as `_summary`.

    With `trim_every`, `malloc_trim` after every that many calls (its time apart from the
    calls': what a service that trims its heap pays)."""
    warm_index = max(1, int(calls * warmup))
    trims = []
    every = max(1, calls // 20)
    rss = {"start": rss_mib(), "samples": []}
    latencies, traces = [], {}
    for i, sentences in enumerate(requests(calls)):
        start = time.perf_counter()
        call(sentences)
        latencies.append(time.perf_counter() - start)
        if trim_every and (i + 1) % trim_every == 0:
            trims.append(malloc_trim())
        if i + 1 == warm_index:
            rss["warm"] = rss_mib()
            if traced is not None:
                traces["warm"] = traced()
        if (i + 1) % every == 0:
            rss["samples"].append(rss_mib())
            heap = heap_mib()
            if heap is not None:
                rss.setdefault("heap", []).append(heap)
            in_use = "" if heap is None else f", heap in use {heap[0]:.0f} MiB"
            print(f"soak: {i + 1} / {calls} calls, RSS {rss['samples'][-1]:.0f} MiB{in_use}",
                  file=sys.stderr, flush=True)  # progress of a run that takes an hour
    rss["end"] = rss_mib()
    if traced is not None:
        traces["end"] = traced()
    out = _summary(latencies, rss, warm_index, traces or None)
    if trim_every and trims and None not in trims:
        out["malloc_trim"] = {"every": trim_every, "calls": len(trims),
                              "p50_ms": round(1000 * percentile(trims, 0.5), 2),
                              "max_ms": round(1000 * max(trims), 2)}
    return out


def worker_encode(args):
    from keras_sentemb.models import SentenceEncoder

    encoder = SentenceEncoder.from_preset(args.model)
    result = _soak(lambda s: encoder.encode(s, precision=args.precision, show_progress=False),
                   args.calls, args.warmup, lambda: traced_functions(encoder),
                   args.malloc_trim_every)
    result["precision"] = args.precision
    print(json.dumps(result))


def worker_savedmodel(args):
    # A plain TensorFlow process: nothing of keras_sentemb or Keras is imported.
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (the tokenizer's ops)

    loaded = tf.saved_model.load(args.saved_model)
    serve = loaded.signatures["serving_default"]
    result = _soak(lambda s: serve(sentences=tf.constant(s, tf.string))["embeddings"].numpy(),
                   args.calls, args.warmup, trim_every=args.malloc_trim_every)
    result["keras_sentemb_imported"] = "keras_sentemb" in sys.modules
    print(json.dumps(result))


def _probe_vectors(model):
    import inspect

    takes = "precision" in inspect.signature(model.encode).parameters
    return model.encode(PROBE, **({"precision": "float32"} if takes else {})).tolist()


PHASES = ("setup", "first_step", "step", "finish")


def _phase_clock():
    """A Keras callback that stamps the start of training and the end of every batch (wall
    and CPU seconds): where a fit's time goes (see `_phases`)."""
    import keras

    class PhaseClock(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.stamps = []

        def on_train_begin(self, logs=None):
            self.stamps.append((time.perf_counter(), time.process_time()))

        def on_train_batch_end(self, batch, logs=None):
            self.stamps.append((time.perf_counter(), time.process_time()))

    return PhaseClock()


def _phases(start, clock, end):
    """A fit's seconds by phase, wall and CPU: `setup` (the model loaded, the data read, the
    step built, up to the first batch), `first_step` (the first batch: its trace and first
    execution), `step` (the median of every later batch: the steady cost of a step) and
    `finish` (after the last batch: the kept model restored and returned)."""
    from statistics import median

    stamps = clock.stamps
    if len(stamps) < 3:  # no training batches (or one): the whole fit is its setup
        return {}
    out = {}
    for k, name in ((0, "wall"), (1, "cpu")):
        later = [b[k] - a[k] for a, b in zip(stamps[1:], stamps[2:])]
        out.update({f"setup_{name}": stamps[0][k] - start[k],
                    f"first_step_{name}": stamps[1][k] - stamps[0][k],
                    f"step_{name}": median(later),
                    f"finish_{name}": end[k] - stamps[-1][k]})
    return {key: round(value, 3) for key, value in out.items()}


def _fit_once(method, args, callbacks=()):
    import keras_sentemb

    return keras_sentemb.fit(method, str(WIKI), model=args.model, steps=args.fit_steps,
                             batch_size=8, max_length=32, dev=None, verbose=0, seed=0,
                             callbacks=list(callbacks), **FIT_METHODS[method])


def _fit_run(method, args):
    """One timed fit of `method`: seconds (wall and CPU), by phase, and the probe's vectors."""
    clock = _phase_clock()
    start = (time.perf_counter(), time.process_time())
    model = _fit_once(method, args, callbacks=[clock])
    end = (time.perf_counter(), time.process_time())
    return {"seconds": round(end[0] - start[0], 2), "cpu_seconds": round(end[1] - start[1], 2),
            **_phases(start, clock, end), "vectors": _probe_vectors(model)}


def worker_fit(args):
    """The long process: one fit per method name read from stdin, one JSON line out per fit."""
    print(json.dumps({"rss_start_mib": round(rss_mib(), 1)}), flush=True)
    for i, line in enumerate(sys.stdin):
        run = _fit_run(line.strip(), args)  # the model is released before the samples below
        heap = heap_mib()
        run.update({"rss_mib": round(rss_mib(), 1),
                    **({} if heap is None else {"heap_in_use_mib": round(heap[0], 1),
                                                "heap_free_kept_mib": round(heap[1], 1),
                                                "heap_mapped_blocks_mib":
                                                    round(mapped_blocks_mib(), 1)}),
                    "rss_by_mapping_mib": rss_by_mapping()})
        if args.malloc_trim_every and (i + 1) % args.malloc_trim_every == 0:
            run.update(trimmed())
        print(json.dumps(run), flush=True)


def worker_fresh_fit(args):
    """A fresh process: one round of the long process's methods (`args.round`), each followed
    by the probe's vectors as there, then `args.methods` timed: the long process's early life
    replayed, so that its late runs are compared with a process that did the same work, less
    the age."""
    for method in args.round.split(","):
        _probe_vectors(_fit_once(method, args))
    print(json.dumps(_fit_run(args.methods, args)))


def _worker_argv(args, worker, **extra):
    argv = [sys.executable, __file__, "--worker", worker, "--model", args.model,
            "--calls", str(args.calls), "--warmup", str(args.warmup),
            "--fits", str(args.fits), "--fit-steps", str(args.fit_steps),
            "--malloc-trim-every", str(args.malloc_trim_every)]
    for key, value in extra.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return argv, env


def _child(args, worker, **extra):
    argv, env = _worker_argv(args, worker, **extra)
    # The worker's progress and errors go to this process's stderr; its result to stdout.
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"soak worker {worker} failed (exit {done.returncode}); its error is above")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _max_rel_diff(a, b):
    import numpy as np

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    rows = np.linalg.norm(a - b, axis=-1) / np.maximum(np.linalg.norm(b, axis=-1), 1e-12)
    return float(rows.max())


def late_over_early(by_method, key="seconds"):
    """Each method's late runs against its early ones, by `key`: the median of its last three
    runs over the median of its runs 2-4 (its first run traces and warms up). One run is a few
    steps, and a single pair of runs moves by 10-20 % with whatever else the CPU does; the
    medians of three do not. With fewer than six runs of a method, its last run over its
    second."""
    from statistics import median

    ratios = {}
    for method, own in by_method.items():
        values = [run[key] for run in own if key in run]
        if len(values) >= 6:
            ratios[method] = round(median(values[-3:]) / median(values[1:4]), 3)
        elif len(values) >= 3:
            ratios[method] = round(values[-1] / values[1], 3)
    return ratios


def fit_part(args):
    """The long process's fits, each followed by a fresh process's fit of the same method.

    A host's speed drifts over a half-hour run (other tenants, clocks): the late fits of a
    long process alone cannot tell a process that slows down from a host that does. A fresh
    process that replays the first round of the methods and then fits the method, timed, right
    after each long-process fit, can: each run's `cpu_over_fresh` is its CPU seconds over the
    fresh fit's, and a process that stays as fast keeps that ratio flat from its early runs
    to its late ones.
    """
    methods = list(FIT_METHODS) if args.methods is None else args.methods.split(",")
    argv, env = _worker_argv(args, "fit")
    long_run = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                env=env)
    rss_start = json.loads(long_run.stdout.readline())["rss_start_mib"]
    runs = []
    for i in range(args.fits):
        method = methods[i % len(methods)]
        long_run.stdin.write(method + "\n")
        long_run.stdin.flush()
        line = long_run.stdout.readline()
        if not line:
            raise SystemExit(f"soak worker fit failed at run {i + 1} ({method}); its error is above")
        run = {"run": i + 1, "method": method, **json.loads(line)}
        vectors = run.pop("vectors")
        if args.fresh_control or i < len(methods) or i % (2 * len(methods)) == 0:
            # Without the control at every fit, still one fresh process's run of each method
            # early and of one method every second round: the results must equal.
            fresh = _child(args, "fresh-fit", methods=method, round=",".join(methods))
            run["max_rel_diff_vs_fresh_process"] = _max_rel_diff(vectors, fresh.pop("vectors"))
            if args.fresh_control:
                run.update({"fresh_seconds": fresh["seconds"],
                            "fresh_cpu_seconds": fresh["cpu_seconds"],
                            "cpu_over_fresh": round(run["cpu_seconds"] / fresh["cpu_seconds"], 3)})
        runs.append(run)
        print(f"fit {i + 1}/{args.fits} {method}: {run['cpu_seconds']:.2f} s CPU"
              + (f", a fresh process's {run['fresh_cpu_seconds']:.2f} s"
                 if "fresh_cpu_seconds" in run else ""), file=sys.stderr, flush=True)
    long_run.stdin.close()
    if long_run.wait() != 0:
        raise SystemExit(f"soak worker fit failed (exit {long_run.returncode}); its error is above")
    by_method = {}
    for run in runs:
        by_method.setdefault(run["method"], []).append(run)
    late_vs_early = {key: late_over_early(by_method, key)
                     for key in ("seconds", "cpu_seconds", "cpu_over_fresh",
                                 *(f"{phase}_cpu" for phase in PHASES))}
    rss = [r["rss_mib"] for r in runs]
    return {
        "fits": len(runs), "methods": methods, "steps_per_fit": args.fit_steps,
        "rss_start_mib": rss_start, "rss_after_first_round_mib":
            rss[min(len(methods), len(rss)) - 1], "rss_end_mib": rss[-1], "rss_max_mib": max(rss),
        "late_over_early_seconds": late_vs_early["seconds"],
        "late_over_early_cpu_seconds": late_vs_early["cpu_seconds"],
        "late_over_early_cpu_over_fresh": late_vs_early["cpu_over_fresh"],
        "late_over_early_cpu_by_phase": {phase: late_vs_early[f"{phase}_cpu"]
                                         for phase in PHASES},
        "max_rel_diff_vs_fresh_process": max(r["max_rel_diff_vs_fresh_process"] for r in runs
                                             if "max_rel_diff_vs_fresh_process" in r),
        "fresh_control": args.fresh_control,
        "runs": runs,
    }


def small_model(folder):
    """The default model's tokenizer and settings over a random 2-layer, 64-wide BERT, saved in
    `folder` (see the module docstring); returns its path."""
    import keras
    import keras_hub

    from keras_sentemb.models import SentenceEncoder

    default = SentenceEncoder.from_preset("default")
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=int(default.backbone.vocabulary_size), num_layers=2, num_heads=2,
        hidden_dim=64, intermediate_dim=256,
        max_sequence_length=int(default.backbone.max_sequence_length))
    small = SentenceEncoder(backbone, default.tokenizer, pooling=default.pooling,
                            normalize=default.normalize, max_length=default.max_length,
                            text_normalization=default.text_normalization)
    small.save(folder)
    return str(folder)


def _export(args, folder):
    from keras_sentemb import export_saved_model
    from keras_sentemb.models import SentenceEncoder

    return export_saved_model(SentenceEncoder.from_preset(args.model), folder)


def table(results):
    lines = ["| what | calls | RSS start / warm / end (MiB) | growth after warm-up | "
             "malloc heap in use, first / last sample (MiB) | "
             "traced functions (warm / end) | p50 / p99 (ms) | p50 first / last tenth (ms) |",
             "|---|---|---|---|---|---|---|---|"]

    def heap(r):
        used = r.get("heap_in_use_samples_mib")
        return f"{used[0]:.0f} / {used[-1]:.0f}" if used else "n/a"

    for name, r in results.get("encode", {}).items():
        traced = r["traced"]
        lines.append(
            f"| `encode`, {name} | {r['calls']} | {r['rss_start_mib']:.0f} / {r['rss_warm_mib']:.0f}"
            f" / {r['rss_end_mib']:.0f} | {r['rss_growth_after_warmup_pct']:+.1f} % | {heap(r)} | "
            f"{traced['warm']['count']} / {traced['end']['count']} | {r['p50_ms']:.0f} / "
            f"{r['p99_ms']:.0f} | {r['first_tenth_p50_ms']:.0f} / {r['last_tenth_p50_ms']:.0f} |")
    r = results.get("savedmodel")
    if r:
        lines.append(
            f"| SavedModel (plain TensorFlow) | {r['calls']} | {r['rss_start_mib']:.0f} / "
            f"{r['rss_warm_mib']:.0f} / {r['rss_end_mib']:.0f} | "
            f"{r['rss_growth_after_warmup_pct']:+.1f} % | {heap(r)} | its stored graph | {r['p50_ms']:.0f} / "
            f"{r['p99_ms']:.0f} | {r['first_tenth_p50_ms']:.0f} / {r['last_tenth_p50_ms']:.0f} |")
    f = results.get("fit")
    if f:
        cpu = f.get("late_over_early_cpu_seconds", {})
        ratios = ", ".join(f"{m} {v:.2f}" + (f" ({cpu[m]:.2f})" if m in cpu else "")
                           for m, v in f["late_over_early_seconds"].items())
        controlled = ", ".join(f"{m} {v:.2f}"
                               for m, v in f.get("late_over_early_cpu_over_fresh", {}).items())
        lines += ["", "| fits | RSS start / after the first round / end / max (MiB) | "
                      "late runs / early runs of a method, median seconds (CPU seconds) | "
                      "the same, of CPU seconds over a fresh process's at the same moment | "
                      "largest relative difference from a fresh process |", "|---|---|---|---|---|",
                  f"| {f['fits']} ({', '.join(f['methods'])} in turn, {f['steps_per_fit']} steps "
                  f"each) | {f['rss_start_mib']:.0f} / {f['rss_after_first_round_mib']:.0f} / "
                  f"{f['rss_end_mib']:.0f} / {f['rss_max_mib']:.0f} | {ratios} | "
                  f"{controlled or 'n/a'} | {f['max_rel_diff_vs_fresh_process']:.1e} |"]
        by_phase = f.get("late_over_early_cpu_by_phase", {})
        if any(by_phase.values()):
            lines += ["", "| late / early, CPU seconds by phase | "
                          + " | ".join(f["methods"]) + " |",
                      "|---|" + "---|" * len(f["methods"])]
            lines += [f"| {phase} | " + " | ".join(
                f"{ratios[m]:.2f}" if m in ratios else "" for m in f["methods"]) + " |"
                for phase, ratios in by_phase.items()]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=20000, help="encode / SavedModel calls per process")
    p.add_argument("--fits", type=int, default=30, help="fit_* calls in the long process")
    p.add_argument("--fit-steps", type=int, default=6, help="steps of each fit")
    p.add_argument("--warmup", type=float, default=0.1, help="share of the calls that warm up")
    p.add_argument("--model", default="default")
    p.add_argument("--precisions", default=",".join(PRECISIONS))
    p.add_argument("--methods", default=None, help="methods fitted in turn (default: "
                                                   + ",".join(FIT_METHODS) + ")")
    p.add_argument("--parts", default="encode,savedmodel,fit")
    p.add_argument("--malloc-trim-every", type=int, default=0,
                   help="call glibc's malloc_trim(0) after every N encode / SavedModel calls "
                        "(fits, in the fit part), as a service can (0: never)")
    p.add_argument("--fresh-control", action=argparse.BooleanOptionalAction, default=True,
                   help="after every fit, a fresh process's fit of the same method, timed (the "
                        "control of the host's drift); without it, fresh runs only to check the "
                        "results, after the first round's fits and every second round")
    p.add_argument("--json", default=None, help="write every number to this file")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--precision", default=None, help=argparse.SUPPRESS)
    p.add_argument("--saved-model", default=None, help=argparse.SUPPRESS)
    p.add_argument("--round", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker is not None:
        {"encode": worker_encode, "savedmodel": worker_savedmodel, "fit": worker_fit,
         "fresh-fit": worker_fresh_fit}[args.worker](args)
        return
    parts = args.parts.split(",")
    model = args.model
    with tempfile.TemporaryDirectory() as tmp:
        if model == "small":
            args.model = small_model(Path(tmp) / "small")
        run_parts(args, parts, model)


def run_parts(args, parts, model):
    """Runs `parts` on `args.model` (named `model` in the results)."""
    results = {"command": "python benchmarks/soak.py " + " ".join(sys.argv[1:]), "model": model,
               "machine": {**cpu_info(), "load_average": os.getloadavg(),
                           "platform": platform.platform(),
                           "malloc_arena_max": os.environ.get("MALLOC_ARENA_MAX")},
               "malloc_trim_every": args.malloc_trim_every}

    def save():  # after every part: a long run that stops keeps what it measured
        results["machine"]["load_average_end"] = os.getloadavg()
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")

    if "encode" in parts:
        results["encode"] = {}
        for precision in args.precisions.split(","):
            results["encode"][precision] = _child(args, "encode", precision=precision)
            save()
    if "savedmodel" in parts:
        with tempfile.TemporaryDirectory() as tmp:
            folder = _export(args, os.path.join(tmp, "soak"))
            results["savedmodel"] = _child(args, "savedmodel", saved_model=folder)
        save()
    if "fit" in parts:
        results["fit"] = fit_part(args)
        save()
    print(table(results))


if __name__ == "__main__":
    main()
