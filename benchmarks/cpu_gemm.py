"""What this CPU's matrix multiply gives TensorFlow: the ceiling of any encode speed here.

    python benchmarks/cpu_gemm.py

Times one feed-forward `Dense` of the default model (hidden 384 -> 1,536) on a
batch of 128 sentences x 36 tokens, the same product as a 2-D `tf.matmul`, as a
batched 3-D `tf.matmul` and as `tf.einsum`, each in a `tf.function`, and
prints GFLOP/s with the CPU's model and vector instructions. Encoding cost is
almost all such products (about 21 MFLOP per token for all-MiniLM-L6-v2), so
`GFLOP/s / (21e6 x padded tokens per sentence)` bounds sentences/s; comparing
that bound with `encode_vs_st.py` shows how much of the CPU either toolkit uses.
One JSON line.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cpu_info  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=128 * 36)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--hidden", type=int, default=1536)
    p.add_argument("--repeats", type=int, default=50)
    args = p.parse_args()

    import keras
    import tensorflow as tf

    x3 = tf.random.normal([128, args.rows // 128, args.dim])
    x2 = tf.reshape(x3, [-1, args.dim])
    w = tf.random.normal([args.dim, args.hidden])
    dense = keras.layers.Dense(args.hidden, use_bias=False)
    dense.build((None, None, args.dim))
    variants = {
        "dense_layer": tf.function(lambda: dense(x3)),
        "matmul_2d": tf.function(lambda: tf.matmul(x2, w)),
        "matmul_3d": tf.function(lambda: tf.matmul(x3, w)),
        "einsum": tf.function(lambda: tf.einsum("abc,cd->abd", x3, w)),
    }
    flops = 2.0 * x2.shape[0] * args.dim * args.hidden
    result = {"benchmark": "cpu_gemm", "shape": [int(x2.shape[0]), args.dim, args.hidden],
              **cpu_info()}
    for name, fn in variants.items():
        fn()
        t = time.perf_counter()
        for _ in range(args.repeats):
            fn()
        seconds = (time.perf_counter() - t) / args.repeats
        result[f"{name}_gflops"] = round(flops / seconds / 1e9, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
