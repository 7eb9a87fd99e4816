"""Self-guided contrastive learning (SG-OPT, Kim et al., ACL 2021) on STS-B.

Trains the tuned copy BERT_T of an encoder with SG-OPT on the STS-B sentences
without their labels (train + dev + test sentences, as the paper does),
selects the checkpoint on STS-B **dev** only, and prints STS-B dev/test
Spearman x100 with `cls` pooling before and after, next to the starting
model's mean pooling.

    python recipes/sg.py                      # paper setting (1 epoch, GPU)
    python recipes/sg.py --steps 300 --max-length 64   # short CPU run
    python recipes/sg.py --smoke              # ~1-2 minutes on CPU

References:
    - [Kim, Yoo & Lee, 2021](https://arxiv.org/abs/2106.07345)
"""

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parents[1]


def default_sts_dir():
    shared = REPO.parent / "shared" / "data" / "STS"
    if (shared / "STSBenchmark" / "sts-train.csv").exists():
        return str(shared)
    from keras_sentemb.data.resources import bundled_sts_dir

    return str(bundled_sts_dir())  # dev + test only


def stsb_sentences(sts_dir):
    """Every STS-B sentence of the available splits, labels dropped."""
    from keras_sentemb.evaluation.readers import read_stsb

    sentences, splits = [], []
    for split in ("train", "dev", "test"):
        try:
            pairs = read_stsb(sts_dir, split=split)
        except FileNotFoundError:
            continue
        splits.append(split)
        for s1, s2, _ in pairs:
            sentences.extend([s1, s2])
    return sentences, splits


def stsb_scores(encoder, sts_dir, pooling):
    from keras_sentemb.evaluation.sts import evaluate_sts

    result = evaluate_sts(
        encoder, sts_dir, tasks=["stsb"], split=["dev", "test"], pooling=pooling,
        show_progress=False,
    )["STSBenchmark"]
    return {split: round(result[split]["spearman"], 2) for split in ("dev", "test")}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--sts-dir", default=None, help="folder holding STSBenchmark/")
    parser.add_argument("--loss", default="opt3", choices=["opt3", "base", "opt1", "opt2"])
    parser.add_argument("--steps", type=int, default=None, help="default: one epoch")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--max-length", type=int, default=None)
    parser.add_argument("--view-pooling", default="max", choices=["max", "mean"])
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--patience", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output", default=None)
    parser.add_argument("--pooling", default="auto",
                        help="BERT_T's pooling; auto: the model's own, else the paper's cls")
    parser.add_argument("--results", default=None, help="write the JSON here too")
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    from keras_sentemb.evaluation.readers import read_stsb
    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.api import fit_self_guided

    sts_dir = args.sts_dir or default_sts_dir()
    corpus, corpus_splits = stsb_sentences(sts_dir)
    dev_pairs = read_stsb(sts_dir, split="dev")
    steps, eval_every = args.steps, args.eval_every
    if args.smoke:
        corpus, dev_pairs = corpus[:400], dev_pairs[:200]
        steps, eval_every = steps or 6, 3
        args.max_length = args.max_length or 32

    encoder = SentenceEncoder.from_preset(args.model)
    before = {
        "cls": stsb_scores(encoder, sts_dir, "cls"),
        "mean": stsb_scores(encoder, sts_dir, "mean"),
    }
    print("before:", json.dumps(before), flush=True)
    start = time.time()
    encoder = fit_self_guided(
        corpus,
        model=encoder,
        output=args.output,
        loss=args.loss,
        steps=steps,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        max_length=args.max_length,
        view_pooling=args.view_pooling,
        pooling=args.pooling,
        dev=dev_pairs,
        eval_every=eval_every,
        patience=args.patience,
        seed=args.seed,
        verbose=2,
    )
    seconds = time.time() - start
    pooling = encoder.training_report.pooling
    after = {pooling: stsb_scores(encoder, sts_dir, pooling)}
    result = {
        "method": f"SG ({args.loss})",
        "model": args.model,
        "corpus": f"STS-B sentences without labels ({'+'.join(corpus_splits)}), {len(corpus)} sentences",
        "pooling": f"{pooling} ({encoder.training_report.pooling_reason})",
        "selection": f"STS-B dev ({pooling} pooling), every {eval_every} steps",
        "dev_history": (encoder.training_report.selection or {}).get("history"),
        "steps": steps,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "train_seconds": round(seconds, 1),
        "before": before,
        "after": after,
        "smoke": args.smoke,
    }
    print(json.dumps(result, indent=2))
    if args.results:
        with open(args.results, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
