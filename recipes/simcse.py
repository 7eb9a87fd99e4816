"""Unsupervised SimCSE (Gao et al., 2021) on Wikipedia sentences.

Trains on wiki100k (shared/data/wiki; the package ships a 10k sample) with
dropout as the only augmentation, InfoNCE at temperature 0.05; selects the
checkpoint on STS-B dev; reports STS-B dev before/after and STS-B test
(Spearman x100). The paper's setting is [CLS] + MLP (train only), batch 64,
lr 3e-5, max length 32 on wiki1m; for the default model (trained with mean
pooling) pass `--pooling mean --mlp none`.

    python recipes/simcse.py --smoke                       # ~1 minute on CPU
    python recipes/simcse.py --pooling mean --mlp none --steps 300 --batch-size 32
    python recipes/simcse.py --model bert-base --corpus wiki1m_for_simcse.txt  # paper (GPU)
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
WIKI = REPO.parent / "shared" / "data" / "wiki" / "wiki100k.txt"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default")
    p.add_argument("--corpus", default=str(WIKI) if WIKI.exists() else None)
    p.add_argument("--steps", type=int, default=None, help="default: one epoch")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--learning-rate", type=float, default=3e-5)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--pooling", default="auto",
                   help="auto: the model's own pooling, else the paper's cls")
    p.add_argument("--mlp", default="auto", choices=["auto", "train", "none"],
                   help="auto: the training-only MLP head with cls pooling only")
    p.add_argument("--temperature", type=float, default=0.05)
    p.add_argument("--eval-every", type=int, default=125)
    p.add_argument("--dev-limit", type=int, default=None, help="score only the first N dev pairs")
    p.add_argument("--output", default=None)
    p.add_argument("--json", default=None)
    p.add_argument("--smoke", action="store_true", help="tiny CPU run (~1 minute)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    from keras_sentemb.data.corpus import load_corpus
    from keras_sentemb.data.resources import bundled_corpus, bundled_sts_dir
    from keras_sentemb.evaluation.readers import read_stsb
    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.pipelines.callbacks import sts_spearman
    from keras_sentemb.api import fit_simcse

    corpus = load_corpus(args.corpus or bundled_corpus())
    dev = read_stsb(bundled_sts_dir(), "dev")
    test = read_stsb(bundled_sts_dir(), "test")
    if args.smoke:
        corpus = corpus[:2000]
        args.steps, args.batch_size, args.eval_every = 6, 16, 3
        args.dev_limit = args.dev_limit or 150
        test = test[:150]
    if args.dev_limit:
        dev = dev[: args.dev_limit]

    from keras_sentemb.pipelines.scaffold import resolve_pooling

    encoder = SentenceEncoder.from_preset(args.model)
    args.pooling, reason = resolve_pooling(args.pooling, encoder, "cls")
    print(f"pooling {args.pooling} ({reason})", file=sys.stderr)
    encoder.pooling = args.pooling
    before = {"dev": sts_spearman(encoder, dev), "test": sts_spearman(encoder, test)}
    t0 = time.time()
    encoder = fit_simcse(
        corpus, model=encoder, output=args.output, steps=args.steps,
        batch_size=args.batch_size, learning_rate=args.learning_rate,
        max_length=args.max_length, pooling=args.pooling, mlp=args.mlp,
        temperature=args.temperature, dev=dev, eval_every=args.eval_every, verbose=2,
    )
    seconds = time.time() - t0
    after = {"dev": sts_spearman(encoder, dev), "test": sts_spearman(encoder, test)}
    result = {
        "method": "simcse-unsup", "model": args.model, "corpus_sentences": len(corpus),
        "steps": args.steps, "batch_size": args.batch_size, "learning_rate": args.learning_rate,
        "max_length": args.max_length, "pooling": args.pooling,
        "mlp": encoder.training_report.resolved["mlp"],
        "dev_pairs": len(dev), "test_pairs": len(test),
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
