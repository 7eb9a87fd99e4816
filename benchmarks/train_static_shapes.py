"""Training speed with bucket-padded batches, with and without XLA, and memory over the run.

    python benchmarks/train_static_shapes.py --batch-size 32 --max-length 64 --steps 30

One child process per configuration (the default model in a SimCSE trainer,
unsupervised, mean pooling, AdamW; wiki sentences): `buckets` x `jit_compile`
in {(off, off), (on, off), (on, on)}. Without buckets every batch is padded to
its own longest sentence; with them, to one of the bucket widths (8, 16, 24,
32, 40, 48, 56, 64, ...). `--warmup` steps (tracing, XLA compilation per
bucket) are excluded; then `--steps` steps are timed and the RSS is sampled
every `--every` steps (memory flat = no growth after warm-up). Prints one
JSON line per configuration.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import sentences_file  # noqa: E402

CHILD = r"""
import json, sys, time
sys.path.insert(0, {repo!r})
import keras
from keras_sentemb import SentenceEncoder
from keras_sentemb.data.batching import shuffled_batches, tokenize_columns
from keras_sentemb.methods.simcse.trainer import SimCSE

def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) / 1024

sentences = [l.strip() for l in open({sentences!r}, encoding="utf-8") if l.strip()][:20000]
encoder = SentenceEncoder.from_preset("default")
trainer = SimCSE(encoder, pooling="mean", mlp="none")
trainer.compile(optimizer=keras.optimizers.AdamW(1e-5), jit_compile={jit})
ds = tokenize_columns(encoder, shuffled_batches({{"sentence": sentences}}, {batch}, seed=0),
                      ["sentence"], {max_length}, buckets={buckets})
widths = sorted({{b["sentence"]["token_ids"].shape[1] for b in ds.take({warmup} + {steps})}})
t = time.perf_counter()
trainer.fit(ds, steps_per_epoch={warmup}, epochs=1, verbose=0)
warm = time.perf_counter() - t
samples = []
class Sample(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        samples.append(round(rss(), 1))
t = time.perf_counter()
trainer.fit(ds, steps_per_epoch={every}, epochs={steps} // {every}, verbose=0, callbacks=[Sample()])
seconds = (time.perf_counter() - t) / ({steps} // {every} * {every})
print("RESULT " + json.dumps({{
    "buckets": {buckets}, "jit_compile": {jit}, "batch": {batch}, "max_length": {max_length},
    "widths_seen": widths, "warmup_seconds": round(warm, 1),
    "seconds_per_step": round(seconds, 3), "sentences_per_s": round({batch} / seconds, 1),
    "rss_mib_every_{every}_steps": samples,
}}))
"""


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--warmup", type=int, default=12)
    p.add_argument("--configs", default="off-off,on-off,on-on",
                   help="buckets-jit pairs, e.g. on-on")
    p.add_argument("--sentences", default=None)
    args = p.parse_args()
    path = str(sentences_file(args.sentences))
    for config in args.configs.split(","):
        buckets, jit = (part == "on" for part in config.split("-"))
        code = CHILD.format(repo=os.path.dirname(HERE), sentences=path, jit=jit,
                            buckets=buckets, batch=args.batch_size, max_length=args.max_length,
                            warmup=args.warmup, steps=args.steps, every=args.every)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        if out.returncode != 0:
            raise SystemExit(out.stderr[-3000:])
        line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
        print(line[len("RESULT "):], flush=True)


if __name__ == "__main__":
    main()
