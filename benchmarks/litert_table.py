"""The LiteRT table of docs/deployment/litert.md: size, parity, latency and STS-B per weight format.

For float32, float16 and int8 files of one model (`--model`, default the
bundled all-MiniLM-L6-v2; `--max-length`, default 256):

- file size, and the lowest and mean cosine to `encode()` on the export
  gate's probes (every script, emoji, invalid UTF-8);
- median per-sentence latency in the stand-alone LiteRT interpreter
  (`ai_edge_litert`, 1 and 2 threads, one ASCII sentence, `--repeats` runs);
- STS-B test Spearman x 100 with MediaPipe's TextEmbedder tokenizing
  (cosine of the two sentences' vectors), next to `encode()`'s.

The runtimes run in a child process of this script (`--runtime`), without
keras_sentemb. Needs the litert extra (`pip install -e .[litert]`).

    python benchmarks/litert_table.py [--model default] [--output table.json]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import cpu_info

REPO = Path(__file__).resolve().parents[1]
MODES = ("float32", "float16", "int8")
SENTENCE = "A man is playing a guitar on the stage while the crowd sings along."


def runtime(model, sentences_file, output, repeats):
    """Child process: latency in ai_edge_litert, MediaPipe vectors of the sentences."""
    from ai_edge_litert.interpreter import Interpreter
    from mediapipe.tasks.python.core.base_options import BaseOptions
    from mediapipe.tasks.python.text import text_embedder

    latency = {}
    for threads in (1, 2):
        runner = Interpreter(model_path=model, num_threads=threads).get_signature_runner()
        shape = runner.get_input_details()["input_word_ids"]["shape"]
        ids = np.zeros(shape, np.int32)
        ids[0, :16] = 1000  # a 16-token sentence padded to L: the cost does not depend on the ids
        mask = (ids != 0).astype(np.int32)
        runner(input_word_ids=ids, input_mask=mask, input_type_ids=0 * ids)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            runner(input_word_ids=ids, input_mask=mask, input_type_ids=0 * ids)
            times.append(time.perf_counter() - start)
        latency[threads] = 1000 * float(np.median(times))
    sentences = json.loads(Path(sentences_file).read_text(encoding="utf-8"))
    options = text_embedder.TextEmbedderOptions(base_options=BaseOptions(model_asset_path=model))
    with text_embedder.TextEmbedder.create_from_options(options) as embedder:
        vectors = np.stack([np.asarray(embedder.embed(s).embeddings[0].embedding, np.float32)
                            for s in sentences])
    np.save(output, vectors)
    print(json.dumps(latency))


def _spearman(pairs, vectors, index):
    from scipy.stats import spearmanr

    a = np.stack([vectors[index[s1]] for s1, _, _ in pairs])
    b = np.stack([vectors[index[s2]] for _, s2, _ in pairs])
    cos = np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return 100 * spearmanr(cos, [score for _, _, score in pairs]).correlation


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--max-length", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--output", default=None)
    parser.add_argument("--runtime", nargs=3, metavar=("MODEL", "SENTENCES", "OUT"), default=None)
    args = parser.parse_args()
    if args.runtime:
        return runtime(*args.runtime, args.repeats)

    sys.path.insert(0, str(REPO))
    from keras_sentemb.data.resources import bundled_sts_dir
    from keras_sentemb.evaluation.sts import load_sts_pairs
    from keras_sentemb.export.litert import export_litert
    from keras_sentemb.models import SentenceEncoder

    encoder = SentenceEncoder.from_preset(args.model)
    pairs = load_sts_pairs(bundled_sts_dir(), "STSBenchmark", "test")
    sentences = sorted({s for s1, s2, _ in pairs for s in (s1, s2)})
    index = {s: i for i, s in enumerate(sentences)}
    rows = {"encode": {"sts_b_test": _spearman(pairs, encoder.encode(sentences), index)}}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "s.json").write_text(json.dumps(sentences), encoding="utf-8")
        for mode in MODES:
            path = Path(tmp) / f"{mode}.tflite"
            report = export_litert(encoder, path, quantize=mode, max_length=args.max_length)
            out = subprocess.run(
                [sys.executable, __file__, "--repeats", str(args.repeats), "--runtime", str(path),
                 str(Path(tmp) / "s.json"), str(Path(tmp) / "v.npy")],
                capture_output=True, text=True, check=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
            latency = json.loads(out.stdout.strip().splitlines()[-1])
            vectors = np.load(Path(tmp) / "v.npy")
            rows[mode] = {
                "size_mib": report["size_bytes"] / 2**20, "max_length": report["max_length"],
                "min_cosine": report["min_cosine"], "mean_cosine": report["mean_cosine"],
                "latency_ms_1_thread": latency["1"], "latency_ms_2_threads": latency["2"],
                "sts_b_test_mediapipe": _spearman(pairs, vectors, index),
            }
            print(mode, json.dumps(rows[mode]), flush=True)
    rows["machine"] = cpu_info()
    print(json.dumps(rows, indent=2))
    if args.output:
        Path(args.output).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
