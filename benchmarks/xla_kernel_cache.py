"""What a fresh XLA-compiled kernel per run leaves behind in a long-running process.

    python benchmarks/xla_kernel_cache.py

The fused optimizer kernels (`keras_sentemb.trainers.optimizers`) are
`tf.function(jit_compile=True)` functions owned by each optimizer, so every
`fit_*` run in a process traces and compiles its own. This script runs 60
"runs", each a traced step that updates 7 variables (the shapes of a small
Transformer's weights) with an RMSprop-like kernel, in two ways: one kernel
function shared by every run, or a fresh one per run (as the optimizers do);
the step, the kernel and everything of the run are deleted after it. It
prints the resident memory (RSS) added per run over runs 10-60: TensorFlow
keeps every compiled XLA program for the life of the process, so fresh
kernels add memory that deleting them does not give back.
"""

import gc
import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from soak import rss_mib  # noqa: E402 (this folder is on the path of a script it runs)

SHAPES = [(384, 384), (384, 1536), (1536, 384), (384,), (1536,), (512, 384), (2, 384)]
RUNS = 60


def worker(mode):
    import tensorflow as tf

    variables = [tf.Variable(tf.zeros(s)) for s in SHAPES]

    def update(variable, gradient, lr):
        variable.assign(variable * 0.9 - lr * gradient / tf.sqrt(gradient * gradient + 1e-7))
        return variable

    shared = tf.function(update, jit_compile=True, autograph=False)
    rss = []
    for _ in range(RUNS):
        kernel = shared if mode == "shared" else tf.function(update, jit_compile=True,
                                                             autograph=False)

        @tf.function(autograph=False)
        def step():
            for variable in variables:
                kernel(variable, tf.ones_like(variable), 0.1)

        step()
        kernel = step = None  # the run and everything of it go
        gc.collect()
        rss.append(rss_mib())
    print(json.dumps({"mode": mode, "rss_after_run_10_mib": round(rss[9], 1),
                      "rss_after_run_60_mib": round(rss[-1], 1),
                      "mib_per_run_10_60": round((rss[-1] - rss[9]) / (RUNS - 10), 2)}))


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
        return
    rows = []
    for mode in ("shared", "fresh"):  # each in a process of its own
        done = subprocess.run([sys.executable, __file__, "--worker", mode], capture_output=True,
                              text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print("| kernels | RSS after run 10 / 60 (MiB) | MiB per run (runs 10-60) |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['rss_after_run_10_mib']:.0f} / {r['rss_after_run_60_mib']:.0f} "
              f"| {r['mib_per_run_10_60']:.2f} |")


if __name__ == "__main__":
    main()
