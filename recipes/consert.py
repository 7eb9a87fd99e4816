"""ConSERT (Yan et al., ACL 2021): unsupervised transfer on unlabeled STS texts.

Defaults are the paper's unsupervised BERT-base setting (table below; where
the paper is silent, the official scripts/unsup-consert-base.sh and main.py):
token shuffle + feature cutoff 0.2, NT-Xent at temperature 0.1, mean pooling,
encoder dropout off, batch 96, lr 5e-7 with 10% linear warm-up, 10 epochs,
STS-B dev every 200 steps scored with the evaluation's last-two-layer average
(early stop after 10 evaluations without gain, best kept). The corpus is the
unlabeled text of every STS set in `--sts-data DIR` (the paper's 89k
sentences of STS12-16, STS-B and SICK-R), else of STS-B. Reports STS-B
dev/test Spearman x100 before and after, with the training pooling (mean)
and with the average of the last two layers (`mean_last2`, the official
evaluation's `last2avg`); `--seeds N` repeats the run and reports mean and
std. The last line is the Table 2 row (7 STS tasks with `mean_last2`; STS-B
only without `--sts-data`) as one JSON line, also written to `--out`.

    python recipes/consert.py --smoke                   # ~1 minute on CPU (default model)
    python recipes/consert.py                           # the paper's setting (GPU)
    python recipes/consert.py --model default --texts train --steps 300 --batch-size 64
"""

import functools
import json
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _paper import (  # noqa: E402
    Setting, add_row_args, add_seeds, average_rows, emit_row, paper_parser, paper_value,
    preset_table, summarize_seeds, table_row,
)
from keras_sentemb.kernels.onednn_opts import enable_onednn_opts  # noqa: E402
from keras_sentemb.quiet_startup import run_quietly  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
STSB = REPO / "data" / "senteval" / "STS" / "STSBenchmark"  # docs/data.md

_SCRIPT = "yym6472/ConSERT@03c9e8f scripts/unsup-consert-base.sh"
_MAIN = "yym6472/ConSERT@03c9e8f main.py"


# The paper's main unsupervised setting (Yan et al. 2021, section 4.1 / Table 2, BERT-base); each
# value quotes the paper, or where it is silent the official script / main.py named.
@functools.cache
def paper():
    """The paper's main setting: the `consert` method's `unsup-bert-base` preset (values and
    sources), then what is this recipe's own (data, protocol, evaluation)."""
    return preset_table("consert", "unsup-bert-base", [
        "model",
        ("data", Setting("stssick", "section 4.1 / Table 1 / Figure 6: 'we mix the unlabeled texts "
                                   "from these datasets' (STS12-16, STS-B, SICK-R; 'all 89192 "
                                   "unlabeled texts from 7 STS datasets')")),
        "views",
        "temperature",
        "batch_size",
        "learning_rate",
        "max_length",
        "epochs",
        "warmup_ratio",
        "eval_every",
        "patience",
        "encoder_dropout",
        "pooling",
        ("eval_pooling", "dev_pooling"),
        ("dropout_mode", Setting("exact", "section 3.2 Dropout: elements dropped 'by a specific "
                                         "probability' and 'set ... to zero', rate 0.2 (section "
                                         "4.1), no rescaling mentioned; the official code zeroes "
                                         "exactly int(rate x tokens x hidden) elements, unscaled "
                                         "(the 'dropout_exact' view)")),
        "seed",
    ])


def __getattr__(name):
    """`PAPER`, the table, built on first use (it imports the method, and TensorFlow)."""
    if name == "PAPER":
        return paper()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


DIFFERENCES = [
    "data: with --sts-data DIR the corpus is the unlabeled text of every STS set found there "
    "(sts_unlabeled_texts: STS12-16, STS-B and SICK-R, every split, the paper's 89k "
    "sentences); without it, the STS-B sentences of every split (--texts all; --texts train "
    "holds dev and test out), from data/senteval/STS (docs/data.md) or the packaged dev+test files.",
    "evaluation: the 7-task row needs --sts-data; without it the row holds STS-B test only.",
    "precision: the script uses apex AMP O1; here float32.",
    "--smoke: the default model (all-MiniLM-L6-v2), 6 steps, batch 16, lr 1e-5, "
    "max length 32, 150 dev/test pairs: a ~1 minute CPU check, not a result.",
]
ROW_PAPER = "Yan et al. 2021 (ConSERT-base, unsupervised), Table 2 (7 STS tasks, last-2-layer avg)"


def build_parser():
    p = paper_parser(__doc__, paper(), DIFFERENCES)
    p.add_argument("--model", default=paper_value(paper(), "model"))
    p.add_argument("--stsb", default=str(STSB), help="STSBenchmark folder (with sts-train.csv)")
    p.add_argument("--texts", default="all", choices=["all", "train"],
                   help="all: the unlabeled texts of every STS-B split (the paper includes "
                        "test texts); train: the train split only")
    p.add_argument("--steps", type=int, default=None, help="default: --epochs epochs")
    p.add_argument("--epochs", type=int, default=paper_value(paper(), "epochs"))
    p.add_argument("--batch-size", type=int, default=paper_value(paper(), "batch_size"))
    p.add_argument("--learning-rate", type=float, default=paper_value(paper(), "learning_rate"))
    p.add_argument("--max-length", type=int, default=paper_value(paper(), "max_length"))
    p.add_argument("--views", default=paper_value(paper(), "views"))
    p.add_argument("--dropout-mode", default=paper_value(paper(), "dropout_mode"),
                   choices=["exact", "bernoulli"],
                   help="the 'dropout' view of --views: exact (ConSERT's code) or bernoulli")
    p.add_argument("--temperature", type=float, default=paper_value(paper(), "temperature"))
    p.add_argument("--warmup-ratio", type=float, default=paper_value(paper(), "warmup_ratio"))
    p.add_argument("--eval-every", type=int, default=paper_value(paper(), "eval_every"))
    p.add_argument("--patience", type=int, default=paper_value(paper(), "patience"))
    p.add_argument("--pooling", default=paper_value(paper(), "pooling"),
                   help="training pooling, or auto: the model's own, else the paper's mean")
    p.add_argument("--eval-pooling", default=paper_value(paper(), "eval_pooling"),
                   help="pooling of dev selection and of the table row")
    p.add_argument("--seed", type=int, default=paper_value(paper(), "seed"))
    add_seeds(p)
    p.add_argument("--dev-limit", type=int, default=None, help="score only the first N dev pairs")
    p.add_argument("--output", default=None, help="save the (first seed's) encoder here")
    p.add_argument("--json", default=None, help="also write the result JSON here")
    add_row_args(p)
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


def scores(encoder, dev, test, eval_pooling="mean_last2"):
    from keras_sentemb.pipelines.callbacks import sts_spearman

    return {
        f"stsb_{name}_{pooling}": round(sts_spearman(encoder, pairs, pooling=pooling), 2)
        for pooling in dict.fromkeys((encoder.pooling, eval_pooling))
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
    if args.sts_data is not None:
        from keras_sentemb.evaluation.sts_corpus import sts_unlabeled_texts

        try:
            train, counts = sts_unlabeled_texts(args.sts_data)
        except (FileNotFoundError, ValueError) as error:
            print(f"--sts-data: {error}", file=sys.stderr)
            return 2
        corpus_name = (f"unlabeled texts of {', '.join(counts)} in {args.sts_data} "
                       f"({sum(c['sentences'] for c in counts.values())} sentences, "
                       f"{len(train)} distinct)")
    else:
        train, used = unlabeled_texts(sts_dir, splits)
        if not train:
            print(f"no STS-B {'+'.join(splits)} texts in {sts_dir}", file=sys.stderr)
            return 2
        corpus_name = f"STS-B {'+'.join(used)} sentences without labels, {len(train)} distinct"
    dev = read_stsb(sts_dir, "dev")
    test = read_stsb(sts_dir, "test")
    if args.smoke:
        train = train[:2000]
        if args.model == paper_value(paper(), "model"):
            args.model, args.pooling = "default", "auto"
        args.steps, args.batch_size, args.max_length = 6, 16, 32
        args.learning_rate, args.eval_every = 1e-5, 3
        args.dev_limit = args.dev_limit or 150
        test = test[:150]
    if args.dev_limit:
        dev = dev[: args.dev_limit]

    if args.dropout_mode == "exact":  # the 'dropout' view as ConSERT's code implements it
        args.views = ",".join("dropout_exact" if v.strip() == "dropout" else v.strip()
                              for v in args.views.split(","))
    base = SentenceEncoder.from_preset(args.model)
    base.pooling, reason = resolve_pooling(args.pooling, base, "mean")
    print(f"pooling {base.pooling} ({reason})", file=sys.stderr)
    before = scores(base, dev, test, args.eval_pooling)
    print(json.dumps({"before": before}), flush=True)
    runs, rows = [], []
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
            dev_pooling=args.eval_pooling,
        )
        report = encoder.training_report
        run = {"seed": seed, "train_seconds": round(time.time() - t0, 1),
               "steps": report.steps, "steps_trained": report.steps_trained,
               "kept_step": (report.selection or {}).get("kept_step"),
               **scores(encoder, dev, test, args.eval_pooling)}
        runs.append(run)
        print(json.dumps({"seed_run": run}), flush=True)
        rows.append(table_row(
            encoder, args, ROW_PAPER,
            {"name": "paper", "model": args.model, "views": args.views, "corpus": corpus_name,
             "selection": f"STS-B dev ({args.eval_pooling}) every {args.eval_every} steps"},
            pooling=args.eval_pooling,
        ))
    result = {
        "method": "consert-unsup", "model": args.model, "pooling": base.pooling,
        "train_texts": corpus_name,
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
    emit_row(average_rows(rows), args)
    return 0


if __name__ == "__main__":
    enable_onednn_opts()  # before TensorFlow starts: its oneDNN kernels on AVX2-only CPUs
    sys.exit(run_quietly(main))  # TensorFlow's start-up notices hidden unless --verbose
