"""How much InfoNCE is left to learn from once WhitenedCSE whitens a batch: the loss, raw and whitened.

For each model, batches of `--batch-size` random corpus sentences are encoded
twice with dropout (two views, mean pooling, as WhitenedCSE trains the
default model's pooling). The script prints, averaged over `--batches`
batches: the mean cosine of each sentence with its other view and with the
batch's other sentences, and InfoNCE at each temperature, on the raw pooled
vectors (SimCSE's loss) and after shuffled group whitening (each view its own
permutation, groups of `--group-size`).

```
python benchmarks/whitening_saturation.py --corpus data/wiki.txt \\
    --models runs/untuned-minilm,default
```
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def cosines(a, b):
    """`(mean cosine of row i with row i, mean cosine of row i with the other rows)`."""
    import numpy as np

    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    c = a @ b.T
    n = len(c)
    return float(np.trace(c) / n), float((c.sum() - np.trace(c)) / (n * (n - 1)))


def measure(model, sentences, args):
    import numpy as np
    import tensorflow as tf

    from keras_sentemb import SentenceEncoder
    from keras_sentemb.losses.info_nce import info_nce_loss
    from keras_sentemb.methods.whitenedcse.whitening import group_whitening

    rng = np.random.default_rng(args.seed)
    encoder = SentenceEncoder.from_preset(model)
    temperatures = [float(t) for t in args.temperatures.split(",")]
    rows = []
    for _ in range(args.batches):
        batch = [sentences[i] for i in rng.choice(len(sentences), args.batch_size, replace=False)]
        packed = encoder.preprocess(tf.constant(batch), args.max_length)
        raw = [tf.cast(encoder.sentence_vectors(packed, "mean", training=True), "float32")
               for _ in range(2)]
        white = [group_whitening(v, rng.permutation(v.shape[-1]), args.group_size)
                 for v in raw]
        row = {}
        for name, (a, b) in (("raw", raw), ("whitened", white)):
            row[f"{name}_positive_cos"], row[f"{name}_negative_cos"] = cosines(a.numpy(),
                                                                               b.numpy())
            for t in temperatures:
                row[f"{name}_info_nce_t{t:g}"] = float(info_nce_loss(a, b, temperature=t))
        rows.append(row)
    return {key: round(float(np.mean([r[key] for r in rows])), 6) for key in rows[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--models", default="default")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=6)
    parser.add_argument("--temperatures", default="0.05,0.1,0.2")
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with open(args.corpus, encoding="utf-8") as f:
        sentences = [line.strip() for line in f if line.strip()]
    for model in args.models.split(","):
        print(json.dumps({"model": Path(model).name, **measure(model, sentences, args)}))


if __name__ == "__main__":
    main()
