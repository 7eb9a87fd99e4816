"""Contrastive Tension (Carlsson et al., ICLR 2021): the paper's unsupervised setup.

Two towers start from BERT-base (keras-hub preset `bert_base_en_uncased`);
batches of 16 from Wikipedia sentences hold, per sampled sentence, one
identical pair (label 1) and K = 7 pairs of random sentences (label 0);
dot-product logits, binary cross-entropy, dropout off, RMSprop with the step
schedule (1e-5 to step 500, 8e-6, 6e-6, 4e-6, then 2e-6 after 2000), max
length 75; the better tower on STS-B dev (Spearman, evaluated every
--eval-every steps, the starting weights included) is kept. Prints STS-B
dev/test Spearman x100 (mean pooling) before and after. With --survey /
--spread it also runs the layer-wise survey (Figure 1) and the STS spread
analysis (Figure 3) on STS-B test before and after, writing PNGs to --out.

    python recipes/ct.py --smoke --survey --spread --out runs/ct_smoke   # ~1 minute on CPU
    python recipes/ct.py --model default --steps 400 --max-length 64     # CPU
    python recipes/ct.py --steps 2000 --survey --spread --out runs/ct    # paper setup (GPU)
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
    p.add_argument("--model", default="bert_base_en_uncased")
    p.add_argument("--corpus", default=None,
                   help="one sentence a line (default: shared/data/wiki/wiki100k.txt, "
                        "else the packaged 10k sample)")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--negatives", default="k7")
    p.add_argument("--logits", default="dot", choices=["dot", "cosine"])
    p.add_argument("--keep", default="best", choices=["best", "tower1", "tower2"])
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--learning-rate", type=float, default=None, help="default: 1e-5 (schedule)")
    p.add_argument("--max-length", type=int, default=75)
    p.add_argument("--dropout", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dev-limit", type=int, default=None, help="score only the first N dev pairs")
    p.add_argument("--survey", action="store_true", help="layer survey before/after (Figure 1)")
    p.add_argument("--spread", action="store_true", help="STS spread before/after (Figure 3)")
    p.add_argument("--out", default=None, help="folder for PNGs and results.json")
    p.add_argument("--output", default=None, help="save the kept encoder here")
    p.add_argument("--smoke", action="store_true", help="tiny CPU run (~1 minute)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    from keras_sentemb.api import fit_ct
    from keras_sentemb.data.corpus import load_corpus
    from keras_sentemb.data.resources import bundled_corpus
    from keras_sentemb.evaluation.layer_survey import layer_survey, plot_layer_survey
    from keras_sentemb.evaluation.sts_spread import load_stsb_pairs, plot_sts_spread, sts_spread
    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.pipelines.callbacks import sts_spearman

    corpus_path = args.corpus or (WIKI if WIKI.exists() else bundled_corpus())
    corpus = load_corpus(str(corpus_path))
    dev = load_stsb_pairs("stsb", "dev")
    test = load_stsb_pairs("stsb", "test")
    if args.smoke:
        args.model = "default" if args.model == "bert_base_en_uncased" else args.model
        corpus = corpus[:2000]
        args.steps, args.eval_every, args.max_length = 16, 8, 32
        args.dev_limit = args.dev_limit or 150
        test = test[:150]
    if args.dev_limit:
        dev = dev[: args.dev_limit]
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)

    encoder = SentenceEncoder.from_preset(args.model)
    # CT's pooling: the model's own, else the paper's mean of the last layer.
    encoder.pooling = encoder.declared_pooling or "mean"
    result = {
        "method": "ct", "model": args.model, "corpus": str(corpus_path),
        "corpus_sentences": len(corpus), "steps": args.steps, "batch_size": args.batch_size,
        "negatives": args.negatives, "logits": args.logits, "keep": args.keep,
        "max_length": args.max_length, "dev_pairs": len(dev), "test_pairs": len(test),
        "smoke": args.smoke,
    }
    result["stsb_dev_before"] = round(sts_spearman(encoder, dev), 2)
    result["stsb_test_before"] = round(sts_spearman(encoder, test), 2)
    print(json.dumps({"before": {"stsb_dev": result["stsb_dev_before"],
                                 "stsb_test": result["stsb_test_before"]}}), flush=True)
    surveys, spreads = {}, {}
    if args.survey:
        surveys["before"] = layer_survey(encoder, data=test)
    if args.spread:
        spreads["before"] = sts_spread(encoder, data=test)

    t0 = time.time()
    encoder = fit_ct(
        corpus, model=encoder, steps=args.steps, batch_size=args.batch_size,
        negatives=args.negatives, logits=args.logits, dev=dev, keep=args.keep,
        eval_every=args.eval_every, learning_rate=args.learning_rate,
        max_length=args.max_length, dropout=args.dropout, seed=args.seed,
        output=args.output, verbose=2,
    )
    result["train_seconds"] = round(time.time() - t0, 1)
    report = encoder.training_report
    result["pooling"] = report.pooling
    result["kept"] = {"tower": report.extras["kept_tower"],
                      "step": report.selection["kept_step"] if report.selection else args.steps}
    if report.selection:
        result["dev_history"] = report.selection["history"]
    result["stsb_dev_after"] = round(sts_spearman(encoder, dev), 2)
    result["stsb_test_after"] = round(sts_spearman(encoder, test), 2)
    print(json.dumps({"after": {"stsb_dev": result["stsb_dev_after"],
                                "stsb_test": result["stsb_test_after"]}}), flush=True)
    if args.survey:
        surveys["after"] = layer_survey(encoder, data=test)
        result["layer_survey_test"] = {
            name: [round(l["spearman"], 2) for l in s["layers"]] for name, s in surveys.items()
        }
        if out:
            plot_layer_survey(surveys, out / "layer_survey.png",
                              title=f"Layer-wise STS-B test Spearman ({args.model})")
    if args.spread:
        spreads["after"] = sts_spread(encoder, data=test)
        result["spread_test"] = {
            name: [(b["label"], b["count"], round(b["mean"], 3), round(b["std"], 3))
                   for b in s["buckets"] if b["count"]]
            for name, s in spreads.items()
        }
        if out:
            plot_sts_spread(spreads, out / "spread.png",
                            title=f"STS-B test cosine spread ({args.model})")
    print(json.dumps(result))
    if out:
        (out / "results.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
