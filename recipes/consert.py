"""ConSERT (Yan et al., 2021): unsupervised transfer on the STS-B unlabeled texts.

Trains the encoder on the unlabeled STS-B *train* sentences with ConSERT's
main unsupervised setting (token shuffle + feature cutoff 0.2, NT-Xent at
temperature 0.1, mean pooling, encoder dropout off), selects the checkpoint
on STS-B dev and reports STS-B dev before/after and STS-B test (Spearman
x100, SentEval's "all" protocol on one file).

The paper trains on the unlabeled texts of all STS splits (test included);
here the test sentences are held out and dev is used for selection only.

    python recipes/consert.py --smoke                   # ~1 minute on CPU
    python recipes/consert.py --steps 300 --batch-size 64 --max-length 40
    python recipes/consert.py --model bert-base --batch-size 96   # paper (GPU)
"""

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

REPO = Path(__file__).resolve().parents[1]
STSB = REPO.parent / "shared" / "data" / "STS" / "STSBenchmark"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default")
    p.add_argument("--stsb", default=str(STSB), help="STSBenchmark folder (with sts-train.csv)")
    p.add_argument("--steps", type=int, default=None, help="default: one epoch")
    p.add_argument("--batch-size", type=int, default=96)
    p.add_argument("--learning-rate", type=float, default=5e-7)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--views", default="shuffle,feature_cutoff")
    p.add_argument("--temperature", type=float, default=0.1)
    p.add_argument("--eval-every", type=int, default=125)
    p.add_argument("--dev-limit", type=int, default=None, help="score only the first N dev pairs")
    p.add_argument("--output", default=None)
    p.add_argument("--json", default=None, help="also write the result JSON here")
    p.add_argument("--smoke", action="store_true", help="tiny CPU run (~1 minute)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    from keras_sentemb.evaluation.readers import read_stsb
    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.pipelines.callbacks import sts_spearman
    from keras_sentemb.api import fit_consert

    stsb = Path(args.stsb)
    if not (stsb / "sts-train.csv").exists():
        from keras_sentemb.data.resources import bundled_corpus
        print(f"{stsb}/sts-train.csv not found; training on the bundled wiki sample", file=sys.stderr)
        train = bundled_corpus()
        stsb = None
    else:
        seen, train = set(), []
        for a, b, _ in read_stsb(stsb, "train"):
            for s in (a, b):
                if s not in seen:
                    seen.add(s)
                    train.append(s)
    from keras_sentemb.data.resources import bundled_sts_dir
    eval_dir = stsb or bundled_sts_dir()
    dev = read_stsb(eval_dir, "dev")
    test = read_stsb(eval_dir, "test")
    if args.smoke:
        train = train[:2000] if isinstance(train, list) else train
        args.steps, args.batch_size, args.max_length = 6, 16, 32
        args.learning_rate, args.eval_every = 1e-5, 3
        args.dev_limit = args.dev_limit or 150
        test = test[:150]
    if args.dev_limit:
        dev = dev[: args.dev_limit]

    encoder = SentenceEncoder.from_preset(args.model)
    before = {"dev": sts_spearman(encoder, dev), "test": sts_spearman(encoder, test)}
    t0 = time.time()
    encoder = fit_consert(
        train, model=encoder, output=args.output, steps=args.steps,
        batch_size=args.batch_size, learning_rate=args.learning_rate,
        max_length=args.max_length, views=args.views, temperature=args.temperature,
        dev=dev, eval_every=args.eval_every, verbose=2,
    )
    seconds = time.time() - t0
    after = {"dev": sts_spearman(encoder, dev), "test": sts_spearman(encoder, test)}
    result = {
        "method": "consert", "model": args.model, "train_sentences": len(train) if isinstance(train, list) else str(train),
        "steps": args.steps, "batch_size": args.batch_size, "learning_rate": args.learning_rate,
        "max_length": args.max_length, "views": args.views, "dev_pairs": len(dev), "test_pairs": len(test),
        "stsb_dev_before": round(before["dev"], 2), "stsb_dev_after": round(after["dev"], 2),
        "stsb_test_before": round(before["test"], 2), "stsb_test_after": round(after["test"], 2),
        "train_seconds": round(seconds, 1), "smoke": args.smoke,
    }
    print(json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
