"""A Dense layer's three products in TensorFlow and torch: forward, input and weight gradients.

    taskset -c 0 python benchmarks/gemm_backward.py --threads 1

Training runs each of the model's Dense layers three times: `y = x W`,
`dx = dy W^T` and `dW = x^T dy`. For the default model's shapes (384 -> 1,536,
1,536 -> 384, 384 -> 384) on `--rows` token rows, this times the three as
`tf.matmul` (with its transpose flags, in a `tf.function`) and as torch's
`@` (benchmarks/st_gemm.py in the sentence-transformers venv, `ST_PYTHON`),
with the same number of threads, and prints GFLOP/s side by side. One JSON line.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cpu_info, run_st  # noqa: E402
from st_gemm import SHAPES, best_time  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2400)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--st-python", default=None)
    args = p.parse_args()
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    ours = {}
    products = {
        "fwd": tf.function(lambda a, b: tf.matmul(a, b)),
        "dX": tf.function(lambda a, b: tf.matmul(a, b, transpose_b=True)),
        "dW": tf.function(lambda a, b: tf.matmul(a, b, transpose_a=True)),
    }
    for k, n in SHAPES:
        x, w = tf.random.normal([args.rows, k]), tf.random.normal([k, n])
        dy = tf.random.normal([args.rows, n])
        gflop = 2 * args.rows * k * n / 1e9
        operands = {"fwd": (x, w), "dX": (dy, w), "dW": (x, dy)}
        for name, fn in products.items():
            a, b = operands[name]
            ours[f"{k}x{n} {name}"] = round(
                gflop / best_time(lambda: fn(a, b).numpy()), 1)  # .numpy(): wait for the result
    theirs = run_st("st_gemm.py", ["--rows", args.rows, "--threads", args.threads], args.st_python)
    print(json.dumps({"benchmark": "gemm_backward", "rows": args.rows, "threads": args.threads,
                      **cpu_info(), "tensorflow_gflops": ours,
                      "torch_gflops": {k: v for k, v in (theirs or {}).items()
                                       if k[0].isdigit()} or None}))


if __name__ == "__main__":
    main()
