"""Every unsupervised method lifting an un-tuned encoder: the papers' kind of table, on CPU.

Trains CT (K = 7), CT with in-batch negatives, SimCSE, ConSERT and SG-OPT
from the same un-tuned start (`runs/untuned-minilm`, built as docs/data.md shows: the default
model scrambled by 500 MLM steps) at one budget (same steps, batch, max
length and corpus for every method; CT with K = 7 keeps its paper's batch 16
and max length 64, as in the reference figures), selects each method's learning rate,
variant (`VARIANTS`: CT in-batch with the towers' dropout off, as `fit_ct` and the official code
train, or on, as sentence-transformers trains) and checkpoint on STS-B **dev** only, and reads STS-B **test** once for the
chosen run. Pooling is `auto` for every method (the start declares mean
pooling), named in the table. Next to ours: sentence-transformers' figures
from the same start and budget, where it has the method (from the start's
README; measured there on one H100).

    python benchmarks/methods_table.py --steps 250            # CPU, about an hour or more
    python benchmarks/methods_table.py --smoke                # a minute: pipeline check only
    python benchmarks/methods_table.py --methods simcse --learning-rates simcse=3e-5,1e-4
    python benchmarks/methods_table.py --methods ct_in_batch --variants ct_in_batch=dropout
    python benchmarks/methods_table.py --methods ct_in_batch --learning-rates ct_in_batch=5e-5 \
        --variants ct_in_batch=dropout,dropout_clipped
    python benchmarks/methods_table.py --methods simcse --learning-rates simcse=3e-5 --optimizer keras
    python benchmarks/methods_table.py --methods simcse --learning-rates simcse=3e-5 --precision bfloat16

`--optimizer keras` trains the AdamW methods with Keras' AdamW formula and
epsilon 1e-6 (what `fit_*` used before `TorchAdamW`), for comparison.
`--precision` trains every run in that precision (`float32`, `bfloat16` or
`auto`, the default of `fit_*`); the same seed in both precisions gives the
float32 / bfloat16 quality table of docs/performance.md.

Writes one JSON line per run to `--out` (default `runs/methods_table.jsonl`)
and prints the markdown table last.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPO = Path(__file__).resolve().parents[1]
# Where docs/data.md puts the un-tuned start and wiki100k in the clone.
START = REPO / "runs" / "untuned-minilm"
WIKI = REPO / "data" / "wiki.txt"

# sentence-transformers from untuned-minilm, STS-B dev / test (its README;
# batch 64, max length 32, mean pooling; CT K=7: batch 16, max length 64).
REFERENCE = {
    "simcse": {250: (83.19, 78.51), 500: (84.09, 79.99), "setting": "MNRL scale 20, AdamW 3e-5"},
    "ct_in_batch": {250: (84.23, 79.99), 500: (85.10, 81.33),
                    "setting": "learnable scale, AdamW 5e-5 (their better of 1e-5 / 5e-5)"},
    "ct_k7": {250: (80.50, 73.06), 500: (82.51, 76.23),
              "setting": "batch 16, RMSprop, step schedule from 1e-5"},
}
# The papers' learning rates, plus one larger rate for the two methods whose
# paper rate fell short of the reference at 250 steps (dev chooses; the
# README's table ran these grids). More with --learning-rates.
DEFAULT_RATES = {
    "ct_k7": [1e-5],
    "ct_in_batch": [5e-5, 1e-4],
    "simcse": [3e-5, 5e-5],
    "consert": [3e-5],
    "sg_opt": [5e-5],
}
# Settings tried per method besides the learning rate (also chosen on dev):
# sentence-transformers trains CT in train mode (dropout on in both towers);
# fit_ct follows the official code (dropout off), where the two towers of the
# in-batch loss see identical inputs and stay identical. `dropout_clipped` is
# sentence-transformers' whole setting: dropout on and the gradient norm
# clipped at 1.0 (its trainer's default; fit_ct does not clip by default).
VARIANTS = {
    "ct_in_batch": {"no_dropout": {"dropout": False}, "dropout": {"dropout": True},
                    "dropout_clipped": {"dropout": True, "max_grad_norm": 1.0}},
    # SG-OPT trains [CLS] (its paper's vector) by default; mean pooling is the
    # sentence vector the other methods train.
    "sg_opt": {"cls": {}, "mean_pooling": {"pooling": "mean"}},
    # PromptBERT's paper setting ([MASK], template denoising, the training-only MLP head), each
    # part left out, and the two templates' views in the start's mean pooling (`auto` there).
    "promptbert": {"paper": {"pooling": "mask", "mlp": "train"},
                   "no_denoise": {"pooling": "mask", "mlp": "train", "denoise": False},
                   "no_mlp": {"pooling": "mask", "mlp": "none"},
                   "mean_pooling": {"pooling": "mean", "mlp": "none"}},
    # ESimCSE as its paper trains it, and with ConSERT's views on top (sentence, positive).
    "esimcse": {"paper": {}, "shuffle_cutoff": {"views": "shuffle,feature_cutoff"},
                "cutoff": {"views": "feature_cutoff,feature_cutoff"},
                "cls": {"pooling": "cls"}},
    # WhitenedCSE at its defaults (groups of 6 channels, no head on mean pooling), with the
    # official code's dense + tanh head after the whitening (in training only), and with the
    # paper's 128 groups (3 channels each on a 384-wide model); and at higher temperatures: the
    # whitened batch's negatives are near-orthogonal, so at 0.05 InfoNCE is near zero; and at
    # 0.1 with ESimCSE's word repetition for the positives (a harder positive).
    "whitenedcse": {"paper": {}, "mlp": {"mlp": "train"}, "groups_128": {"group_size": 3},
                    "t0.1": {"temperature": 0.1}, "t0.2": {"temperature": 0.2},
                    "t0.1_dup": {"temperature": 0.1, "dup_rate": 0.32},
                    "t0.1_groups_32": {"temperature": 0.1, "group_size": 12},
                    "t0.1_positives_3": {"temperature": 0.1, "positives": 3},
                    "t0.1_cls": {"temperature": 0.1, "pooling": "cls", "mlp": "none"}},
}
# Variants tried unless --variants names others.
DEFAULT_VARIANTS = {"ct_in_batch": ["no_dropout", "dropout"]}
NAMES = {
    "ct_k7": "CT, K = 7 (dot-product BCE)",
    "ct_in_batch": "CT, in-batch negatives",
    "simcse": "SimCSE (unsup)",
    "consert": "ConSERT (shuffle + feature cutoff)",
    "sg_opt": "SG-OPT",
    "esimcse": "ESimCSE (repetition + momentum queue)",
    "promptbert": "PromptBERT (template [MASK], denoising)",
    "whitenedcse": "WhitenedCSE (shuffled group whitening, two positives)",
}


# CT with K = 7 keeps its paper's (and the reference figures') batch 16 and
# max length 64; every other method runs at the table's common batch and length.
OVERRIDES = {"ct_k7": {"batch_size": 16, "max_length": 64}}


def settings(method, args):
    """(batch_size, max_length) of `method` in this table."""
    own = OVERRIDES.get(method, {}) if not args.smoke else {}
    return own.get("batch_size", args.batch_size), own.get("max_length", args.max_length)


def fit(method, corpus, start, args, learning_rate, dev, options=None):
    import keras_sentemb

    options = dict(options or {})

    batch_size, max_length = settings(method, args)
    common = dict(model=start, steps=args.steps, batch_size=batch_size,
                  learning_rate=learning_rate, max_length=max_length, dev=dev,
                  eval_every=args.eval_every, seed=args.seed, verbose=0,
                  precision=args.precision)
    if method == "ct_k7":
        return keras_sentemb.fit_ct(corpus, negatives="k7", **common, **options)
    if method == "ct_in_batch":
        return keras_sentemb.fit_ct(corpus, negatives="in_batch", **common, **options)
    if method == "simcse":
        return keras_sentemb.fit_simcse(corpus, **common)
    if method == "consert":
        return keras_sentemb.fit_consert(corpus, **common)
    if method == "sg_opt":
        return keras_sentemb.fit_self_guided(corpus, patience=None, **common, **options)
    # Any other registered method (ESimCSE, TSDAE, ...) at its own defaults.
    return keras_sentemb.fit(method, corpus, **common, **options)


def default_rates(method, rates):
    """The learning rates tried for `method`: the table's, else the method's own default."""
    if method in rates:
        return rates[method]
    from keras_sentemb.methods.registry import get_method

    return [get_method(method).run_defaults["learning_rate"]]


def parse_rates(text):
    rates = dict(DEFAULT_RATES)
    for item in filter(None, (text or "").split(";")):
        name, values = item.split("=")
        rates[name.strip()] = [float(v) for v in values.split(",")]
    return rates


def variant_text(row):
    variant = row.get("variant")
    return f" ({variant.replace('_', ' ')}, chosen on dev)" if variant else ""


def parse_variants(text):
    """`name=v1,v2;...` -> {method: [variant names]} (default: `DEFAULT_VARIANTS`)."""
    chosen = {m: list(v) for m, v in DEFAULT_VARIANTS.items()}
    for item in filter(None, (text or "").split(";")):
        name, values = item.split("=")
        names = [v.strip() for v in values.split(",")]
        unknown = set(names) - set(VARIANTS.get(name.strip(), {}))
        if unknown:
            raise SystemExit(f"unknown variant(s) {sorted(unknown)} for {name.strip()}")
        chosen[name.strip()] = names
    return chosen


def markdown(rows, start_row, steps):
    lines = [
        f"| method (from untuned-minilm, {steps} steps) | batch / max length | pooling | "
        "lr (chosen on dev) | kept step | STS-B dev | STS-B test | sentence-transformers dev / test |",
        "|---|---|---|---|---|---|---|---|",
        f"| start (no training) | | {start_row['pooling']} | | | {start_row['dev']:.2f} | "
        f"{start_row['test']:.2f} | 75.77 / 65.54 |",
    ]
    for row in rows:
        ref = REFERENCE.get(row["method"], {}).get(steps)
        ref_text = f"{ref[0]:.2f} / {ref[1]:.2f}" if ref else "(no such loss)"
        lines.append(
            f"| {NAMES.get(row['method'], row['method'])}{variant_text(row)} | {row['batch_size']} / {row['max_length']} | "
            f"{row['pooling']} | {row['learning_rate']:g} | "
            f"{row['kept_step']} | {row['dev']:.2f} | {row['test']:.2f} | {ref_text} |"
        )
    return "\n".join(lines)


def use_keras_adamw():
    """Make SimCSE, ConSERT and SG-OPT train with Keras' AdamW (epsilon 1e-6)."""
    from keras_sentemb import validation
    from keras_sentemb.methods import consert, self_guided, simcse
    from keras_sentemb.pipelines.schedules import linear_warmup_decay
    from keras_sentemb.trainers.optimizers import AdamW

    def keras_adamw(learning_rate, steps, warmup_ratio=0.0, weight_decay=0.0, **kwargs):
        kwargs.setdefault("epsilon", 1e-6)
        return AdamW(learning_rate=linear_warmup_decay(learning_rate, steps, warmup_ratio),
                     weight_decay=validation.non_negative_float(weight_decay, "weight_decay"),
                     **kwargs)

    for module in (simcse, consert, self_guided):
        module.adamw_linear_decay = keras_adamw


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--start", default=str(START))
    p.add_argument("--corpus", default=str(WIKI))
    p.add_argument("--steps", type=int, default=250)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--methods", default=",".join(DEFAULT_RATES))
    p.add_argument("--learning-rates", default=None,
                   help="e.g. 'simcse=3e-5,1e-4;consert=5e-6' (dev chooses among them)")
    p.add_argument("--variants", default=None,
                   help="e.g. ct_in_batch=dropout,dropout_clipped (default: DEFAULT_VARIANTS)")
    p.add_argument("--out", default=str(REPO / "runs" / "methods_table.jsonl"))
    p.add_argument("--optimizer", choices=["torch", "keras"], default="torch",
                   help="AdamW formula of the AdamW methods (default torch: fit_*'s own)")
    p.add_argument("--precision", choices=["auto", "float32", "bfloat16"], default="float32",
                   help="training precision of every run (default float32, the table's own)")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args(argv)
    if args.optimizer == "keras":
        use_keras_adamw()
    if args.steps > 1000:
        p.error("the table's budget is at most 1000 steps")

    from keras_sentemb.data.corpus import load_corpus
    from keras_sentemb.evaluation.readers import load_stsb_pairs
    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.pipelines.callbacks import sts_spearman

    corpus = load_corpus(args.corpus)
    dev, test = load_stsb_pairs("stsb", "dev"), load_stsb_pairs("stsb", "test")
    if args.smoke:
        args.steps, args.eval_every, args.batch_size = 4, 2, 16
        corpus, dev, test = corpus[:500], dev[:100], test[:100]
    rates = parse_rates(args.learning_rates)
    variants = parse_variants(args.variants)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    start = SentenceEncoder.from_preset(args.start)
    start_row = {"pooling": start.pooling, "dev": sts_spearman(start, dev),
                 "test": sts_spearman(start, test)}
    print(json.dumps({"start": start_row}), flush=True)
    rows = []
    for method in [m.strip() for m in args.methods.split(",") if m.strip()]:
        trials = []
        configs = [(lr, v) for lr in default_rates(method, rates) for v in (variants.get(method) or [None])]
        for lr, variant in configs:
            t0 = time.time()
            options = VARIANTS[method][variant] if variant else None
            encoder = fit(method, corpus, SentenceEncoder.from_preset(args.start), args, lr, dev,
                          options)
            report = encoder.training_report
            trial = {"method": method, "learning_rate": lr, "variant": variant,
                     "pooling": report.pooling,
                     "pooling_reason": report.pooling_reason,
                     "precision": report.resolved.get("precision", "float32"),
                     "kept": report.selection["kept"], "kept_step": report.selection["kept_step"],
                     "dev": report.selection["kept_score"], "history": report.selection["history"],
                     "seconds": round(time.time() - t0, 1), "encoder": encoder}
            trials.append(trial)
            print(json.dumps({k: v for k, v in trial.items() if k != "encoder"}), flush=True)
        best = max(trials, key=lambda t: t["dev"])  # dev only
        best["test"] = sts_spearman(best.pop("encoder"), test)
        for t in trials:
            t.pop("encoder", None)
        batch_size, max_length = settings(method, args)
        row = {**best, "steps": args.steps, "batch_size": batch_size, "max_length": max_length,
               "trials": [{"learning_rate": t["learning_rate"], "variant": t["variant"],
                           "dev": t["dev"]} for t in trials],
               "cpus": os.cpu_count(), "smoke": args.smoke, "optimizer": args.optimizer,
               "precision": best["precision"]}
        rows.append(row)
        with open(out, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
    print(markdown(rows, start_row, args.steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
