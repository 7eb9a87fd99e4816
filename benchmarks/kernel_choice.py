"""Each fused kernel against the plain TensorFlow / oneDNN ops it replaces, on this CPU.

    python benchmarks/kernel_choice.py --output benchmarks/results/kernel_choice_avx2.json

The measurement behind `keras_sentemb.kernels.policy.MEASURED` (the per-instruction-set
table that `KernelPolicy("auto")` reads). For every kernel the policy chooses, it times the
fused form and the plain form on the default model's shapes (width 384, feed-forward 1,536,
12 heads) at the batch sizes and lengths training and encoding use (`--shapes`, default
batch 16 x length 75 and batch 64 x length 32), in float32 and bfloat16, each as a compiled
`tf.function`:

- `gelu` (training): Dense matmul, then bias + GELU as one XLA kernel each way, against the
  matmul, bias add and keras-hub's GELU ops; forward + backward.
- `gelu_encode` (forward-only graphs): the XLA GELU kernel in float32, oneDNN's fused
  matmul + bias + GELU pattern in bfloat16, against the plain ops; forward.
- `layer_norm` (training): the XLA layer-norm kernels against Keras' `LayerNormalization`;
  forward + backward.
- `dropout` (training): 16-bit masks (the masking as one XLA kernel) against Keras'
  `Dropout`, on a hidden state and on attention probabilities; forward + backward.
- `transformer` (encoding): `fused_transformer.fused_call` against keras-hub's
  `TransformerEncoder`; forward.
- `unpadded` (training): `unpadded_transformer.unpadded_call` (the real tokens' rows only)
  against keras-hub's `TransformerEncoder`, dropout 0.1 on, each sentence's length drawn
  from half to all of the batch's length (a quarter of the rows padding on average);
  forward + backward.

The forms alternate within each repeat (the order flips every repeat) and each figure is the
median of `--repeats` samples, so a machine shared with other work still compares the two
forms under the same load. The first call of each form (tracing plus XLA compilation) is
recorded too. The JSON names the CPU model, its flags and the instruction-set class the
policy keys on, and suggests a choice per kernel: fused where the geometric mean of the
plain / fused time ratios over the shapes is above 1 in float32, the precision a CPU
without native bfloat16 computes in.
"""

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cpu_info  # noqa: E402

WIDTH, INTERMEDIATE, HEADS = 384, 1536, 12


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        batch, _, length = item.strip().partition("x")
        try:
            shapes.append((int(batch), int(length)))
        except ValueError:
            raise SystemExit(f"--shapes: expected BATCHxLENGTH items, received {item!r}")
    return shapes


def _timed(fn, args, inner):
    start = time.perf_counter()
    for _ in range(inner):
        fn(*args)
    return (time.perf_counter() - start) / inner * 1e3


def compare(fused, plain, args, repeats, target_ms):
    """Median ms per call of `fused` and `plain` on `args`, interleaved; first calls too."""
    first = {}
    for name, fn in (("fused", fused), ("plain", plain)):
        start = time.perf_counter()
        fn(*args)
        first[name] = (time.perf_counter() - start) * 1e3
        fn(*args)
    one = max(_timed(fused, args, 1), _timed(plain, args, 1), 1e-3)
    inner = max(1, min(50, int(target_ms / one)))
    samples = {"fused": [], "plain": []}
    for r in range(repeats):
        order = ("fused", "plain") if r % 2 == 0 else ("plain", "fused")
        for name in order:
            samples[name].append(_timed(fused if name == "fused" else plain, args, inner))
    fused_ms, plain_ms = (statistics.median(samples[k]) for k in ("fused", "plain"))
    return {
        "fused_ms": round(fused_ms, 4),
        "plain_ms": round(plain_ms, 4),
        "plain_over_fused": round(plain_ms / fused_ms, 4),
        "fused_first_call_ms": round(first["fused"], 1),
        "plain_first_call_ms": round(first["plain"], 1),
        "calls_per_sample": inner,
        "samples": repeats,
    }


def cases(tf, keras, shapes, dtypes):
    """(kernel, mode, dtype, batch, length, fused fn, plain fn, args) for every comparison."""
    import keras_hub

    from keras_sentemb import compat
    from keras_sentemb.kernels import fast_dropout, fused_gelu, fused_layer_norm
    from keras_sentemb.kernels import fused_transformer, unpadded_transformer

    gelu = compat.keras_hub_gelu_approximate()
    for dtype_name in dtypes:
        dtype = tf.as_dtype(dtype_name)
        mixed = "mixed_bfloat16" if dtype_name == "bfloat16" else "float32"
        for batch, length in shapes:
            rows = batch * length
            x = tf.cast(tf.random.normal([rows, WIDTH]), dtype)
            kernel = tf.cast(tf.random.normal([WIDTH, INTERMEDIATE], stddev=0.05), dtype)
            bias = tf.random.normal([INTERMEDIATE], stddev=0.1)  # stored float32, as Keras keeps it
            dy = tf.cast(tf.random.normal([rows, INTERMEDIATE]), dtype)

            def grads(forward):
                @tf.function(autograph=False)
                def step(x, kernel, bias, dy):
                    with tf.GradientTape() as tape:
                        tape.watch([x, kernel, bias])
                        y = forward(x, kernel, bias)
                    return tape.gradient(y, [x, kernel, bias], output_gradients=dy)
                return step

            def plain_ffn(x, kernel, bias):
                return gelu(tf.matmul(x, kernel) + tf.cast(bias, x.dtype))

            def fused_ffn(x, kernel, bias):
                return fused_gelu.bias_gelu(tf.matmul(x, kernel), bias, True)

            args = (x, kernel, bias, dy)
            yield ("gelu", "forward+backward", dtype_name, batch, length,
                   grads(fused_ffn), grads(plain_ffn), args)

            if dtype_name == "float32":
                def encode_ffn(x, kernel, bias):
                    return fused_gelu.fused_gelu_approximate(tf.matmul(x, kernel) + bias)
            else:
                def encode_ffn(x, kernel, bias):
                    return tf.nn.gelu(tf.nn.bias_add(tf.matmul(x, kernel), tf.cast(bias, x.dtype)),
                                      approximate=True)
            yield ("gelu_encode", "forward", dtype_name, batch, length,
                   tf.function(encode_ffn, autograph=False),
                   tf.function(plain_ffn, autograph=False), (x, kernel, bias))

            hidden = tf.cast(tf.random.normal([batch, length, WIDTH]), dtype)
            d_hidden = tf.cast(tf.random.normal([batch, length, WIDTH]), dtype)
            norm = keras.layers.LayerNormalization(epsilon=1e-12, dtype=mixed)
            norm.build([None, None, WIDTH])

            def norm_step(fused):
                @tf.function(autograph=False)
                def step(x, dy):
                    with tf.GradientTape() as tape:
                        tape.watch(x)
                        if fused:
                            with compat.no_autocast():
                                gamma = tf.convert_to_tensor(norm.gamma)
                                beta = tf.convert_to_tensor(norm.beta)
                            y = fused_layer_norm.layer_norm(x, gamma, beta, norm.epsilon,
                                                            dtype=norm.compute_dtype)
                        else:
                            y = norm(x)
                    return tape.gradient(y, [x, *norm.trainable_variables], output_gradients=dy)
                return step

            yield ("layer_norm", "forward+backward", dtype_name, batch, length,
                   norm_step(True), norm_step(False), (hidden, d_hidden))

            probs = tf.cast(tf.nn.softmax(tf.random.normal([batch, HEADS, length, length])), dtype)
            for what, tensor in (("hidden", hidden), ("attention", probs)):
                drop = keras.layers.Dropout(0.1, seed=1, dtype=mixed)

                def drop_step(fused, drop=drop):
                    @tf.function(autograph=False)
                    def step(x):
                        with tf.GradientTape() as tape:
                            tape.watch(x)
                            if fused:
                                y = fast_dropout.dropout(x, drop.rate, drop.seed_generator.next())
                            else:
                                y = drop(x, training=True)
                        return tape.gradient(y, x, output_gradients=tf.ones_like(y))
                    return step

                yield (f"dropout", f"forward+backward ({what})", dtype_name, batch, length,
                       drop_step(True), drop_step(False), (tensor,))

            layer = keras_hub.layers.TransformerEncoder(
                INTERMEDIATE, HEADS, activation=gelu, layer_norm_epsilon=1e-12, dtype=dtype_name)
            layer.build([None, None, WIDTH])
            lengths = tf.random.uniform([batch], length // 2, length + 1, dtype=tf.int32)
            mask = tf.cast(tf.sequence_mask(lengths, length), tf.int32)
            yield ("transformer", "forward", dtype_name, batch, length,
                   tf.function(lambda x, m: fused_transformer.fused_call(layer, x, m),
                               autograph=False),
                   tf.function(lambda x, m: layer(x, padding_mask=m, training=False),
                               autograph=False),
                   (hidden, mask))

            train_layer = keras_hub.layers.TransformerEncoder(
                INTERMEDIATE, HEADS, activation=gelu, layer_norm_epsilon=1e-12, dropout=0.1,
                dtype=mixed)
            train_layer.build([None, None, WIDTH])

            def layer_step(unpadded):
                @tf.function(autograph=False)
                def step(x, m, dy):
                    with tf.GradientTape() as tape:
                        tape.watch(x)
                        if unpadded:
                            y = unpadded_transformer.unpadded_call(train_layer, x, m, True)
                        else:
                            y = train_layer(x, padding_mask=m, training=True)
                    return tape.gradient(y, [x, *train_layer.trainable_variables],
                                         output_gradients=dy)
                return step

            yield ("unpadded", "forward+backward", dtype_name, batch, length,
                   layer_step(True), layer_step(False), (hidden, mask, d_hidden))


# Which dtype's measurements decide each kernel (see the module docstring).
DECIDING_DTYPE = {"gelu": "float32", "gelu_encode": "float32", "layer_norm": "float32",
                  "dropout": "float32", "transformer": "float32", "unpadded": "float32"}


def suggest(results):
    """Per kernel: the geometric mean of plain / fused in its deciding dtype, and the choice."""
    out = {}
    for kernel, dtype in DECIDING_DTYPE.items():
        ratios = [r["plain_over_fused"] for r in results
                  if r["kernel"] == kernel and r["dtype"] == dtype]
        if not ratios:
            continue
        geomean = math.exp(sum(math.log(v) for v in ratios) / len(ratios))
        out[kernel] = {"dtype": dtype, "plain_over_fused_geomean": round(geomean, 4),
                       "choice": "fused" if geomean > 1.0 else "plain"}
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="16x75,64x32", help="BATCHxLENGTH,... (default 16x75,64x32)")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--kernels", default=",".join(DECIDING_DTYPE),
                   help="comma-separated subset of " + ",".join(DECIDING_DTYPE))
    p.add_argument("--repeats", type=int, default=15, help="samples per form (median)")
    p.add_argument("--sample-ms", type=float, default=60.0, help="target length of one sample")
    p.add_argument("--threads", type=int, default=None, help="TensorFlow intra-op threads")
    p.add_argument("--output", default=None, help="write the JSON here (also printed)")
    args = p.parse_args()
    shapes = parse_shapes(args.shapes)
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    wanted = {k.strip() for k in args.kernels.split(",") if k.strip()}
    bad = sorted(set(dtypes) - {"float32", "bfloat16"}) + sorted(wanted - set(DECIDING_DTYPE))
    if bad or args.repeats < 1:
        raise SystemExit(f"unknown dtype or kernel (or --repeats < 1): {bad}")

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    from keras_sentemb.kernels import policy as kernel_policy

    results = []
    for kernel, mode, dtype, batch, length, fused, plain, fn_args in cases(tf, keras, shapes, dtypes):
        if kernel not in wanted:
            continue
        row = {"kernel": kernel, "mode": mode, "dtype": dtype, "batch": batch, "length": length,
               **compare(fused, plain, fn_args, args.repeats, args.sample_ms)}
        results.append(row)
        print(f"{kernel:12s} {mode:30s} {dtype:9s} {batch:3d}x{length:<3d} "
              f"fused {row['fused_ms']:9.3f} ms  plain {row['plain_ms']:9.3f} ms  "
              f"plain/fused {row['plain_over_fused']:.3f}", file=sys.stderr, flush=True)
    record = {
        "benchmark": "kernel_choice",
        **cpu_info(),
        "isa": kernel_policy.cpu_isa(),
        "cpu_flags_all": sorted(kernel_policy.cpu_flag_set() or ()),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "python": platform.python_version(),
        "intra_op_threads": args.threads or "TensorFlow's default",
        "os_cpu_count": os.cpu_count(),
        "load_average_at_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "method": "interleaved forms (order flipped each repeat), median of repeats",
        "repeats": args.repeats,
        "width": WIDTH, "intermediate": INTERMEDIATE, "heads": HEADS,
        "results": results,
        "suggested": suggest(results),
    }
    text = json.dumps(record, indent=2)
    print(text)
    if args.output:
        tmp = f"{args.output}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        os.replace(tmp, args.output)


if __name__ == "__main__":
    main()
