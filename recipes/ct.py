"""Contrastive Tension (Carlsson et al., ICLR 2021): the paper's unsupervised setup.

Defaults are the paper's setting (table below; where the paper is silent,
the official code's): two towers start from BERT-base (keras-hub preset
`bert_base_en_uncased`); batches of 16 from Wikipedia sentences hold, per
sampled sentence s, the identical pair (s, s) (label 1) and K = 7 pairs
(s, negative) whose negatives tower 2 embeds (label 0; `--negatives-layout
official` draws (a, b) pairs of two random sentences as the authors' code);
dot-product logits on mean-pooled last-layer vectors, binary cross-entropy,
dropout off, RMSprop with the step schedule (1e-5 to step 500, 8e-6, 6e-6,
4e-6, then 2e-6 after 2000), max length 75.

Protocols (`--protocol`):
- `paper` (default): exactly 50,000 steps (section 5), no validation data at
  all; both towers are then scored on the paper's table and the WORSE one
  is reported and saved to `--output` (`fit_ct(keep="worst")`; `--keep
  tower1|tower2` fixes a tower instead).
- `safe`: both towers scored on STS-B dev every `--eval-every` steps (the
  starting weights included) and the best tower at its best step kept.

Prints STS-B dev/test Spearman x100 before and after; `--seeds N` repeats the
run and reports mean and std. With --survey / --spread it also runs the
layer-wise survey (Figure 1) and the STS spread analysis (Figure 3) on STS-B
test before and after (first seed), writing PNGs to --out. The last line is
the paper's table row (Table 1: STS12-16 and their average; Table 5: STS-b
test) as one JSON line, also written to --out/row.json; STS12-16 need
`--sts-data DIR` (SentEval's STS folders), else the row holds STS-B only.

    python recipes/ct.py --smoke --survey --spread --out runs/ct_smoke   # ~1 minute on CPU
    python recipes/ct.py --model default --steps 400 --max-length 64 --protocol safe  # CPU
    python recipes/ct.py --survey --spread --out runs/ct                 # paper setup (GPU)
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

_REPO = "FreddeFrallan/Contrastive-Tension@75293a8"
_TRAIN = f"{_REPO} ContrastiveTension/Training.py"


# The paper's main unsupervised setting (Carlsson et al. 2021): each value quotes the paper's
# section or table; where the paper is silent, the authors' code named in the source.
@functools.cache
def paper():
    """The paper's main setting: the `ct` method's `paper-bert-base` preset (values and
    sources), then what is this recipe's own (data, protocol, evaluation)."""
    return preset_table("ct", "paper-bert-base", [
        "model",
        ("data", Setting("wikipedia", "section 5: 'Training data is randomly sampled from English "
                                     "Wikipedia (See Appendix C.2)'")),
        "batch_size",
        "negatives",
        "negatives_layout",
        "max_length",
        "learning_rate",
        "logits",
        "pooling",
        "dropout",
        "steps",
        ("protocol", Setting("paper", "section 5 and section 6: a fixed number of iterations, no "
                                     "validation set ('due to the emulation of having zero labeled "
                                     "data'); the official code instead keeps the best tower on "
                                     "STS-B dev every 500 steps (--protocol safe)")),
        "keep",
        "eval_every",
        ("evaluation", Setting("STS12-16 + STS-B, mean", "Table 1 (STS12-16 and their average, "
                                                        "Spearman) and App. B.2 Table 5 (STS-b test); "
                                                        "SentEval (section 5); pooling as trained")),
    ])


def __getattr__(name):
    """`PAPER`, the table, built on first use (it imports the method, and TensorFlow)."""
    if name == "PAPER":
        return paper()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


DIFFERENCES = [
    "corpus: the paper's Wikipedia sample is not available; the default is the closest "
    "data/wiki.txt (docs/data.md makes it), else the packaged 10k sample.",
    "evaluation: STS12-16 need SentEval's STS folders (--sts-data DIR); without them the row "
    "holds STS-B test only and has no Table 1 average.",
    "worst tower: ranked by the row's average (STS12-16) when --sts-data is given, else by "
    "STS-B test.",
    "--smoke: the default model (all-MiniLM-L6-v2), 16 steps, max length 32, "
    "150 dev/test pairs: a ~1 minute CPU check, not a result.",
]
ROW_PAPER = "Carlsson et al. 2021 (CT), Table 1 (STS12-16, avg) + Table 5 (STS-b test)"
ROW_TASKS = ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark"]
ROW_AVG = ["STS12", "STS13", "STS14", "STS15", "STS16"]


def build_parser():
    p = paper_parser(__doc__, paper(), DIFFERENCES)
    p.add_argument("--model", default=paper_value(paper(), "model"))
    p.add_argument("--corpus", default=None,
                   help="one sentence a line (default: data/wiki.txt, "
                        "else the packaged 10k sample)")
    p.add_argument("--steps", type=int, default=paper_value(paper(), "steps"))
    p.add_argument("--batch-size", type=int, default=paper_value(paper(), "batch_size"))
    p.add_argument("--negatives", default=paper_value(paper(), "negatives"))
    p.add_argument("--negatives-layout", default=paper_value(paper(), "negatives_layout"),
                   choices=["paper", "official"],
                   help="paper: (s, negative) pairs; official: (a, b) pairs of random sentences")
    p.add_argument("--logits", default=paper_value(paper(), "logits"), choices=["dot", "cosine"])
    p.add_argument("--protocol", default=paper_value(paper(), "protocol"), choices=["paper", "safe"],
                   help="paper: fixed steps, no validation, the worst tower reported; "
                        "safe: best tower on STS-B dev")
    p.add_argument("--keep", default=paper_value(paper(), "keep"),
                   choices=["worst", "tower1", "tower2"],
                   help="the tower reported and saved to --output under --protocol paper")
    p.add_argument("--eval-every", type=int, default=paper_value(paper(), "eval_every"),
                   help="dev interval under --protocol safe")
    p.add_argument("--learning-rate", type=float, default=paper_value(paper(), "learning_rate"),
                   help="first stage of the step schedule")
    p.add_argument("--max-length", type=int, default=paper_value(paper(), "max_length"))
    p.add_argument("--pooling", default=paper_value(paper(), "pooling"),
                   help="a pooling name, or auto: the model's own, else the paper's mean")
    p.add_argument("--dropout", action="store_true", default=paper_value(paper(), "dropout"))
    p.add_argument("--seed", type=int, default=0)
    add_seeds(p)
    p.add_argument("--dev-limit", type=int, default=None, help="score only the first N dev pairs")
    p.add_argument("--survey", action="store_true", help="layer survey before/after (Figure 1)")
    p.add_argument("--spread", action="store_true", help="STS spread before/after (Figure 3)")
    add_row_args(p, out=False)
    p.add_argument("--out", default=None, help="folder for PNGs, results.json and row.json")
    p.add_argument("--output", default=None, help="save the (first seed's) kept encoder here")
    p.add_argument("--smoke", action="store_true", help="tiny CPU run (~1 minute) on the default model")
    return p


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
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
        if args.model == paper_value(paper(), "model"):
            args.model, args.pooling = "default", "auto"
        corpus = corpus[:2000]
        args.steps, args.eval_every, args.max_length = 16, 8, 32
        args.dev_limit = args.dev_limit or 150
        test = test[:150]
    if args.dev_limit:
        dev = dev[: args.dev_limit]
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)

    import keras

    from keras_sentemb.pipelines.scaffold import resolve_pooling

    class KeepTowers(keras.callbacks.Callback):
        """Holds both towers at the end of training (to score the one not kept)."""

        def on_train_end(self, logs=None):
            self.towers = dict(self.model.candidates())

    base = SentenceEncoder.from_preset(args.model)
    base.pooling, reason = resolve_pooling(args.pooling, base, "mean")
    print(f"pooling {base.pooling} ({reason})", file=sys.stderr)
    keep = args.keep if args.protocol == "paper" else "best"
    result = {
        "method": "ct", "model": args.model, "corpus": str(corpus_path),
        "corpus_sentences": len(corpus), "steps": args.steps, "batch_size": args.batch_size,
        "negatives": args.negatives, "logits": args.logits, "protocol": args.protocol,
        "keep": keep, "max_length": args.max_length, "pooling": base.pooling,
        "dev_pairs": len(dev), "test_pairs": len(test), "smoke": args.smoke,
    }
    result["stsb_dev_before"] = round(sts_spearman(base, dev), 2)
    result["stsb_test_before"] = round(sts_spearman(base, test), 2)
    print(json.dumps({"before": {"stsb_dev": result["stsb_dev_before"],
                                 "stsb_test": result["stsb_test_before"]}}), flush=True)
    surveys, spreads = {}, {}
    if args.survey:
        surveys["before"] = layer_survey(base, data=test)
    if args.spread:
        spreads["before"] = sts_spread(base, data=test)

    row_kwargs = dict(sts_tasks=ROW_TASKS, avg_tasks=ROW_AVG, pooling=base.pooling)
    row_protocol = {"name": args.protocol, "steps": args.steps, "keep": keep,
                    "negatives": args.negatives, "negatives_layout": args.negatives_layout,
                    "model": args.model, "corpus": str(corpus_path)}
    tower_rows = {}

    def tower_score(tower):
        """The paper's row of one tower; its average (else STS-B test) ranks the towers."""
        row = table_row(tower, args, ROW_PAPER, row_protocol, **row_kwargs)
        tower_rows[tower.name] = row
        return row["avg"] if row["avg"] is not None else row["tasks"]["STS-B"]

    runs, rows, first = [], [], None
    for i in range(args.seeds):
        seed = args.seed + i
        towers = KeepTowers()
        t0 = time.time()
        tower_rows.clear()
        selection_data = dev if args.protocol == "safe" else None
        encoder = fit_ct(
            corpus, model=base.clone(name=f"ct_seed{seed}"), steps=args.steps,
            batch_size=args.batch_size, negatives=args.negatives, logits=args.logits,
            negatives_layout=args.negatives_layout, dev=selection_data, keep=keep,
            tower_score=tower_score if keep == "worst" else None,
            eval_every=args.eval_every, learning_rate=args.learning_rate,
            max_length=args.max_length, pooling=base.pooling, dropout=args.dropout,
            seed=seed, output=args.output if i == 0 else None, callbacks=[towers], verbose=2,
        )
        report = encoder.training_report
        run = {"seed": seed, "train_seconds": round(time.time() - t0, 1),
               "kept": {"tower": report.extras["kept_tower"],
                        "step": report.selection["kept_step"] if report.selection else args.steps}}
        if report.selection:
            run["dev_history"] = report.selection["history"]
        run["stsb_dev"] = round(sts_spearman(encoder, dev), 2)
        run["stsb_test"] = round(sts_spearman(encoder, test), 2)
        if args.protocol == "paper":  # both towers after exactly `steps` steps
            for name, tower in towers.towers.items():
                run[name] = {
                    "stsb_dev": round(sts_spearman(tower, dev, pooling=report.pooling), 2),
                    "stsb_test": round(sts_spearman(tower, test, pooling=report.pooling), 2),
                }
        if keep == "worst":
            run["tower_scores"] = report.extras["tower_scores"]
            row = dict(tower_rows[encoder.name])
            row["protocol"] = {**row["protocol"], "kept_tower": report.extras["kept_tower"],
                               "tower_scores": report.extras["tower_scores"]}
        else:
            row = table_row(encoder, args, ROW_PAPER,
                            {**row_protocol, "kept_tower": report.extras["kept_tower"]},
                            **row_kwargs)
        rows.append(row)
        runs.append(run)
        print(json.dumps({"seed_run": {k: v for k, v in run.items() if k != "dev_history"}}),
              flush=True)
        first = first or encoder
    keys = ["stsb_dev", "stsb_test"]
    if args.protocol == "paper":
        keys += [f"{t}.{k}" for t in ("tower1", "tower2") for k in ("stsb_dev", "stsb_test")]
    result.update(seeds=[r["seed"] for r in runs], runs=runs, after=summarize_seeds(runs, keys))
    if args.survey:
        surveys["after"] = layer_survey(first, data=test)
        result["layer_survey_test"] = {
            name: [round(l["spearman"], 2) for l in s["layers"]] for name, s in surveys.items()
        }
        if out:
            plot_layer_survey(surveys, out / "layer_survey.png",
                              title=f"Layer-wise STS-B test Spearman ({args.model})")
    if args.spread:
        spreads["after"] = sts_spread(first, data=test)
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
    emit_row(average_rows(rows), args)
    return 0


if __name__ == "__main__":
    enable_onednn_opts()  # before TensorFlow starts: its oneDNN kernels on AVX2-only CPUs
    sys.exit(run_quietly(main))  # TensorFlow's start-up notices hidden unless --verbose
