"""Encodes with a static folder's real consumer, in an interpreter without TensorFlow.

Run by the sentence-transformers / model2vec environment's Python
(`ST_PYTHON`):

    python tests/static_consumers.py FORMAT FOLDER SENTENCES.json OUT.npy

FORMAT is `sentence-transformers` (`SentenceTransformer(FOLDER).encode`) or
`model2vec` (`StaticModel.from_pretrained(FOLDER).encode`). Exits 3 when the
consumer's package is not installed.
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("USE_TF", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(fmt, folder, sentences_path, out):
    import importlib.util

    import numpy as np

    package = "sentence_transformers" if fmt == "sentence-transformers" else "model2vec"
    if importlib.util.find_spec(package) is None:
        print(f"{package} is not installed", file=sys.stderr)
        return 3
    with open(sentences_path, encoding="utf-8") as f:
        sentences = json.load(f)
    if fmt == "sentence-transformers":
        from sentence_transformers import SentenceTransformer

        vectors = SentenceTransformer(folder, device="cpu").encode(sentences)
    else:
        from model2vec import StaticModel

        vectors = StaticModel.from_pretrained(folder).encode(sentences)
    np.save(out, np.asarray(vectors, np.float32))
    assert "tensorflow" not in sys.modules
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
