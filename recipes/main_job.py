"""The README's main job: CT on the bundled corpus, STS-B before/after, export.

    python recipes/main_job.py [--steps 200] [--output runs/ct_default]
                               [--export saved_models/ct_default]

1. Evaluates the bundled default model (all-MiniLM-L6-v2) on the bundled
   STS-B dev and test sets (SentEval version, mean pooling, Spearman x100).
2. Trains it with Contrastive Tension (`keras_sentemb.fit_ct`, the paper's
   settings: K = 7, dot-product logits, RMSprop with the step schedule,
   batch 16, max length 75) on the bundled 10k Wikipedia sentences, scoring
   both towers on STS-B dev every `--eval-every` steps and keeping the best
   (the starting weights included).
3. Evaluates the kept encoder again, saves it, and exports a string-in
   SavedModel for TF Serving (verified against `encode`).

Runs from the repository alone (bundled data and model) in a few minutes on CPU.
Prints a JSON summary as its last line.
"""

import argparse
import json
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras_sentemb  # noqa: E402
from keras_sentemb.data.resources import bundled_corpus, bundled_sts_dir  # noqa: E402
from keras_sentemb.kernels.onednn_opts import enable_onednn_opts  # noqa: E402
from keras_sentemb.quiet_startup import add_verbose_flag, run_quietly  # noqa: E402


def sts(encoder):
    result = keras_sentemb.evaluate_sts(
        encoder, bundled_sts_dir(), tasks=["STSBenchmark"], split=["dev", "test"],
        show_progress=False,
    )["STSBenchmark"]
    return {split: round(result[split]["spearman"], 2) for split in ("dev", "test")}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default")
    p.add_argument("--corpus", default=str(bundled_corpus()))
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--output", default="runs/ct_default")
    p.add_argument("--export", default="saved_models/ct_default")
    add_verbose_flag(p)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    start = time.time()
    # CT's two towers run side by side, each on its share of the cores (and
    # the STS evaluations' two batches likewise), as `keras-sentemb train ct`.
    from keras_sentemb.kernels.cpu_threads import configure_train_threads

    configure_train_threads()

    encoder = keras_sentemb.SentenceEncoder.from_preset(args.model)
    before = sts(encoder)
    print(f"before CT: STS-B spearman x100 {before}", flush=True)

    trained = keras_sentemb.fit_ct(
        args.corpus, model=args.model, steps=args.steps,
        eval_every=args.eval_every, output=args.output, verbose=2,
    )
    selection = trained.training_report.selection
    after = sts(trained)
    print(f"after CT:  STS-B spearman x100 {after}", flush=True)

    export_path = keras_sentemb.export_saved_model(trained, args.export)
    summary = {
        "model": args.model,
        "corpus": args.corpus,
        "steps": args.steps,
        "stsb_before": before,
        "stsb_after": after,
        "pooling": trained.training_report.pooling,
        "kept": {"tower": selection["kept"], "step": selection["kept_step"],
                 "dev_spearman": round(selection["kept_score"], 2)},
        "dev_history": [(step, {k: round(v, 2) for k, v in s.items()})
                        for step, s in selection["history"]],
        "saved_encoder": args.output,
        "saved_model": str(export_path),
        "seconds": round(time.time() - start),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    enable_onednn_opts()  # before TensorFlow starts: its oneDNN kernels on AVX2-only CPUs
    sys.exit(run_quietly(main))  # TensorFlow's start-up notices hidden unless --verbose
