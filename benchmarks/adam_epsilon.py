"""How much Adam's epsilon shrinks SimCSE's first updates, Keras' placement against PyTorch's.

    python benchmarks/adam_epsilon.py                     # untuned-minilm, 3 batches of 64

Keras' Adam computes `lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)`,
so relative to the bias-corrected second moment its epsilon is
`eps / sqrt(1 - b2^t)` (3.2e-5 at step 1 for eps = 1e-6); PyTorch's AdamW adds
its eps (1e-8) to the corrected root. For one SimCSE loss (batch 64, max
length 32, mean pooling, dropout on) on `--batches` batches of wiki100k this
takes each weight's root-mean-square gradient `r` as the corrected root and
prints the mean of `r / (r + eps_eff)` (the fraction of a full Adam step the
weight moves) for the effective epsilons of both, inside and outside the
token embedding. One JSON line.
"""

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import sentences_file  # noqa: E402

# The un-tuned start that docs/data.md builds (`train mlm ... --output runs/untuned-minilm`).
START = Path(__file__).resolve().parents[1] / "runs" / "untuned-minilm"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(START))
    p.add_argument("--batches", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--epsilon", type=float, default=1e-6, help="Keras' epsilon")
    args = p.parse_args()

    import numpy as np
    import tensorflow as tf

    from keras_sentemb import SentenceEncoder
    from keras_sentemb.losses.info_nce import info_nce_loss

    encoder = SentenceEncoder.from_preset(args.model)
    with open(sentences_file(None), encoding="utf-8") as f:
        lines = [line.strip() for line in itertools.islice(f, 5000) if line.strip()]
    rng = np.random.default_rng(0)
    variables = encoder.trainable_variables
    squares = [np.zeros(v.shape, np.float64) for v in variables]
    norms = []
    for _ in range(args.batches):
        batch = list(rng.choice(lines, args.batch_size, replace=False))
        inputs = encoder.preprocess(batch + batch, max_length=args.max_length)
        with tf.GradientTape() as tape:
            z = encoder.sentence_vectors(inputs, "mean", training=True)
            loss = info_nce_loss(z[: args.batch_size], z[args.batch_size:], temperature=0.05)
        grads = [tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, variables)]
        norms.append(float(np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads))))
        for total, g in zip(squares, grads):
            total += g.astype(np.float64) ** 2 / args.batches
    embedding = [i for i, v in enumerate(variables) if "token_embedding" in v.path]
    groups = {
        "embedding": np.sqrt(np.concatenate([squares[i].ravel() for i in embedding])),
        "other": np.sqrt(np.concatenate(
            [s.ravel() for i, s in enumerate(squares) if i not in embedding])),
    }
    beta_2 = 0.999
    effective = {"torch_1e-8": 1e-8}
    for step in (1, 10, 100, 250):
        effective[f"keras_step_{step}"] = args.epsilon / np.sqrt(1 - beta_2 ** step)
    out = {"benchmark": "adam_epsilon", "model": os.path.basename(args.model.rstrip("/")),
           "keras_epsilon": args.epsilon, "gradient_norms": [round(n, 3) for n in norms]}
    for name, r in groups.items():
        out[name] = {"weights": int(r.size), "median_rms": float(f"{np.median(r):.3g}"),
                     "step_fraction": {k: round(float(np.mean(r / (r + e))), 4)
                                       for k, e in effective.items()}}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
