"""Unsupervised SimCSE (Gao et al., EMNLP 2021) on Wikipedia sentences.

Defaults are the paper's unsupervised BERT-base setting (table below, checked
against the official run_unsup_example.sh): bert_base_en_uncased, dropout as
the only augmentation, InfoNCE at temperature 0.05, [CLS] pooling with the
MLP head during training only, batch 64, lr 3e-5, max length 32, one epoch,
STS-B dev every 125 steps with the best checkpoint kept. Prints STS-B dev and
test Spearman x100 before and after; `--seeds N` repeats the run and reports
mean and std. The last line is the paper's table row (7 STS tasks with the
trained pooling, the MLP dropped; `--sts-data DIR` for STS12-16 and SICK-R,
else STS-B only; `--transfer-data DIR` for the transfer tasks) as one JSON
line, also written to `--out`.

    python recipes/simcse.py --smoke                 # ~1 minute on CPU (default model)
    python recipes/simcse.py                         # the paper's setting (GPU)
    python recipes/simcse.py --model default --pooling auto --mlp none --steps 300 --batch-size 32
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
WIKI = REPO / "data" / "wiki.txt"  # docs/data.md makes it

_SCRIPT = "princeton-nlp/SimCSE@49fa580 run_unsup_example.sh"


# The paper's main unsupervised setting (Gao et al. 2021, section 3 and appendix A;
# every value below checked against the official script named in its source).
@functools.cache
def paper():
    """The paper's main setting: the `simcse` method's `unsup-bert-base` preset (values and
    sources), then what is this recipe's own (data, protocol, evaluation)."""
    return preset_table("simcse", "unsup-bert-base", [
        "model",
        ("data", Setting("wiki1m_for_simcse.txt", f"{_SCRIPT}: --train_file (1M Wikipedia sentences)")),
        ("epochs", Setting(1, f"{_SCRIPT}: --num_train_epochs 1 (steps: None = one epoch)")),
        "batch_size",
        "learning_rate",
        "max_length",
        "temperature",
        "pooling",
        "mlp",
        "eval_every",
        ("warmup", Setting(0.0, "HF TrainingArguments defaults (no warm-up, linear decay; the script sets none) = fit_simcse's AdamW linear decay")),
        "seed",
    ])


def __getattr__(name):
    """`PAPER`, the table, built on first use (it imports the method, and TensorFlow)."""
    if name == "PAPER":
        return paper()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


DIFFERENCES = [
    "corpus: the default is data/wiki.txt, the first 100k sentences of wiki1m_for_simcse.txt "
    "(docs/data.md), so one epoch is ~1,560 steps instead of ~15,600; without it the packaged "
    "10k sample.",
    "precision: the script trains in fp16; here float32 (fit_simcse(precision='bfloat16') exists).",
    "--smoke: the default model (all-MiniLM-L6-v2, its own mean pooling, no MLP), 6 steps, "
    "batch 16, 150 dev/test pairs: a ~1 minute CPU check, not a result.",
]


ROW_PAPER = ("Gao et al. 2021 (unsupervised SimCSE-BERT-base): the STS table (7 tasks, [CLS] "
             "without MLP) and the transfer table")
TRANSFER_TASKS = ["MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC"]


def build_parser():
    p = paper_parser(__doc__, paper(), DIFFERENCES)
    p.add_argument("--model", default=paper_value(paper(), "model"))
    p.add_argument("--corpus", default=str(WIKI) if WIKI.exists() else None,
                   help="one sentence a line (default: data/wiki.txt, else the packaged 10k)")
    p.add_argument("--steps", type=int, default=None, help="default: one epoch (the paper's)")
    p.add_argument("--batch-size", type=int, default=paper_value(paper(), "batch_size"))
    p.add_argument("--learning-rate", type=float, default=paper_value(paper(), "learning_rate"))
    p.add_argument("--max-length", type=int, default=paper_value(paper(), "max_length"))
    p.add_argument("--pooling", default=paper_value(paper(), "pooling"),
                   help="a pooling name, or auto: the model's own, else the paper's cls")
    p.add_argument("--mlp", default=paper_value(paper(), "mlp"), choices=["auto", "train", "none"],
                   help="train: the MLP head in training only (the paper); none: no head")
    p.add_argument("--temperature", type=float, default=paper_value(paper(), "temperature"))
    p.add_argument("--eval-every", type=int, default=paper_value(paper(), "eval_every"))
    p.add_argument("--seed", type=int, default=paper_value(paper(), "seed"))
    add_seeds(p)
    p.add_argument("--dev-limit", type=int, default=None, help="score only the first N dev pairs")
    p.add_argument("--output", default=None, help="save the (first seed's) encoder here")
    p.add_argument("--json", default=None)
    add_row_args(p, transfer=True)
    p.add_argument("--smoke", action="store_true", help="tiny CPU run (~1 minute) on the default model")
    return p


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
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
        if args.model == paper_value(paper(), "model"):
            args.model, args.pooling, args.mlp = "default", "auto", "auto"
        args.steps, args.batch_size, args.eval_every = 6, 16, 3
        args.dev_limit = args.dev_limit or 150
        test = test[:150]
    if args.dev_limit:
        dev = dev[: args.dev_limit]

    from keras_sentemb.pipelines.scaffold import resolve_pooling

    base = SentenceEncoder.from_preset(args.model)
    args.pooling, reason = resolve_pooling(args.pooling, base, "cls")
    print(f"pooling {args.pooling} ({reason})", file=sys.stderr)
    base.pooling = args.pooling
    before = {"dev": sts_spearman(base, dev), "test": sts_spearman(base, test)}
    runs, rows = [], []
    for i in range(args.seeds):
        seed = args.seed + i
        t0 = time.time()
        encoder = fit_simcse(
            corpus, model=base.clone(name=f"simcse_seed{seed}"),
            output=args.output if i == 0 else None, steps=args.steps,
            batch_size=args.batch_size, learning_rate=args.learning_rate,
            max_length=args.max_length, pooling=args.pooling, mlp=args.mlp,
            temperature=args.temperature, dev=dev, eval_every=args.eval_every, seed=seed,
            verbose=2,
        )
        report = encoder.training_report
        runs.append({
            "seed": seed, "train_seconds": round(time.time() - t0, 1),
            "steps": report.steps, "mlp": report.resolved["mlp"],
            "kept_step": (report.selection or {}).get("kept_step"),
            "stsb_dev": round(sts_spearman(encoder, dev), 2),
            "stsb_test": round(sts_spearman(encoder, test), 2),
        })
        print(json.dumps({"seed_run": runs[-1]}), flush=True)
        rows.append(table_row(
            encoder, args, ROW_PAPER,
            {"name": "paper", "model": args.model, "steps": encoder.training_report.steps},
            transfer_tasks=TRANSFER_TASKS,
        ))
    result = {
        "method": "simcse-unsup", "model": args.model, "corpus": args.corpus,
        "corpus_sentences": len(corpus), "batch_size": args.batch_size,
        "learning_rate": args.learning_rate, "max_length": args.max_length,
        "temperature": args.temperature, "pooling": args.pooling,
        "dev_pairs": len(dev), "test_pairs": len(test),
        "stsb_dev_before": round(before["dev"], 2), "stsb_test_before": round(before["test"], 2),
        "seeds": [r["seed"] for r in runs], "runs": runs,
        "after": summarize_seeds(runs, ["stsb_dev", "stsb_test"]), "smoke": args.smoke,
    }
    print(json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    emit_row(average_rows(rows), args)
    return 0


if __name__ == "__main__":
    enable_onednn_opts()  # before TensorFlow starts: its oneDNN kernels on AVX2-only CPUs
    sys.exit(run_quietly(main))  # TensorFlow's start-up notices hidden unless --verbose
