"""One optimizer update of CT's two model copies: Keras' ops, fused kernels, torch.

    taskset -c 0 python benchmarks/optimizer_step.py --threads 1

CT trains two copies of the default model (45M float32 values). This times
one `optimizer.apply` over variables of exactly those shapes, with random
gradients, in a `tf.function`, for Keras' RMSprop and AdamW and for their
fused forms (`keras_sentemb.trainers.optimizers`: one XLA kernel per
variable), and torch's RMSprop and AdamW on the same shapes
(benchmarks/st_optimizer_step.py in the sentence-transformers venv,
`ST_PYTHON`). Best of 3 runs of 5 updates each. One JSON line.
"""

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cpu_info, run_st  # noqa: E402
from st_optimizer_step import best_ms  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--copies", type=int, default=2, help="model copies (CT trains 2)")
    p.add_argument("--st-python", default=None)
    args = p.parse_args()
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    import keras

    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.trainers import optimizers as fused

    encoder = SentenceEncoder.from_preset("default")
    shapes = [tuple(v.shape) for v in encoder.trainable_variables] * args.copies
    del encoder
    variables = [keras.Variable(tf.random.normal(s) * 0.02) for s in shapes]
    grads = [tf.random.normal(s) * 1e-3 for s in shapes]
    result = {"benchmark": "optimizer_step", "threads": args.threads, "variables": len(shapes),
              "values_millions": round(sum(int(tf.reduce_prod(s)) for s in shapes) / 1e6, 1),
              **cpu_info()}
    for name, keras_cls, fused_cls, kwargs in (
        ("rmsprop", keras.optimizers.RMSprop, fused.RMSprop, {}),
        ("adamw", keras.optimizers.AdamW, fused.AdamW, {"weight_decay": 0.01}),
    ):
        for label, cls in (("keras", keras_cls), ("fused", fused_cls)):
            opt = cls(learning_rate=1e-5, **kwargs)
            opt.build(variables)
            step = tf.function(lambda opt=opt: opt.apply(grads, variables))
            result[f"{label}_{name}_ms"] = best_ms(step)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([list(s) for s in shapes], f)
    try:
        theirs = run_st("st_optimizer_step.py", ["--shapes", f.name, "--threads", args.threads],
                        args.st_python)
    finally:
        os.remove(f.name)
    if theirs:
        result.update({f"torch_{k}": v for k, v in theirs.items() if k.endswith("_ms")})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
