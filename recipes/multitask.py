"""Multitask heads on one encoder (sentiment / paraphrase / similarity).

Reproduces the comparison of training procedures of the report
"Contrastive Learning for Generalizable Sentence Embeddings" on the CS224N
minBERT data (shared/data/multitask): every procedure starts from the same
encoder (optionally contrastively pre-trained once, with SimCSE) and gets the
same budget of task batches; dev metrics are printed as JSON lines, then the
ensemble of the best model per task.

    python recipes/multitask.py --smoke                 # ~minutes on CPU
    python recipes/multitask.py --steps 100 --batch-size 16 --max-length 64 \\
        --procedures average,batch_round_robin,pcgrad --pretrain none

Budget: `--steps` optimizer steps for the procedures that take one batch of
every task per step (average, pcgrad); the one-task-per-step procedures
(batch/epoch round robin) get 3 x steps, so all see the same number of
batches and examples. Each procedure is one `fit_multitask` call with
`dev=None` (the weights after the last step, as in the report's
comparison); `--select-on-dev` keeps the best checkpoint on the task dev
sets instead (evaluated every `--eval-every` steps).

The encoder is loaded with `--max-length` as its own limit, so training and
dev evaluation both truncate there.

Leakage: multitask/sts-train.csv contains STS-B test pairs; this recipe
never evaluates on STS-B test (only the multitask dev sets).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "multitask"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=str(DEFAULT_DATA))
    p.add_argument("--model", default="default")
    p.add_argument("--procedures", default="average,batch_round_robin,pcgrad")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--learning-rate", type=float, default=2e-5)
    p.add_argument("--head-learning-rate", type=float, default=1e-3)
    p.add_argument("--head-sharing", default="first_layer")
    p.add_argument("--pooling", default="auto",
                   help="auto (the model's own, else [CLS] as in the report) or a pooling name")
    p.add_argument("--pretrain", default="unsup", choices=["none", "unsup", "paraphrase", "nli"])
    p.add_argument("--pretrain-steps", type=int, default=None)
    p.add_argument("--fusion", action="store_true")
    p.add_argument("--select-on-dev", action="store_true",
                   help="keep the best checkpoint on the task dev sets (default: the last weights)")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--dev-limit", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true",
                   help="tiny budget: 6 steps, max_length 32, 64 dev examples per task, no pre-training")
    args = p.parse_args(argv)
    if args.smoke:
        args.steps, args.max_length, args.dev_limit = 6, 32, 64
        args.pretrain, args.batch_size = "none", 8

    import keras

    from keras_sentemb import fit_simcse
    from keras_sentemb.data.multitask import load_multitask_data
    from keras_sentemb.data.multitask import pretraining_examples
    from keras_sentemb.data.nli import read_nli_triplets
    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.models.multitask_ensemble import MultitaskEnsemble
    from keras_sentemb.pipelines.multitask import evaluate_multitask
    from keras_sentemb.pipelines.multitask import fit_multitask
    from keras_sentemb.pipelines.scaffold import resolve_pooling
    from keras_sentemb.trainers.multitask import MultitaskModel

    keras.utils.set_random_seed(args.seed)
    data = load_multitask_data(args.data_dir)
    print(json.dumps({"train_sizes": {t: len(v) for t, v in data["train"].items()},
                      "dev_sizes": {t: len(v) for t, v in data["dev"].items()},
                      "skipped": data["skipped"]}), flush=True)
    base = SentenceEncoder.from_preset(args.model, max_length=args.max_length)
    pooling, reason = resolve_pooling(args.pooling, base, "cls")
    print(json.dumps({"pooling": pooling, "why": reason}), flush=True)
    if args.pretrain != "none":
        triplets = None
        if args.pretrain == "nli":
            triplets = read_nli_triplets(Path(args.data_dir).parent / "nli" / "snli_devtest_triplets.csv")
        cols = pretraining_examples(args.pretrain, data["train"], triplets, args.seed)
        corpus = cols["sentence"] if args.pretrain == "unsup" else list(
            zip(cols["sent0"], cols["sent1"], cols["hard_neg"]))
        base = fit_simcse(corpus, model=base, mode="unsup" if args.pretrain == "unsup" else "sup",
                          steps=args.pretrain_steps or args.steps, batch_size=args.batch_size,
                          learning_rate=3e-5, max_length=args.max_length, dev=None,
                          pooling=pooling, seed=args.seed, verbose=2)

    results, models = {}, {}
    start_metrics = evaluate_multitask(MultitaskModel(base, pooling=pooling), data["dev"],
                                       limit=args.dev_limit)
    print(json.dumps({"procedure": "untrained heads", **start_metrics}), flush=True)

    class Timer(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.start = time.time()

        def on_train_end(self, logs=None):
            self.seconds = time.time() - self.start

    for procedure in args.procedures.split(","):
        one_task = procedure in ("batch_round_robin", "epoch_round_robin")
        steps = 3 * args.steps if one_task else args.steps
        timer = Timer()
        model = fit_multitask(
            args.data_dir, model=base.clone(name=f"encoder_{procedure}"), steps=steps,
            batch_size=args.batch_size, learning_rate=args.learning_rate,
            max_length=args.max_length, pooling=pooling,
            dev="multitask" if args.select_on_dev else None,
            eval_every=args.eval_every, callbacks=[timer], seed=args.seed, verbose=2,
            procedure=procedure, head_sharing=args.head_sharing, fusion=args.fusion,
            pretrain="none", head_learning_rate=args.head_learning_rate,
            dev_limit=args.dev_limit,
        )
        results[procedure] = model.dev_metrics
        models[procedure] = model
        print(json.dumps({"procedure": procedure, "optimizer_steps": steps,
                          "task_batches": 3 * args.steps,
                          "train_seconds": round(timer.seconds),
                          "kept_step": (model.training_report.selection or {}).get("kept_step", steps),
                          **model.dev_metrics}), flush=True)
    ensemble = MultitaskEnsemble.from_metrics(models, results)
    metric = {"sentiment": "sentiment_acc", "paraphrase": "paraphrase_acc",
              "similarity": "similarity_pearson"}
    ens = {metric[t]: results[ensemble.chosen[t]][metric[t]] for t in metric}
    ens["overall"] = sum(ens.values()) / 3
    print(json.dumps({"procedure": "ensemble (best per task, chosen on the same dev sets)",
                      "chosen": ensemble.chosen, **ens}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
