"""Harder in-batch negatives: batches of similar sentences against random batches, same run otherwise.

    python benchmarks/clustered_batches.py --start runs/untuned-minilm --corpus data/wiki.txt \\
        --method simcse --learning-rate 1e-4 --steps 250 \\
        --out benchmarks/results/clustered_batches_untuned_minilm.jsonl

Once the start has been lifted, the in-batch task of SimCSE-style methods is
solved: a sentence's dropout copy is far closer to it than any of 63 random
sentences (SimCSE's loss falls to about 1e-5 within 100 steps at temperature
0.05), and the gradient comes from a few of the hardest negatives. Batches
made of similar sentences (topic-clustered batches, as balanced topic-aware
sampling builds for dense retrieval) keep the task hard.

The corpus is encoded with the start (its own pooling) and split into
leaves of exactly `--batch-size` sentences by a balanced PCA tree: each node
is cut along its top principal direction at a multiple of the batch size
nearest its middle. The leaves, in a seeded random order, are written to a
file that is trained in file order (`streamed(path, shuffle_buffer=1,
no_duplicates=False)`), so every batch is one leaf; rows that fill no leaf
are left out. The `random` arm trains on the corpus as `fit_*` reads it.

How hard each arm's batches are: the mean, over sentences, of the cosine
(start's vectors) to the nearest other sentence of the batch. Each arm keeps
its checkpoint on STS-B dev; its test is read once, for the kept one.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_info, shown_path, sts_b  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def balanced_leaves(vectors, size, seed=0, iterations=8):
    """Index arrays of exactly `size` rows each, rows of a leaf close together (a PCA tree).

    A node of more than `size` rows is cut along its top principal direction
    (power iteration) at the multiple of `size` nearest its middle; a node of
    `size` rows or fewer is a leaf. Leaves short of `size` are dropped.
    """
    vectors = np.asarray(vectors, np.float64)
    rng = np.random.default_rng(seed)
    leaves, stack = [], [np.arange(len(vectors))]
    while stack:
        rows = stack.pop()
        if len(rows) <= size:
            if len(rows) == size:
                leaves.append(rows)
            continue
        centred = vectors[rows] - vectors[rows].mean(axis=0)
        direction = rng.standard_normal(vectors.shape[1])
        for _ in range(iterations):
            direction = centred.T @ (centred @ direction)
            direction /= max(np.linalg.norm(direction), 1e-300)
        ordered = rows[np.argsort(centred @ direction, kind="stable")]
        cut = size * max(1, int(round(len(rows) / (2 * size))))
        stack += [ordered[cut:], ordered[:cut]]
    return leaves


def nearest_in_batch(vectors, batches):
    """Mean over rows of the cosine to the nearest other row of the same batch."""
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    scores = []
    for rows in batches:
        sims = unit[rows] @ unit[rows].T
        np.fill_diagonal(sims, -np.inf)
        scores.append(sims.max(axis=1))
    return float(np.mean(np.concatenate(scores)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", required=True)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--method", default="simcse", help="a registered method that trains "
                        "on sentences (simcse, esimcse, whitenedcse, ct, ...)")
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default="random,clustered")
    parser.add_argument("--work", default=str(REPO / "runs" / "clustered-batches"),
                        help="folder for the clustered corpus and the trained models")
    parser.add_argument("--out", default=str(REPO / "runs" / "clustered_batches.jsonl"))
    args = parser.parse_args()
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if not arms or set(arms) - {"random", "clustered"}:
        raise SystemExit("clustered_batches: --arms takes random and/or clustered")

    import keras_sentemb
    from keras_sentemb.data.corpus import load_corpus
    from keras_sentemb.models import SentenceEncoder

    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.parent.mkdir(parents=True, exist_ok=True)

    def log(record):
        print(json.dumps(record), flush=True)
        with open(out, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    sentences = load_corpus(args.corpus)
    t0 = time.perf_counter()
    vectors = np.asarray(SentenceEncoder.from_preset(args.start).encode(
        sentences, batch_size=256, max_length=args.max_length), np.float32)
    leaves = balanced_leaves(vectors, args.batch_size, seed=args.seed)
    order = np.random.default_rng(args.seed).permutation(len(leaves))
    leaves = [leaves[i] for i in order]
    clustered_file = work / "clustered.txt"
    with open(clustered_file, "w", encoding="utf-8") as f:
        for rows in leaves:
            f.writelines(sentences[i] + "\n" for i in rows)
    random_rows = np.random.default_rng(args.seed).permutation(len(sentences))
    random_batches = np.split(random_rows[: len(leaves) * args.batch_size], len(leaves))
    hardness = {"random": round(nearest_in_batch(vectors, random_batches[:200]), 4),
                "clustered": round(nearest_in_batch(vectors, leaves[:200]), 4)}
    log({"corpus": shown_path(args.corpus), "sentences": len(sentences), "leaves": len(leaves),
         "nearest_in_batch_cosine": hardness, "seconds": round(time.perf_counter() - t0, 1)})

    fit = getattr(keras_sentemb, "fit_" + args.method)
    for arm in arms:
        data = (keras_sentemb.streamed(str(clustered_file), shuffle_buffer=1, no_duplicates=False)
                if arm == "clustered" else args.corpus)
        t0 = time.perf_counter()
        encoder = fit(data, model=args.start, steps=args.steps, batch_size=args.batch_size,
                      learning_rate=args.learning_rate, max_length=args.max_length,
                      eval_every=args.eval_every, seed=args.seed, verbose=0,
                      output=str(work / f"{args.method}-{arm}"))
        selection = encoder.training_report.selection
        log({"arm": arm, "method": args.method, "learning_rate": args.learning_rate,
             "steps": args.steps, "batch_size": args.batch_size,
             "nearest_in_batch_cosine": hardness[arm], "history": selection["history"],
             "kept_step": selection["kept_step"], "dev": round(selection["kept_score"], 4),
             "test": round(sts_b(encoder, "test"), 4),
             "seconds": round(time.perf_counter() - t0, 1)})
    log({"summary": True, "command": "python benchmarks/clustered_batches.py " + " ".join(
        shown_path(a) if Path(a).exists() else a for a in sys.argv[1:]), "machine": cpu_info()})


if __name__ == "__main__":
    main()
