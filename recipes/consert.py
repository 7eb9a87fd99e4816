"""ConSERT (Yan et al., ACL 2021): unsupervised transfer on unlabeled STS texts.

Defaults are the paper's unsupervised BERT-base setting (table below, checked
against the official scripts/unsup-consert-base.sh and main.py): token
shuffle + feature cutoff 0.2, NT-Xent at temperature 0.1, mean pooling,
encoder dropout off, batch 96, lr 5e-7 with 10% linear warm-up, 10 epochs,
STS-B dev every 200 steps (early stop after 10 evaluations without gain, best
kept). Reports STS-B dev/test Spearman x100 before and after, with the
training pooling (mean) and with the average of the last two layers
(`mean_last2`, the official evaluation's `last2avg`); `--seeds N` repeats the
run and reports mean and std.

    python recipes/consert.py --smoke                   # ~1 minute on CPU (default model)
    python recipes/consert.py                           # the paper's setting (GPU)
    python recipes/consert.py --model default --texts train --steps 300 --batch-size 64
"""

import json
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _paper import Setting, add_seeds, paper_parser, paper_value, summarize_seeds  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STSB = REPO.parent / "shared" / "data" / "STS" / "STSBenchmark"

_SCRIPT = "yym6472/ConSERT@03c9e8f scripts/unsup-consert-base.sh"
_MAIN = "yym6472/ConSERT@03c9e8f main.py"
# The paper's main unsupervised setting (Yan et al. 2021, section 4 / Table 2, BERT-base);
# every value checked against the official script / main.py named in its source.
PAPER = {
    "model": Setting("bert_base_en_uncased", f"{_SCRIPT}: --model_name_or_path bert-base-uncased"),
    "data": Setting("stssick", f"{_SCRIPT}: --train_data stssick --no_pair (all texts of "
                               "STS12-16, STS-B, SICK-R, every split, labels dropped)"),
    "views": Setting("shuffle,feature_cutoff", f"{_SCRIPT}: --da_final_1 feature_cutoff "
                                               "--da_final_2 shuffle --cutoff_rate_final_1 0.2"),
    "temperature": Setting(0.1, f"{_SCRIPT}: --temperature 0.1"),
    "batch_size": Setting(96, f"{_SCRIPT}: --batch_size 96"),
    "learning_rate": Setting(5e-7, f"{_SCRIPT}: --learning_rate 0.0000005"),
    "max_length": Setting(64, f"{_SCRIPT}: --max_seq_length 64"),
    "epochs": Setting(10, f"{_SCRIPT}: --num_epochs 10"),
    "warmup_ratio": Setting(0.1, f"{_MAIN} l.284: warmup = 10% of the training steps"),
    "eval_every": Setting(200, f"{_SCRIPT}: --evaluation_steps 200 (STS-B dev, best kept)"),
    "patience": Setting(10, f"{_SCRIPT}: --patience 10"),
    "encoder_dropout": Setting(False, f"{_SCRIPT}: --no_dropout"),
    "pooling": Setting("mean", f"{_MAIN} l.189: Pooling(mean tokens) for training"),
    "test_pooling": Setting("mean,mean_last2", f"{_MAIN} l.315-316: eval_nli_unsup without "
                                                "and with last2avg"),
    "seed": Setting(1, f"{_SCRIPT}: --seed 1"),
}
DIFFERENCES = [
    "data: STS12-16 and SICK-R are not available here; the closest shared data is the "
    "STS-B sentences of every split without labels (--texts all, the paper's choice of "
    "including the test texts; --texts train holds dev and test out). shared/data/STS "
    "has them; without it the packaged dev+test files are used.",
    "precision: the script uses apex AMP O1; here float32.",
    "--smoke: the default model (all-MiniLM-L6-v2), 6 steps, batch 16, lr 1e-5, "
    "max length 32, 150 dev/test pairs: a ~1 minute CPU check, not a result.",
]


def build_parser():
    p = paper_parser(__doc__, PAPER, DIFFERENCES)
    p.add_argument("--model", default=paper_value(PAPER, "model"))
    p.add_argument("--stsb", default=str(STSB), help="STSBenchmark folder (with sts-train.csv)")
    p.add_argument("--texts", default="all", choices=["all", "train"],
                   help="all: the unlabeled texts of every STS-B split (the paper includes "
                        "test texts); train: the train split only")
    p.add_argument("--steps", type=int, default=None, help="default: --epochs epochs")
    p.add_argument("--epochs", type=int, default=paper_value(PAPER, "epochs"))
    p.add_argument("--batch-size", type=int, default=paper_value(PAPER, "batch_size"))
    p.add_argument("--learning-rate", type=float, default=paper_value(PAPER, "learning_rate"))
    p.add_argument("--max-length", type=int, default=paper_value(PAPER, "max_length"))
    p.add_argument("--views", default=paper_value(PAPER, "views"))
    p.add_argument("--temperature", type=float, default=paper_value(PAPER, "temperature"))
    p.add_argument("--warmup-ratio", type=float, default=paper_value(PAPER, "warmup_ratio"))
    p.add_argument("--eval-every", type=int, default=paper_value(PAPER, "eval_every"))
    p.add_argument("--patience", type=int, default=paper_value(PAPER, "patience"))
    p.add_argument("--pooling", default=paper_value(PAPER, "pooling"),
                   help="training pooling, or auto: the model's own, else the paper's mean")
    p.add_argument("--seed", type=int, default=paper_value(PAPER, "seed"))
    add_seeds(p)
    p.add_argument("--dev-limit", type=int, default=None, help="score only the first N dev pairs")
    p.add_argument("--output", default=None, help="save the (first seed's) encoder here")
    p.add_argument("--json", default=None, help="also write the result JSON here")
    p.add_argument("--smoke", action="store_true", help="tiny CPU run (~1 minute) on the default model")
    return p


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def unlabeled_texts(sts_dir, splits):
    """The distinct sentences of the STS-B `splits` found in `sts_dir`, labels dropped."""
    from keras_sentemb.evaluation.readers import read_stsb

    seen, texts, used = set(), [], []
    for split in splits:
        try:
            pairs = read_stsb(sts_dir, split)
        except FileNotFoundError:
            continue
        used.append(split)
        for a, b, _ in pairs:
            for s in (a, b):
                if s not in seen:
                    seen.add(s)
                    texts.append(s)
    return texts, used


def scores(encoder, dev, test):
    from keras_sentemb.pipelines.callbacks import sts_spearman

    return {
        f"stsb_{name}_{pooling}": round(sts_spearman(encoder, pairs, pooling=pooling), 2)
        for pooling in (encoder.pooling, "mean_last2")
        for name, pairs in (("dev", dev), ("test", test))
    }


def main(argv=None):
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    from keras_sentemb.api import fit_consert
    from keras_sentemb.data.resources import bundled_sts_dir
    from keras_sentemb.evaluation.readers import read_stsb
    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.pipelines.scaffold import resolve_pooling

    stsb = Path(args.stsb)
    sts_dir = stsb if (stsb / "sts-train.csv").exists() else bundled_sts_dir()
    splits = ("train", "dev", "test") if args.texts == "all" else ("train",)
    train, used = unlabeled_texts(sts_dir, splits)
    if not train:
        print(f"no STS-B {'+'.join(splits)} texts in {sts_dir}", file=sys.stderr)
        return 2
    dev = read_stsb(sts_dir, "dev")
    test = read_stsb(sts_dir, "test")
    if args.smoke:
        train = train[:2000]
        if args.model == paper_value(PAPER, "model"):
            args.model, args.pooling = "default", "auto"
        args.steps, args.batch_size, args.max_length = 6, 16, 32
        args.learning_rate, args.eval_every = 1e-5, 3
        args.dev_limit = args.dev_limit or 150
        test = test[:150]
    if args.dev_limit:
        dev = dev[: args.dev_limit]

    base = SentenceEncoder.from_preset(args.model)
    base.pooling, reason = resolve_pooling(args.pooling, base, "mean")
    print(f"pooling {base.pooling} ({reason})", file=sys.stderr)
    before = scores(base, dev, test)
    print(json.dumps({"before": before}), flush=True)
    runs = []
    for i in range(args.seeds):
        seed = args.seed + i
        t0 = time.time()
        encoder = fit_consert(
            train, model=base.clone(name=f"consert_seed{seed}"),
            output=args.output if i == 0 else None, steps=args.steps, epochs=args.epochs,
            batch_size=args.batch_size, learning_rate=args.learning_rate,
            max_length=args.max_length, views=args.views, temperature=args.temperature,
            warmup_ratio=args.warmup_ratio, patience=args.patience, pooling=base.pooling,
            dev=dev, eval_every=args.eval_every, seed=seed, verbose=2,
        )
        report = encoder.training_report
        run = {"seed": seed, "train_seconds": round(time.time() - t0, 1),
               "steps": report.steps, "steps_trained": report.steps_trained,
               "kept_step": (report.selection or {}).get("kept_step"),
               **scores(encoder, dev, test)}
        runs.append(run)
        print(json.dumps({"seed_run": run}), flush=True)
    result = {
        "method": "consert-unsup", "model": args.model, "pooling": base.pooling,
        "train_texts": f"STS-B {'+'.join(used)} sentences without labels, {len(train)} distinct",
        "batch_size": args.batch_size, "learning_rate": args.learning_rate,
        "max_length": args.max_length, "views": args.views, "temperature": args.temperature,
        "dev_pairs": len(dev), "test_pairs": len(test), "before": before,
        "seeds": [r["seed"] for r in runs], "runs": runs,
        "after": summarize_seeds(runs, [k for k in runs[0] if k.startswith("stsb_")]),
        "smoke": args.smoke,
    }
    print(json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
