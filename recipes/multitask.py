"""Multitask heads on one encoder (sentiment / paraphrase / similarity): the report's "3 Given".

Reproduces the headline of the report "Contrastive Learning for Generalizable
Sentence Embeddings" (Stanford CS224N, Table 2, "3 Given") on the CS224N
minBERT data (data/multitask, see docs/data.md): contrastive pre-training on the three
given datasets for 5 epochs (each epoch: supervised SimCSE on Quora with its
paraphrases as positives and non-paraphrases as negatives, then unsupervised
SimCSE on SST, then on STS), then 10 epochs of multi-task fine-tuning with the
average of the three task losses, plain 2-layer MLP heads (hidden 768 on
BERT-base, dropout 0.3 at each linear layer, the first layer shared by the
paraphrase and similarity heads), learning rate 1e-5, batch 16
(`fit_multitask(..., preset="three_given")`, the defaults here;
a flag that changes one is reported in the row).

`--procedures average,batch_round_robin,pcgrad` compares training procedures
(section 4.2): every procedure starts from the same encoder, pre-trains the
same way and gets the same budget of task batches; dev metrics are printed
as JSON lines, then the ensemble of the best model per task. The last line is
the Table 2 row of the first procedure (dev sentiment accuracy, paraphrase
accuracy, STS Pearson and their mean) as one JSON line, also written to
`--out`.

    python recipes/multitask.py --smoke                 # a few minutes on CPU
    python recipes/multitask.py                         # the report's setting (GPU)
    python recipes/multitask.py --steps 100 --batch-size 16 --max-length 64 \\
        --procedures average,batch_round_robin,pcgrad --pretrain none

Budget: `--steps` optimizer steps (default: 10 epochs of the down-sampled task
sets) for the procedures that take one batch of every task per step
(average, pcgrad); the one-task-per-step procedures (batch/epoch round robin)
get 3 x steps, so all see the same number of batches and examples. Each
procedure is one `fit_multitask` call with `dev=None` (the weights after the
last step); `--select-on-dev` keeps the best checkpoint on the task dev sets
instead (evaluated every `--eval-every` steps).

Leakage: multitask/sts-train.csv contains STS-B test pairs; this recipe
never evaluates on STS-B test (only the multitask dev sets).
"""

import functools
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _paper import Setting, paper_parser, paper_value, preset_table  # noqa: E402
from keras_sentemb.kernels.onednn_opts import enable_onednn_opts  # noqa: E402
from keras_sentemb.quiet_startup import run_quietly  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO / "data" / "multitask"

_STARTER = "gpoesia/minbert-default-final-project@7ac8260 multitask_classifier.py"


# The report's headline setting ("3 Given", Table 2). The report has no public code; each value
# quotes the report, or where it is silent the CS224N minBERT starter code it builds on.
@functools.cache
def paper():
    """The paper's main setting: the `multitask` method's `three_given` preset (values and
    sources), then what is this recipe's own (data, protocol, evaluation)."""
    return preset_table("multitask", "three_given", [
        "model",
        "pretrain",
        ("pretrain_epochs", Setting(5, "section 5.3: 'contrastive pre-training is performed on the 3 "
                                      "datasets for 5 epochs'")),
        "pretrain_learning_rate",
        ("temperature", "pretrain_temperature"),
        "batch_size",
        "learning_rate",
        "head_learning_rate",
        ("epochs", Setting(10, "section 5.3: 'Task-specific training is conducted for 10 epochs'")),
        "dropout",
        "head_style",
        "head_sharing",
        ("procedures", "procedure"),
        "fusion",
        "pooling",
        ("max_length", Setting(128, f"paper silent; the starter code truncates with the tokenizer's "
                                   f"defaults ({_STARTER}); 128 here")),
    ])


def __getattr__(name):
    """`PAPER`, the table, built on first use (it imports the method, and TensorFlow)."""
    if name == "PAPER":
        return paper()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


DIFFERENCES = [
    "data: quora-train.csv is not available (only quora-dev.csv, split into train/dev by "
    "fit_multitask); SST and STS train/dev are the starter's files.",
    "pre-training: every '3 Given' stage trains a fresh SimCSE trainer (fresh optimizer and "
    "training-only MLP) at a constant learning rate; the report does not say how its stages "
    "share them.",
    "kept on purpose as options: --head-style residual (zero-initialised residual pair "
    "transforms), --head-learning-rate (heads at their own rate, e.g. 1e-3), --pretrain "
    "unsup|paraphrase|nli|none, --fusion, other --procedures.",
    "selection: the last weights (the report saves the best epoch on dev: --select-on-dev).",
    "--smoke: the default model, 6 steps, 3 pre-training steps (one per stage, 1 epoch), "
    "batch 8, max length 32, 64 dev examples per task: a CPU check, not a result.",
]
ROW_PAPER = "Chen (CS224N report), Table 2 '3 Given' (dev: sentiment acc, paraphrase acc, STS corr)"
REPORT_ROW = {"sentiment_acc": 0.516, "paraphrase_acc": 0.815, "similarity_pearson": 0.661,
              "overall": 0.664}


def build_parser():
    p = paper_parser(__doc__, paper(), DIFFERENCES)
    p.add_argument("--data-dir", default=str(DEFAULT_DATA))
    p.add_argument("--model", default=paper_value(paper(), "model"))
    p.add_argument("--procedures", default=paper_value(paper(), "procedures"))
    p.add_argument("--steps", type=int, default=None,
                   help="fine-tuning steps (default: --epochs epochs of the task sets)")
    p.add_argument("--epochs", type=int, default=paper_value(paper(), "epochs"))
    p.add_argument("--batch-size", type=int, default=paper_value(paper(), "batch_size"))
    p.add_argument("--max-length", type=int, default=paper_value(paper(), "max_length"))
    p.add_argument("--learning-rate", type=float, default=paper_value(paper(), "learning_rate"))
    p.add_argument("--head-learning-rate", type=float,
                   default=paper_value(paper(), "head_learning_rate"))
    p.add_argument("--dropout", type=float, default=paper_value(paper(), "dropout"),
                   help="dropout of the task heads")
    p.add_argument("--head-style", default=paper_value(paper(), "head_style"),
                   choices=["plain", "residual"])
    p.add_argument("--head-sharing", default=paper_value(paper(), "head_sharing"))
    p.add_argument("--pooling", default=paper_value(paper(), "pooling"),
                   help="auto (the model's own, else [CLS] as in the report) or a pooling name")
    p.add_argument("--pretrain", default=paper_value(paper(), "pretrain"),
                   choices=["three_given", "none", "unsup", "paraphrase", "nli"])
    p.add_argument("--pretrain-steps", type=int, default=None,
                   help="total pre-training steps (default: three_given's 5 epochs; others: "
                        "--steps)")
    p.add_argument("--pretrain-learning-rate", type=float,
                   default=paper_value(paper(), "pretrain_learning_rate"))
    p.add_argument("--temperature", type=float, default=paper_value(paper(), "temperature"))
    p.add_argument("--fusion", action="store_true", default=paper_value(paper(), "fusion"))
    p.add_argument("--select-on-dev", action="store_true",
                   help="keep the best checkpoint on the task dev sets (default: the last weights)")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--dev-limit", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None,
                   help="write the table row here (a .json file, or a folder: row.json)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny budget on the default model: 6 steps, 3 pre-training steps, "
                        "max_length 32, 64 dev examples per task")
    return p


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.smoke:
        if args.model == paper_value(paper(), "model"):
            args.model, args.pooling = "default", "auto"
        args.steps, args.max_length, args.dev_limit = 6, 32, 64
        args.pretrain_steps, args.batch_size = args.pretrain_steps or 3, 8

    import keras

    from keras_sentemb.data.multitask import load_multitask_data
    from keras_sentemb.data.multitask import schedule_sizes
    from keras_sentemb.evaluation.paper_row import write_row
    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.evaluation.multitask_ensemble import MultitaskEnsemble
    from keras_sentemb.methods import get_method
    from keras_sentemb.methods.multitask import three_given
    from keras_sentemb.evaluation.multitask import evaluate_multitask
    from keras_sentemb.methods.multitask import fit_multitask
    from keras_sentemb.pipelines.scaffold import resolve_pooling
    from keras_sentemb.methods.multitask.trainer import MultitaskModel

    keras.utils.set_random_seed(args.seed)
    if args.smoke:
        three_given.THREE_GIVEN_EPOCHS = 1
    data = load_multitask_data(args.data_dir)
    print(json.dumps({"train_sizes": {t: len(v) for t, v in data["train"].items()},
                      "dev_sizes": {t: len(v) for t, v in data["dev"].items()},
                      "skipped": data["skipped"]}), flush=True)
    base = SentenceEncoder.from_preset(args.model, max_length=args.max_length)
    pooling, reason = resolve_pooling(args.pooling, base, "cls")
    print(json.dumps({"pooling": pooling, "why": reason}), flush=True)
    start_metrics = evaluate_multitask(MultitaskModel(base, pooling=pooling), data["dev"],
                                       limit=args.dev_limit)
    print(json.dumps({"procedure": "untrained heads", **start_metrics}), flush=True)

    class Timer(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.start = time.time()

        def on_train_end(self, logs=None):
            self.seconds = time.time() - self.start

    options = dict(
        batch_size=args.batch_size, learning_rate=args.learning_rate,
        head_learning_rate=args.head_learning_rate, dropout=args.dropout,
        head_style=args.head_style, head_sharing=args.head_sharing, fusion=args.fusion,
        pretrain=args.pretrain, pretrain_steps=args.pretrain_steps,
        pretrain_learning_rate=args.pretrain_learning_rate,
        pretrain_temperature=args.temperature, pooling=pooling,
    )
    preset = get_method("multitask").presets["three_given"].values
    changed = {k: v for k, v in options.items() if k in preset and preset[k] != v}
    print(json.dumps({"preset": "three_given", "changed_by_flags": changed}), flush=True)
    results, models, rows = {}, {}, []
    for procedure in args.procedures.split(","):
        one_task = procedure in ("batch_round_robin", "epoch_round_robin")
        steps = args.steps
        if steps is None:  # --epochs passes over the down-sampled task sets
            steps = args.epochs * schedule_sizes(data["train"], "average", args.batch_size)[2]
        if one_task:
            steps = 3 * steps
        timer = Timer()
        model = fit_multitask(
            args.data_dir, model=base.clone(name=f"encoder_{procedure}"), steps=steps,
            max_length=args.max_length, dev="multitask" if args.select_on_dev else None,
            eval_every=args.eval_every, callbacks=[timer], seed=args.seed, verbose=2,
            procedure=procedure, dev_limit=args.dev_limit, **options,
        )
        results[procedure] = model.dev_metrics
        models[procedure] = model
        report = model.training_report
        print(json.dumps({"procedure": procedure, "optimizer_steps": steps,
                          "train_seconds": round(timer.seconds),
                          "kept_step": (report.selection or {}).get("kept_step", steps),
                          **model.dev_metrics}), flush=True)
        rows.append({
            "paper": ROW_PAPER,
            "protocol": {
                "name": "three_given" if not changed else "three_given, changed by flags",
                "changed": changed, "procedure": procedure, "model": args.model,
                "pretraining": report.extras.get("pretraining"), "fine_tuning_steps": steps,
                "evaluation": {"data": "multitask dev sets", "metric": "accuracy / Pearson",
                               "dev_limit": args.dev_limit, "pooling": pooling},
                "report_dev": REPORT_ROW,
                **({"smoke": "a CPU check of the pipeline, not a result"} if args.smoke else {}),
            },
            "tasks": {k: round(model.dev_metrics[k], 4)
                      for k in ("sentiment_acc", "paraphrase_acc", "similarity_pearson")},
            "avg": round(model.dev_metrics["overall"], 4),
        })
    if len(models) > 1:
        ensemble = MultitaskEnsemble.from_metrics(models, results)
        metric = {"sentiment": "sentiment_acc", "paraphrase": "paraphrase_acc",
                  "similarity": "similarity_pearson"}
        ens = {metric[t]: results[ensemble.chosen[t]][metric[t]] for t in metric}
        ens["overall"] = sum(ens.values()) / 3
        print(json.dumps({"procedure": "ensemble (best per task, chosen on the same dev sets)",
                          "chosen": ensemble.chosen, **ens}), flush=True)
    write_row(rows[0], args.out)
    return 0


if __name__ == "__main__":
    enable_onednn_opts()  # before TensorFlow starts: its oneDNN kernels on AVX2-only CPUs
    sys.exit(run_quietly(main))  # TensorFlow's start-up notices hidden unless --verbose
