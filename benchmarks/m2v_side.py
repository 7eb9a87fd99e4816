"""The model2vec side of benchmarks/static_vs_model2vec.py, in model2vec's own environment.

Run by the Python that has model2vec (`ST_PYTHON`; never ours). One JSON line on stdout.

    python benchmarks/m2v_side.py distill TEACHER_DIR DIMS OUT_DIR
    python benchmarks/m2v_side.py encode MODEL_DIR INPUT.txt OUT.npy [--no-multiprocessing]

`distill` is `model2vec.distill(TEACHER_DIR, pca_dims=DIMS)` (its defaults: Zipf / SIF
weighting, float16 table) saved to OUT_DIR, with its seconds; `encode` loads the folder,
encodes the lines of INPUT and reports the seconds of `encode()` alone (the caller times the
whole process).
"""

import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")


def distill(teacher, dims, out):
    from model2vec.distill import distill as m2v_distill

    start = time.perf_counter()
    model = m2v_distill(model_name=teacher, pca_dims=int(dims))
    seconds = time.perf_counter() - start
    model.save_pretrained(out)
    return {"distill_seconds": round(seconds, 2)}


def encode(folder, input_path, out, *flags):
    import numpy as np
    from model2vec import StaticModel

    with open(input_path, encoding="utf-8") as f:
        sentences = f.read().splitlines()
    model = StaticModel.from_pretrained(folder)
    start = time.perf_counter()
    vectors = model.encode(sentences, use_multiprocessing="--no-multiprocessing" not in flags)
    seconds = time.perf_counter() - start
    np.save(out, np.asarray(vectors, np.float32))
    return {"encode_seconds": round(seconds, 3), "sentences": len(sentences)}


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    result = {"distill": distill, "encode": encode}[command](*args)
    print(json.dumps(result))
