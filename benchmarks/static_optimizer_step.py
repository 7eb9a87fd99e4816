"""One AdamW update of a static model's table: the fused kernel against the plain Keras ops.

    python benchmarks/static_optimizer_step.py --vocab 30522 --dims 256

The static method trains one table (the teacher's vocabulary x `--dims`) with
`TorchAdamW` on a dense gradient (the sparse one is made dense first). This
times `optimizer.apply` on a table of that shape in a `tf.function`, with
`fused=True` (one XLA kernel) and `fused=False` (Keras ops), side by side in
one process: best of `--repeats` runs of 10 updates each, per update. One
JSON line.
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--dims", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_sentemb.trainers.torch_adamw import TorchAdamW

    rng = np.random.default_rng(0)
    gradient = tf.constant(rng.normal(size=(args.vocab, args.dims)).astype("float32") * 1e-3)
    best = {}
    for fused in (True, False, True, False):
        table = keras.Variable(rng.normal(size=(args.vocab, args.dims)).astype("float32"))
        opt = TorchAdamW(1e-3, weight_decay=0.01, fused=fused)
        opt.build([table])

        @tf.function
        def step():
            opt.apply([gradient], [table])

        step()  # trace and compile
        for _ in range(args.repeats):
            start = time.perf_counter()
            for _ in range(10):
                step()
            _ = table.numpy()
            ms = (time.perf_counter() - start) / 10 * 1000
            key = "fused_ms" if fused else "plain_ms"
            best[key] = min(best.get(key, ms), ms)
    best = {k: round(v, 2) for k, v in best.items()}
    best.update(vocab=args.vocab, dims=args.dims, ratio=round(best["plain_ms"] / best["fused_ms"], 2))
    print(json.dumps(best))


if __name__ == "__main__":
    main()
