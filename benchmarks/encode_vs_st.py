"""Encode throughput: keras_sentemb vs sentence-transformers, same CPU, same inputs.

    python benchmarks/encode_vs_st.py --n 2000 --batch-size 128 --max-length 256 \
        --st-batch-sizes 8,16,32,64,128

Both sides encode the same first N sentences of wiki100k (or the bundled 10k
sample) with the bundled all-MiniLM-L6-v2, the same batch size and max length,
after one warm-up pass over the same data (so our compiled functions and ST's
allocator are warm). They run one after the other, not at the same time, and
each is timed `--repeats` times; the best run of each is reported. The ST side
runs in its own venv (`ST_PYTHON`, default `stref/bin/python` in the clone) via
benchmarks/st_encode.py. With `--st-batch-sizes` ST runs at each of those batch
sizes and the ratio is against its fastest (on a CPU ST is fastest at small
batches, where ours caps a batch's padded tokens instead). Prints one JSON
line with both numbers and the ratio.
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
    p.add_argument("--max-batch-tokens", type=int, default=None,
                   help="our cap on padded tokens per batch (default: the toolkit's, 2,048 on a "
                        "CPU-only host; a large number such as 1000000 for no cap)")
    p.add_argument("--st-batch-sizes", default=None,
                   help="sentence-transformers' batch sizes, comma-separated; the ratio is "
                        "against the fastest (default: --batch-size)")
    p.add_argument("--plain-gelu", action="store_true",
                   help="ours with keras-hub's composed GELU ops instead of the fused kernels")
    args = p.parse_args()
    parallel = configure_ours(args.threads, args.plain_gelu, args.parallel_batches)
    path = sentences_file(args.sentences)
    sentences = read_lines(path, args.n)

    from keras_sentemb import SentenceEncoder
    from keras_sentemb.kernels.cpu_threads import check_max_batch_tokens

    encoder = SentenceEncoder.from_preset("default")
    max_batch_tokens = check_max_batch_tokens(args.max_batch_tokens)
    ours = our_encode_rate(encoder, sentences, args.repeats, batch_size=args.batch_size,
                           max_length=args.max_length, parallel_batches=parallel,
                           max_batch_tokens=max_batch_tokens)
    st_batch_sizes = ([int(b) for b in args.st_batch_sizes.split(",")] if args.st_batch_sizes
                      else [args.batch_size])
    st_by_batch_size = {}
    for st_batch_size in st_batch_sizes:
        runs = st_encode_rates(path, args.n, st_batch_size, args.max_length, args.repeats,
                               args.st_python, args.threads)
        if runs:
            st_by_batch_size[st_batch_size] = round(max(runs), 1)
    st_best = max(st_by_batch_size, key=st_by_batch_size.get) if st_by_batch_size else None
    result = {
        "benchmark": "encode",
        "n": len(sentences),
        "batch_size": args.batch_size,
        "st_batch_size": st_best,
        "max_length": args.max_length,
        "threads": args.threads,
        "parallel_batches": parallel,
        "max_batch_tokens": max_batch_tokens,
        "fused_gelu": not args.plain_gelu,
        **cpu_info(),
        "keras_sentemb_sentences_per_s": round(ours, 1),
        "sentence_transformers_sentences_per_s": st_by_batch_size.get(st_best),
        "sentence_transformers_by_batch_size": st_by_batch_size,
    }
    if st_best is not None:
        result["ratio"] = round(ours / st_by_batch_size[st_best], 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
