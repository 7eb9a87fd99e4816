"""Self-guided contrastive learning (SG-OPT, Kim et al., ACL 2021) on STS-B.

Defaults are the paper's main setting (table below, checked against the
official training.py / modules.py): BERT-base, SG-OPT, max-pooled views of
every layer, temperature 0.01, lambda 0.1, projection head of width 4096,
AdamW (betas 0.9, 0.9, no weight decay) at 5e-5 with 10% warm-up, batch 16,
max length 128, one epoch over the STS-B sentences without labels (train +
dev + test, as the official code), STS-B dev every 50 steps (early stop
after 10 without gain, best kept), [CLS] pooling, 8 runs with the seeds of
Table 8. Prints STS-B dev/test Spearman x100 before (cls and mean) and
after; `--no-head` trains without the projection head (the paper's
ablation). The last line is the Table 1 row (the 7 STS tasks with [CLS],
the mean over the runs; `--sts-data DIR` for STS12-16 and SICK-R, else
STS-B only) as one JSON line, also written to `--out`.

    python recipes/sg.py --smoke              # ~1-2 minutes on CPU (default model)
    python recipes/sg.py                      # the paper's setting (GPU)
    python recipes/sg.py --model default --steps 300 --max-length 64

References:
    - [Kim, Yoo & Lee, 2021](https://arxiv.org/abs/2106.07345)
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

_CODE = "galsang/SG-BERT@23d5ebe training.py"


# The paper's main setting (Kim et al. 2021, section 4 / appendix, BERT-base, SG-OPT);
# every value checked against the official code named in its source.
@functools.cache
def paper():
    """The paper's main setting: the `sg` method's `sg-opt-bert-base` preset (values and
    sources), then what is this recipe's own (data, protocol, evaluation)."""
    return preset_table("sg", "sg-opt-bert-base", [
        "model",
        ("data", Setting("stsb_all", f"{_CODE}: every row of stsbenchmark.tsv.gz (train+dev+test "
                                    "sentences, no labels)")),
        "loss",
        "pooling",
        "view_pooling",
        "temperature",
        "reg_weight",
        "min_layer",
        "epochs",
        "batch_size",
        "learning_rate",
        "warmup_ratio",
        "max_length",
        "eval_every",
        "patience",
        ("seeds", Setting(8, "section 4.1: 'Every trainable model's performance is reported as the "
                            "average of 8 separate runs'")),
        ("seed_list", Setting("1,2,3,4,1234,2345,3456,7890", "Table 8 (App. A.1): random seeds")),
        "projection_dim",
    ])


def __getattr__(name):
    """`PAPER`, the table, built on first use (it imports the method, and TensorFlow)."""
    if name == "PAPER":
        return paper()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


DIFFERENCES = [
    "runs: the row is the mean over --seeds runs (default 8, the seeds of Table 8; --seed S "
    "runs S, S+1, ... instead).",
    "evaluation: the 7 STS tasks need SentEval's STS folders (--sts-data DIR), else the row "
    "holds STS-B test only; Table 4's transfer tasks (--transfer-data DIR) were measured on "
    "models trained on NLI with mean pooling (App. A.3), not on this recipe's model.",
    "data: data/senteval/STS (docs/data.md) holds STS-B train/dev/test (the same texts as the official "
    "stsbenchmark.tsv.gz); without it only the packaged dev+test files are used.",
    "--smoke: the default model (all-MiniLM-L6-v2, trained and scored with [CLS] as the "
    "paper), 400 sentences, 6 steps, max length 32, 200 dev pairs, one run: a CPU check, "
    "not a result.",
]


ROW_PAPER = "Kim et al. 2021 (SG-OPT), Table 1 (7 STS tasks, CLS, mean of 8 runs) + Table 4"
TRANSFER_TASKS = ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"]


def default_sts_dir():
    fetched = REPO / "data" / "senteval" / "STS"
    if (fetched / "STSBenchmark" / "sts-train.csv").exists():
        return str(fetched)
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


def build_parser():
    parser = paper_parser(__doc__, paper(), DIFFERENCES)
    parser.add_argument("--model", default=paper_value(paper(), "model"))
    parser.add_argument("--sts-dir", default=None, help="folder holding STSBenchmark/")
    parser.add_argument("--loss", default=paper_value(paper(), "loss"),
                        choices=["opt3", "base", "opt1", "opt2"])
    parser.add_argument("--steps", type=int, default=None, help="default: --epochs epochs")
    parser.add_argument("--epochs", type=int, default=paper_value(paper(), "epochs"))
    parser.add_argument("--batch-size", type=int, default=paper_value(paper(), "batch_size"))
    parser.add_argument("--learning-rate", type=float, default=paper_value(paper(), "learning_rate"))
    parser.add_argument("--max-length", type=int, default=paper_value(paper(), "max_length"))
    parser.add_argument("--view-pooling", default=paper_value(paper(), "view_pooling"),
                        choices=["max", "mean"])
    parser.add_argument("--temperature", type=float, default=paper_value(paper(), "temperature"))
    parser.add_argument("--reg-weight", type=float, default=paper_value(paper(), "reg_weight"))
    parser.add_argument("--min-layer", type=int, default=paper_value(paper(), "min_layer"))
    parser.add_argument("--warmup-ratio", type=float, default=paper_value(paper(), "warmup_ratio"))
    parser.add_argument("--projection-dim", type=int, default=paper_value(paper(), "projection_dim"))
    parser.add_argument("--no-head", action="store_true",
                        help="train without the projection head (the paper's ablation)")
    parser.add_argument("--eval-every", type=int, default=paper_value(paper(), "eval_every"))
    parser.add_argument("--patience", type=int, default=paper_value(paper(), "patience"))
    parser.add_argument("--seed", type=int, default=None,
                        help="run seeds S, S+1, ... instead of --seed-list")
    parser.add_argument("--seed-list", default=paper_value(paper(), "seed_list"),
                        help="comma-separated seeds; the first --seeds are run")
    add_seeds(parser, default=paper_value(paper(), "seeds"))
    add_row_args(parser, transfer=True)
    parser.add_argument("--output", default=None, help="save the (first seed's) encoder here")
    parser.add_argument("--pooling", default=paper_value(paper(), "pooling"),
                        help="BERT_T's pooling; auto: the model's own, else the paper's cls")
    parser.add_argument("--results", default=None, help="write the JSON here too")
    parser.add_argument("--smoke", action="store_true", help="tiny CPU run on the default model")
    return parser


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
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
        steps, eval_every, args.max_length = steps or 6, 3, 32
        args.seeds = 1
        if args.model == paper_value(paper(), "model"):
            args.model, args.pooling = "default", "auto"
    if args.seed is not None:
        seeds = [args.seed + i for i in range(args.seeds)]
    else:
        try:
            seeds = [int(x) for x in args.seed_list.split(",") if x.strip()]
        except ValueError:
            print(f"--seed-list must be comma-separated integers; got {args.seed_list!r}",
                  file=sys.stderr)
            return 2
        if args.seeds > len(seeds):
            print(f"--seeds {args.seeds} needs {args.seeds} seeds; --seed-list has "
                  f"{len(seeds)} (or pass --seed S)", file=sys.stderr)
            return 2
        seeds = seeds[: args.seeds]

    base = SentenceEncoder.from_preset(args.model)
    before = {
        "cls": stsb_scores(base, sts_dir, "cls"),
        "mean": stsb_scores(base, sts_dir, "mean"),
    }
    print("before:", json.dumps(before), flush=True)
    runs, rows = [], []
    for i, seed in enumerate(seeds):
        start = time.time()
        encoder = fit_self_guided(
            corpus, model=base.clone(name=f"sg_seed{seed}"),
            output=args.output if i == 0 else None, loss=args.loss, steps=steps,
            epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.learning_rate,
            max_length=args.max_length, view_pooling=args.view_pooling,
            temperature=args.temperature, reg_weight=args.reg_weight,
            min_layer=args.min_layer, warmup_ratio=args.warmup_ratio,
            projection_dim=None if args.no_head else args.projection_dim,
            pooling=args.pooling, dev=dev_pairs, eval_every=eval_every,
            patience=args.patience, seed=seed, verbose=2,
        )
        report = encoder.training_report
        scores = stsb_scores(encoder, sts_dir, report.pooling)
        runs.append({
            "seed": seed, "train_seconds": round(time.time() - start, 1),
            "steps": report.steps, "steps_trained": report.steps_trained,
            "kept_step": (report.selection or {}).get("kept_step"),
            "pooling": report.pooling, "stsb_dev": scores["dev"], "stsb_test": scores["test"],
            "dev_history": (report.selection or {}).get("history"),
        })
        print(json.dumps({"seed_run": {k: v for k, v in runs[-1].items() if k != "dev_history"}}),
              flush=True)
        rows.append(table_row(
            encoder, args, ROW_PAPER,
            {"name": "paper", "loss": args.loss, "model": args.model, "seeds": seeds,
             "view_pooling": args.view_pooling, "selection": f"STS-B dev every {eval_every} steps"},
            pooling="cls", transfer_tasks=TRANSFER_TASKS,
        ))
    pooling = runs[0]["pooling"]
    result = {
        "method": f"SG ({args.loss})" + (" without projection head" if args.no_head else ""),
        "model": args.model,
        "corpus": f"STS-B sentences without labels ({'+'.join(corpus_splits)}), {len(corpus)} sentences",
        "pooling": pooling,
        "selection": f"STS-B dev ({pooling} pooling), every {eval_every} steps",
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "before": before,
        "seeds": [r["seed"] for r in runs],
        "runs": runs,
        "after": summarize_seeds(runs, ["stsb_dev", "stsb_test"]),
        "smoke": args.smoke,
    }
    print(json.dumps(result, indent=2))
    if args.results:
        with open(args.results, "w") as f:
            json.dump(result, f, indent=2)
    emit_row(average_rows(rows), args)
    return 0


if __name__ == "__main__":
    enable_onednn_opts()  # before TensorFlow starts: its oneDNN kernels on AVX2-only CPUs
    sys.exit(run_quietly(main))  # TensorFlow's start-up notices hidden unless --verbose
