"""Supervised SimCSE on Quora duplicates: in-batch negatives only vs mined hard negatives.

    python benchmarks/quora_beir.py --output runs/quora-beir-train --train-fraction 0.2
    python benchmarks/quora_hard_negatives.py --data runs/quora-beir-train \\
        --output runs/quora_hard_negatives.json

The training pairs are the duplicate pairs of the `train` split (each
unordered pair of questions of one duplicate set once); no question of a dev
or test set is trained on or mined as a negative. Every variant trains the
same start (`--start`, default the un-tuned encoder) for the same steps, batch
and learning rate:

- `in_batch`: `fit_simcse(pairs, mode="pairs")`: each question must find its
  duplicate among the batch's duplicates;
- `mined:<miner>`: `mine_hard_negatives(miner, pairs, ...)` over the training
  questions (the negatives ranked `--range-min` to `--range-max` for each
  anchor, none scoring within `--margin` of the positive), then
  `fit_simcse(triplets, mode="sup")`: the same, plus one mined negative per
  row. `<miner>` is `start` (the model being trained) or `default` (the
  bundled sentence encoder).

Each trained model is scored on the `dev` and `test` queries (the corpus is
encoded once per model). The variant is chosen on dev nDCG@10; test is
reported for every variant. One JSON document to stdout and `--output`.
"""

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from _common import cpu_info  # noqa: E402

START = HERE.parent / "runs" / "untuned-minilm"  # built as docs/data.md shows
METRICS = ("ndcg@10", "mrr@10", "recall@10", "recall@100")


def training_pairs(train):
    """Each unordered pair of questions of one training duplicate set, once."""
    seen, pairs = set(), []
    for qid, relevant in sorted(train.qrels.items()):
        for did in sorted(relevant):
            key = tuple(sorted((qid, did)))
            if key not in seen:
                seen.add(key)
                pairs.append((train.queries[qid], train.corpus[did]["text"]))
    return pairs


def held_out_ids(*splits):
    """Every question of the dev and test duplicate sets (queries and their duplicates)."""
    ids = set()
    for split in splits:
        for qid, relevant in split.qrels.items():
            ids.add(qid)
            ids.update(relevant)
    return ids


def score(encoder, dev, test):
    """Dev and test metrics of `encoder`, the corpus encoded once."""
    from keras_sentemb import evaluate_retrieval
    from keras_sentemb.evaluation.beir import document_text

    texts = [document_text(doc) for doc in dev.corpus.values()]
    corpus = encoder.encode(texts, batch_size=128, show_progress=False)
    out = {}
    for split in (dev, test):
        result = evaluate_retrieval(encoder, split, corpus_embeddings=corpus, show_progress=False)
        out[split.split] = {m: round(result[m], 2) for m in METRICS}
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="BEIR folder with a train split (quora_beir.py)")
    p.add_argument("--start", default=str(START))
    p.add_argument("--variants", default="in_batch,mined:start,mined:default")
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--learning-rate", type=float, default=5e-5)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--range-min", type=int, default=0)
    p.add_argument("--range-max", type=int, default=50)
    p.add_argument("--margin", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", default=None)
    args = p.parse_args(argv)

    import keras_sentemb
    from keras_sentemb import SentenceEncoder, fit_simcse, mine_hard_negatives
    from keras_sentemb.evaluation.beir import load_beir

    train, dev, test = (load_beir(args.data, split=s) for s in ("train", "dev", "test"))
    pairs = training_pairs(train)
    held_out = held_out_ids(dev, test)
    pool = [doc["text"] for did, doc in train.corpus.items() if did not in held_out]
    steps = max(1, int(args.epochs * len(pairs) / args.batch_size))
    common = dict(model=args.start, steps=steps, batch_size=args.batch_size,
                  learning_rate=args.learning_rate, max_length=args.max_length, dev=None,
                  seed=args.seed, verbose=0)

    runs = [{"variant": "start (no training)",
             **score(SentenceEncoder.from_preset(args.start), dev, test)}]
    for variant in [v.strip() for v in args.variants.split(",") if v.strip()]:
        began = time.perf_counter()
        row = {"variant": variant}
        if variant == "in_batch":
            encoder = fit_simcse(pairs, mode="pairs", **common)
        elif variant.startswith("mined:"):
            miner_name = variant.split(":", 1)[1]
            miner = SentenceEncoder.from_preset(args.start if miner_name == "start" else miner_name)
            triplets, stats = mine_hard_negatives(
                miner, pairs, num_negatives=1, range_min=args.range_min,
                range_max=args.range_max, margin=args.margin, corpus=pool, seed=args.seed,
                show_progress=False, return_stats=True)
            row["mined"] = {"triplets": len(triplets), **{k: v for k, v in stats.items()
                                                          if isinstance(v, (int, float, str))}}
            encoder = fit_simcse(triplets, mode="sup", **common)
        else:
            raise SystemExit(f"unknown variant {variant!r}: in_batch or mined:start|mined:<model>")
        row.update(score(encoder, dev, test))
        row["minutes"] = round((time.perf_counter() - began) / 60, 1)
        runs.append(row)
        print(json.dumps(row), file=sys.stderr)

    trained = [r for r in runs[1:] if r["variant"] != "in_batch"]
    chosen = max(trained, key=lambda r: r["dev"]["ndcg@10"])["variant"] if trained else None
    result = {
        "benchmark": "quora_hard_negatives", "start": Path(args.start).name,
        "training_pairs": len(pairs), "mining_pool": len(pool), "steps": steps,
        "batch_size": args.batch_size, "learning_rate": args.learning_rate,
        "max_length": args.max_length, "range": [args.range_min, args.range_max],
        "margin": args.margin, "seed": args.seed, "chosen_on_dev": chosen, "runs": runs,
        "keras_sentemb": keras_sentemb.__version__, **cpu_info(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
