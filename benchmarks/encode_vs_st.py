"""Encode throughput: keras_sentemb vs sentence-transformers, same CPU, same inputs.

    python benchmarks/encode_vs_st.py --n 2000 --batch-size 128 --max-length 256

Both sides encode the same first N sentences of wiki100k (or the bundled 10k
sample) with the bundled all-MiniLM-L6-v2, the same batch size and max length,
after one warm-up pass over the same data (so our compiled functions and ST's
allocator are warm). They run one after the other, not at the same time, and
each is timed `--repeats` times; the best run of each is reported. The ST side
runs in its own venv (`ST_PYTHON`, default /opt/stref/bin/python) via
benchmarks/st_encode.py. Prints one JSON line with both numbers and the ratio.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    configure_ours, cpu_info, our_encode_rate, read_lines, sentences_file, st_encode_rates,
)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sentences", default=None)
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--st-python", default=None)
    p.add_argument("--threads", type=int, default=None,
                   help="threads for both toolkits (default: TensorFlow's and torch's own)")
    p.add_argument("--parallel-batches", type=int, default=None,
                   help="our batches computed at once (default: the toolkit's, 2 on a CPU-only "
                        "host; 1 with --threads)")
    p.add_argument("--plain-gelu", action="store_true",
                   help="ours with keras-hub's composed GELU ops instead of the fused kernels")
    args = p.parse_args()
    parallel = configure_ours(args.threads, args.plain_gelu, args.parallel_batches)
    path = sentences_file(args.sentences)
    sentences = read_lines(path, args.n)

    from keras_sentemb import SentenceEncoder

    encoder = SentenceEncoder.from_preset("default")
    ours = our_encode_rate(encoder, sentences, args.repeats, batch_size=args.batch_size,
                           max_length=args.max_length, parallel_batches=parallel)
    st_runs = st_encode_rates(path, args.n, args.batch_size, args.max_length, args.repeats,
                              args.st_python, args.threads)
    result = {
        "benchmark": "encode",
        "n": len(sentences),
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "threads": args.threads,
        "parallel_batches": parallel,
        "fused_gelu": not args.plain_gelu,
        **cpu_info(),
        "keras_sentemb_sentences_per_s": round(ours, 1),
        "sentence_transformers_sentences_per_s": round(max(st_runs), 1) if st_runs else None,
    }
    if st_runs:
        result["ratio"] = round(ours / max(st_runs), 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
