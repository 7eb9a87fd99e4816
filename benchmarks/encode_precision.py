"""bfloat16 vs float32 encode on this CPU, against sentence-transformers fp32, in one run.

    python benchmarks/encode_precision.py --n 2000 --batch-size 128 --max-length 256

One process, one after the other on the same first N wiki sentences (after a
warm-up pass each): keras_sentemb `encode(precision="float32")`,
`encode(precision="bfloat16")` (Keras' mixed_bfloat16 policy on a copy of the
encoder), and sentence-transformers fp32 (its own venv, `ST_PYTHON`, via
benchmarks/st_encode.py). Best of `--repeats` runs each. Then the STS cost:
Spearman x 100 on the bundled STS-B test set (SentEval's version) with each
precision. Also prints what the CPU offers for bfloat16 (the lscpu flags
avx512_bf16 / amx_bf16; without them TensorFlow has no native bfloat16
matmul on the CPU). One JSON line.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    cpu_info, our_encode_rate, read_lines, sentences_file, st_encode_rates,
)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sentences", default=None)
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--st-python", default=None)
    p.add_argument("--skip-sts", action="store_true")
    args = p.parse_args()
    path = sentences_file(args.sentences)
    sentences = read_lines(path, args.n)

    from keras_sentemb import SentenceEncoder
    from keras_sentemb.evaluation.sts import evaluate_sts

    encoder = SentenceEncoder.from_preset("default")
    result = {"benchmark": "encode_precision", "n": len(sentences), "batch_size": args.batch_size,
              "max_length": args.max_length, **cpu_info()}
    for precision in ("float32", "bfloat16"):
        kwargs = dict(batch_size=args.batch_size, max_length=args.max_length,
                      precision=precision, show_progress=False)
        rate = our_encode_rate(encoder, sentences, args.repeats, **kwargs)
        result[f"keras_sentemb_{precision}_sentences_per_s"] = round(rate, 1)
    st_runs = st_encode_rates(path, args.n, args.batch_size, args.max_length, args.repeats,
                              args.st_python)
    if st_runs:
        st_rate = max(st_runs)
        result["sentence_transformers_fp32_sentences_per_s"] = round(st_rate, 1)
        for precision in ("float32", "bfloat16"):
            result[f"ratio_{precision}_vs_st_fp32"] = round(
                result[f"keras_sentemb_{precision}_sentences_per_s"] / st_rate, 2)
    if not args.skip_sts:
        from keras_sentemb.data.resources import bundled_sts_dir

        for precision in ("float32", "bfloat16"):
            scores = evaluate_sts(encoder, bundled_sts_dir(), tasks="stsb", split="test",
                                  precision=precision, show_progress=False)
            result[f"stsb_test_{precision}"] = scores["STSBenchmark"]
        spearman = {k: v["test"]["spearman"] if isinstance(v.get("test"), dict) else v
                    for k, v in result.items() if k.startswith("stsb_test_")}
        result["stsb_test_spearman"] = spearman
    print(json.dumps(result))


if __name__ == "__main__":
    main()
