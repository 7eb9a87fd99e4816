"""Which engine computes int8 fastest on this CPU: oneDNN through TensorFlow, Keras, or LiteRT.

    python benchmarks/int8_engines.py --out benchmarks/results/int8_engines.json

The candidates that TensorFlow or LiteRT already ship, each on the same
batches of wiki sentences (padded to `B x L`, one forward pass of the bundled
all-MiniLM-L6-v2 per call, 2 threads):

    tf-float32       encode's float32 graph (oneDNN float32 kernels)
    tf-bfloat16      encode's bfloat16 graph (where the CPU has native bfloat16)
    tf-int8          encode's int8 graph: oneDNN's int8 matmuls (`_QuantizedMatMul`),
                     static ranges calibrated on 128 bundled sentences (keras_sentemb's int8)
    keras-int8       Keras' own `quantize("int8")` of the backbone's Dense layers
                     (int8 weights, per-token int8 activations; TensorFlow's int8 matmul)
    litert-float32   the same graph converted to LiteRT, run by XNNPACK (fixed B x L)
    litert-int8      LiteRT with dynamic-range int8 weights (XNNPACK's int8 kernels with
                     activations quantized per batch), fixed B x L

For each: the median milliseconds per call over `--repeats` calls after a
warm-up, and the lowest cosine of its sentence vectors to tf-float32's. The
LiteRT files run in a process of their own (`ai_edge_litert`'s interpreter).
LiteRT's converter needs fixed shapes: a LiteRT path would need one file per
batch shape, and TF Serving cannot run it.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import BUNDLED_SENTENCES, REPO, cpu_info  # noqa: E402

LITERT_RUNNER = """
import json, statistics, sys, time
import numpy as np
from ai_edge_litert.interpreter import Interpreter
path, ids, mask, repeats = sys.argv[1], np.load(sys.argv[2]), np.load(sys.argv[3]), int(sys.argv[4])
runner = Interpreter(model_path=path, num_threads=2).get_signature_runner()
out = next(iter(runner(token_ids=ids, padding_mask=mask).values()))
times = []
for _ in range(repeats):
    start = time.perf_counter()
    runner(token_ids=ids, padding_mask=mask)
    times.append(1000 * (time.perf_counter() - start))
np.save(sys.argv[5], out)
print(json.dumps(statistics.median(times)))
"""


def batch_of(encoder, sentences, batch, length):
    """token ids and mask `[batch, length]` of the first `batch` sentences of about that length."""
    import numpy as np

    picked = [s for s in sentences if len(encoder.tokenize([s])[0]) + 2 <= length][:batch]
    packed = encoder.pack(encoder.tokenize(picked), length)
    ids = packed["token_ids"].numpy()
    pad = length - ids.shape[1]
    ids = np.pad(ids, [[0, 0], [0, pad]], constant_values=encoder.pad_token_id).astype(np.int32)
    mask = np.pad(packed["padding_mask"].numpy(), [[0, 0], [0, pad]]).astype(np.int32)
    return ids, mask


def timed(fn, ids, mask, repeats):
    fn(ids, mask)
    fn(ids, mask)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn(ids, mask).numpy()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times), out


def tf_engines(encoder, keras_int8):
    """name -> a `(token_ids, padding_mask) -> vectors` function."""
    from keras_sentemb.kernels.native_bfloat16 import has_native_bfloat16

    engines = {"tf-float32": encoder._encode_fn("mean", False)}
    if has_native_bfloat16():
        engines["tf-bfloat16"] = encoder.precision_twin("bfloat16")._encode_fn("mean", False)
    int8 = encoder.precision_twin("int8")
    engines["tf-int8"] = int8._encode_fn("mean", False, int8=True)
    engines["keras-int8"] = keras_int8._encode_fn("mean", False)
    return engines


def litert_files(encoder, batch, length, folder):
    """The float32 and dynamic-range int8 LiteRT files of `encoder` for `[batch, length]`."""
    import tensorflow as tf

    from keras_sentemb import compat
    from keras_sentemb.kernels.policy import declare_graph

    spec = [tf.TensorSpec([batch, length], tf.int32, name=n) for n in ("token_ids", "padding_mask")]

    @tf.function(input_signature=spec)
    def serve(token_ids, padding_mask):
        declare_graph(plain=True)
        return {"embedding": encoder({"token_ids": token_ids, "padding_mask": padding_mask,
                                      "segment_ids": tf.zeros_like(token_ids)}, training=False)}

    frozen = compat.frozen_function(serve.get_concrete_function())
    files = {}
    for name, optimize in (("litert-float32", False), ("litert-int8", True)):
        converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen], tf.Module())
        if optimize:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        path = Path(folder) / f"{name}-{batch}x{length}.tflite"
        path.write_bytes(converter.convert())
        files[name] = path
    return files


def run_litert(path, ids, mask, repeats, folder):
    import numpy as np

    ids_path, mask_path, out_path = (Path(folder) / n for n in ("ids.npy", "mask.npy", "out.npy"))
    np.save(ids_path, ids)
    np.save(mask_path, mask)
    result = subprocess.run([sys.executable, "-c", LITERT_RUNNER, str(path), str(ids_path),
                             str(mask_path), str(repeats), str(out_path)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"LiteRT run of {path.name} failed:\n{result.stderr[-1500:]}")
    return json.loads(result.stdout.strip().splitlines()[-1]), np.load(out_path)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="32x32,32x64,8x128")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--out", default=str(REPO / "runs" / "int8_engines.json"))
    args = p.parse_args()
    import numpy as np
    import tensorflow as tf

    from keras_sentemb.models import SentenceEncoder

    tf.config.threading.set_intra_op_parallelism_threads(2)
    encoder = SentenceEncoder.from_preset("default")
    keras_int8 = encoder.clone(name="keras_int8")
    keras_int8.backbone.quantize("int8")
    engines = tf_engines(encoder, keras_int8)
    sentences = BUNDLED_SENTENCES.read_text(encoding="utf-8").splitlines()
    result = {"benchmark": "int8_engines", **cpu_info(), "repeats": args.repeats, "shapes": {}}
    with tempfile.TemporaryDirectory() as folder:
        for shape in args.shapes.split(","):
            batch, length = (int(v) for v in shape.split("x"))
            ids, mask = batch_of(encoder, sentences, batch, length)
            rows, reference = {}, None
            for name, fn in engines.items():
                ms, out = timed(fn, ids, mask, args.repeats)
                reference = out if reference is None else reference
                rows[name] = (ms, out)
            for name, path in litert_files(encoder, batch, length, folder).items():
                rows[name] = run_litert(path, ids, mask, args.repeats, folder)
            entry = {}
            for name, (ms, out) in rows.items():
                cos = (out * reference).sum(1) / np.linalg.norm(out, axis=1) / np.linalg.norm(
                    reference, axis=1)
                entry[name] = {"ms": round(ms, 1), "min_cosine_to_float32": round(float(cos.min()), 4)}
                print(f"{shape} {name}: {ms:.1f} ms, min cosine {cos.min():.4f}", file=sys.stderr)
            result["shapes"][shape] = entry
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
