"""GradCache memory: a batch 8x larger in the memory of the small batch (CPU).

    python benchmarks/grad_cache_memory.py --small 16 --factor 8 --max-length 32

Each configuration runs in a fresh process with TensorFlow's BFC allocator
on the CPU (`TF_CPU_ALLOCATOR_USE_BFC=true`), whose statistics count every
tensor TensorFlow allocates. In the child: the default model (all-MiniLM-L6-v2)
in a SimCSE trainer (unsupervised: each sentence encoded twice, mean pooling,
no head), SGD, wiki sentences padded to `--max-length`; one warm-up step
(traces the step function), then `reset_memory_stats` and `--steps` steps;
the peak of TensorFlow's allocations during those steps minus what was held
before them is the step's working memory (activations, gradients, the
GradCache cache). The process's peak RSS (VmHWM, the whole run) is printed too.

Configurations: plain batch `small`; plain batch `small * factor`; GradCache
batch `small * factor` with `mini_batch_size=small`. Prints one JSON line per
configuration and a summary line.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import read_lines, sentences_file  # noqa: E402

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, {repo!r})
import keras, numpy as np, tensorflow as tf
from keras_sentemb import SentenceEncoder
from keras_sentemb.data.batching import shuffled_batches, tokenize_columns
from keras_sentemb.methods.simcse.trainer import SimCSE
batch, mini, max_length, steps, model = {batch}, {mini}, {max_length}, {steps}, {model!r}
sentences = [l.strip() for l in open({sentences!r}, encoding="utf-8") if l.strip()][:4096]
encoder = SentenceEncoder.from_preset(model)
trainer = SimCSE(encoder, pooling="mean", mlp="none", mini_batch_size=mini)
trainer.compile(optimizer=keras.optimizers.SGD(1e-5))
ds = tokenize_columns(encoder, shuffled_batches({{"sentence": sentences}}, batch, seed=0),
                      ["sentence"], max_length)
trainer.fit(ds, steps_per_epoch=1, epochs=1, verbose=0)
before = tf.config.experimental.get_memory_info("CPU:0")["current"]
tf.config.experimental.reset_memory_stats("CPU:0")
t = time.perf_counter()
trainer.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0)
seconds = (time.perf_counter() - t) / steps
peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print("RESULT " + json.dumps({{
    "batch": batch, "mini_batch_size": mini, "max_length": max_length,
    "step_peak_mib": round((peak - before) / 2**20, 1),
    "held_before_mib": round(before / 2**20, 1),
    "process_peak_rss_mib": round(hwm / 1024, 1),
    "seconds_per_step": round(seconds, 2),
    "sentences_per_s": round(batch / seconds, 1),
}}))
"""


def run(batch, mini, args, path):
    env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC="true", TF_CPP_MIN_LOG_LEVEL="2")
    code = CHILD.format(repo=os.path.dirname(HERE), batch=batch, mini=mini,
                        max_length=args.max_length, steps=args.steps, model=args.model,
                        sentences=str(path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    print(json.dumps(result), flush=True)
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", type=int, default=16)
    p.add_argument("--factor", type=int, default=8)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--model", default="default")
    p.add_argument("--sentences", default=None)
    args = p.parse_args()
    path = sentences_file(args.sentences)
    read_lines(path, 1)  # fail early on a missing file
    big = args.small * args.factor
    small = run(args.small, None, args, path)
    plain_big = run(big, None, args, path)
    cached = run(big, args.small, args, path)
    print(json.dumps({
        "summary": "grad_cache_memory",
        "plain_small_step_peak_mib": small["step_peak_mib"],
        "plain_big_step_peak_mib": plain_big["step_peak_mib"],
        "grad_cache_big_step_peak_mib": cached["step_peak_mib"],
        "grad_cache_vs_plain_small": round(cached["step_peak_mib"] / small["step_peak_mib"], 2),
        "plain_big_vs_plain_small": round(plain_big["step_peak_mib"] / small["step_peak_mib"], 2),
        "grad_cache_time_vs_plain_big": round(
            cached["seconds_per_step"] / plain_big["seconds_per_step"], 2),
    }))


if __name__ == "__main__":
    main()
