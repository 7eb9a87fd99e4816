"""Training speed (CT K = 7, CT in-batch, SimCSE): keras_sentemb vs sentence-transformers.

    python benchmarks/ct_train_vs_st.py --steps 30
    python benchmarks/ct_train_vs_st.py --steps 30 --negatives in_batch --batch-size 64 --max-length 32
    python benchmarks/ct_train_vs_st.py --steps 30 --method simcse --batch-size 64 --max-length 32
    python benchmarks/ct_train_vs_st.py --steps 30 --max-isa avx2        # an AVX2-only CPU, emulated

Same CPU, same model (bundled all-MiniLM-L6-v2), same batch layout (16 rows:
groups of one (s, s) positive and 7 random negative pairs), max length 75,
RMSprop, both towers trained, tokenization included in each step. Ours is
`ContrastiveTension.fit` on the tf.data pipeline `fit_ct` uses; ST's is
benchmarks/st_ct_train.py (ContrastiveTensionLoss, a manual training loop in
its own venv: `ST_PYTHON`, default `stref/bin/python` in the clone). ST trains with
dropout on (train mode); ours is timed with dropout on as well (`--dropout`,
default) so the work per step is the same. `--warmup` steps are excluded.
`--method simcse`: unsupervised SimCSE instead (ours: the `SimCSE` trainer
with mean pooling and no head, as `fit_simcse` trains the default model, two
passes of the batch; ST: MultipleNegativesRankingLoss at scale 20 on (s, s)
pairs, its two passes), TorchAdamW / torch AdamW at 3e-5 on both sides.
`--method consert`: ConSERT's two views (ours only; sentence-transformers has
no ConSERT).
Ours runs with the threads `keras-sentemb train` gives these methods (each
of the step's two passes on its share of the cores,
`cpu_threads.configure_train_threads`); `--tf-default-threads` keeps
TensorFlow's own, `--threads` / `--intra-op-threads` / `--inter-op-threads`
set them.
`--precisions float32,bfloat16` (the default) times ours in each (bfloat16:
Keras' `mixed_bfloat16` policy, as `fit_ct(precision="bfloat16")`), one after
the other in this process; ours' default (`precision="auto"`) is the one this
CPU resolves to, named in the JSON with why. `--st-precisions float32,bf16`
(the default) times sentence-transformers in float32 and under bf16 autocast
(its trainer's `bf16=True` on a CPU), each in its own process; `ratio` is
ours' default against its fastest path, `ratio_by_st_precision` against each; `--repeats N` does that N times, alternating, and
reports each precision's median (single short runs vary by about 5 %). Prints one JSON line with steps/s of both, the ratios,
each side's peak RSS (ours: this process, over every precision it ran; ST:
its process) and the load average before and after.
`--max-isa avx2` caps both sides' vector code at AVX2 on an AVX-512 CPU
(oneDNN, MKL, ATen, XLA; `_common.MAX_ISA_ENV`): what an AVX2-only CPU of the
same cores and clock would run, short of a real one.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (  # noqa: E402
    add_max_isa_argument, apply_max_isa,
    configure_ours, cpu_info, read_lines, run_st, sentences_file,
)


def simcse_trainer_and_data(encoder, sentences, batch_size, mini_batch_size=None,
                            matryoshka_dims=None):
    """Ours for `--method simcse`: the trainer `fit_simcse` builds for the default model."""
    import tensorflow as tf

    from keras_sentemb.data.batching import tokenize_columns
    from keras_sentemb.methods.simcse.trainer import SimCSE
    from keras_sentemb.trainers.torch_adamw import TorchAdamW

    trainer = SimCSE(encoder, mode="unsup", pooling="mean", mlp="none",
                     mini_batch_size=mini_batch_size)
    if matryoshka_dims:  # as fit_simcse(matryoshka_dims=...) sets it
        trainer.set_matryoshka(matryoshka_dims)
    trainer.compile(optimizer=TorchAdamW(3e-5))
    data = (tf.data.Dataset.from_tensor_slices({"sentence": sentences})
            .shuffle(len(sentences), seed=0).repeat().batch(batch_size, drop_remainder=True))
    return trainer, tokenize_columns(encoder, data, ["sentence"])


def consert_trainer_and_data(encoder, sentences, batch_size):
    """Ours for `--method consert`: ConSERT's default views (shuffle, feature cut-off), AdamW."""
    import tensorflow as tf

    from keras_sentemb.data.batching import tokenize_columns
    from keras_sentemb.methods.consert.trainer import ConSERT
    from keras_sentemb.trainers.torch_adamw import TorchAdamW

    trainer = ConSERT(encoder)
    trainer.compile(optimizer=TorchAdamW(5e-7))
    data = (tf.data.Dataset.from_tensor_slices({"sentence": sentences})
            .shuffle(len(sentences), seed=0).repeat().batch(batch_size, drop_remainder=True))
    return trainer, tokenize_columns(encoder, data, ["sentence"])


def ours_steps_per_s(sentences, steps, warmup, batch_size, max_length, negatives, dropout,
                     precision="float32", method="ct", mini_batch_size=None,
                     matryoshka_dims=None):
    from keras_sentemb import SentenceEncoder
    from keras_sentemb.data.batching import tokenize_columns
    from keras_sentemb.data.ct_sampler import ct_pair_dataset
    from keras_sentemb.pipelines.schedules import ct_learning_rate_schedule
    from keras_sentemb.trainers import optimizers
    from keras_sentemb.methods.contrastive_tension.trainer import ContrastiveTension
    from keras_sentemb.trainers.torch_adamw import TorchAdamW

    encoder = SentenceEncoder.from_preset("default", max_length=max_length)
    if precision != "float32":
        encoder = encoder.clone(name=encoder.name, dtype="mixed_bfloat16")
    if method == "simcse":
        trainer, data = simcse_trainer_and_data(encoder, sentences, batch_size,
                                                mini_batch_size, matryoshka_dims)
        return timed_fit(trainer, data, steps, warmup)
    if method == "consert":
        trainer, data = consert_trainer_and_data(encoder, sentences, batch_size)
        return timed_fit(trainer, data, steps, warmup)
    trainer = ContrastiveTension(encoder, negatives=negatives, dropout=dropout)
    # As fit_ct: RMSprop on CT's step schedule (TorchAdamW for in-batch negatives),
    # fused unless KERAS_SENTEMB_PLAIN_OPTIMIZER=1 (--plain-optimizer).
    trainer.compile(
        optimizer=TorchAdamW(2e-5, weight_decay=0.01) if negatives == "in_batch"
        else optimizers.RMSprop(ct_learning_rate_schedule())
    )
    k = 0 if negatives == "in_batch" else 7
    data = tokenize_columns(
        encoder, ct_pair_dataset(sentences, batch_size, k, seed=0), ["left", "right"]
    )
    return timed_fit(trainer, data, steps, warmup)


def timed_fit(trainer, data, steps, warmup):
    """Steps/s of `trainer.fit` over `steps` steps after `warmup` untimed ones."""
    import keras

    times = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter())

    trainer.fit(data, steps_per_epoch=warmup + steps, epochs=1, verbose=0, callbacks=[Clock()])
    return steps / (times[-1] - times[warmup - 1])


def tf_threads(kind):
    """TensorFlow's intra- or inter-op thread setting as it ran (0: TensorFlow's default)."""
    import tensorflow as tf

    return getattr(tf.config.threading, f"get_{kind}_op_parallelism_threads")()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sentences", default=None)
    p.add_argument("--pool", type=int, default=10000)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-length", type=int, default=75)
    p.add_argument("--method", choices=["ct", "simcse", "consert"], default="ct",
                   help="consert: ours only (sentence-transformers has no ConSERT)")
    p.add_argument("--negatives", choices=["k7", "in_batch"], default="k7",
                   help="CT's negatives (--method ct)")
    p.add_argument("--dropout", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--st-python", default=None)
    p.add_argument("--threads", type=int, default=None,
                   help="threads for both toolkits (default: TensorFlow's and torch's own)")
    p.add_argument("--plain-gelu", action="store_true",
                   help="ours with keras-hub's composed GELU ops instead of the fused kernels")
    p.add_argument("--intra-op-threads", type=int, default=None,
                   help="ours only: TensorFlow's intra-op threads (overrides --threads)")
    p.add_argument("--inter-op-threads", type=int, default=None,
                   help="ours only: TensorFlow's inter-op threads (overrides --threads)")
    p.add_argument("--tf-default-threads", action="store_true",
                   help="ours with TensorFlow's default threads instead of the split "
                        "`keras-sentemb train` uses for CT, SimCSE and ConSERT")
    p.add_argument("--plain-optimizer", action="store_true",
                   help="ours with Keras' own optimizer update instead of the fused kernels")
    p.add_argument("--repeats", type=int, default=1,
                   help="time ours this many times per precision, alternating; medians count")
    p.add_argument("--precisions", default="float32,bfloat16",
                   help="ours: comma-separated float32 / bfloat16, each timed in turn (the "
                        "default, precision='auto', is the one of them this CPU resolves to)")
    p.add_argument("--st-precisions", default="float32,bf16",
                   help="sentence-transformers: comma-separated float32 / bf16 (its trainer's "
                        "bf16=True: torch.autocast on the CPU), each in its own process")
    p.add_argument("--mini-batch-size", type=int, default=None,
                   help="--method simcse: ours with GradCache, this many rows embedded at once "
                        "(pass --st-precisions '' to time ours only)")
    p.add_argument("--matryoshka-dims", default=None,
                   help="--method simcse: ours with Matryoshka's loss over these prefixes, "
                        "e.g. 384,256,128,64,32")
    add_max_isa_argument(p)
    args = p.parse_args()
    apply_max_isa(args.max_isa)
    load_before = os.getloadavg()
    if args.plain_optimizer:
        os.environ["KERAS_SENTEMB_PLAIN_OPTIMIZER"] = "1"
    configure_ours(args.threads, args.plain_gelu, parallel_batches=1)
    if not (args.threads or args.intra_op_threads or args.inter_op_threads
            or args.tf_default_threads):
        from keras_sentemb.kernels.cpu_threads import configure_train_threads

        configure_train_threads()  # as `keras-sentemb train ct|simcse|consert`
    if args.intra_op_threads or args.inter_op_threads:
        import tensorflow as tf

        if args.intra_op_threads:
            tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
        if args.inter_op_threads:
            tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    path = sentences_file(args.sentences)
    sentences = read_lines(path, args.pool)
    precisions = [x.strip() for x in args.precisions.split(",") if x.strip()]
    matryoshka = ([int(d) for d in args.matryoshka_dims.split(",")]
                  if args.matryoshka_dims else None)
    if (args.mini_batch_size or matryoshka) and args.method != "simcse":
        p.error("--mini-batch-size and --matryoshka-dims are timed with --method simcse")
    runs = {precision: [] for precision in precisions}
    for _ in range(args.repeats):  # alternating, so a change in load hits every precision
        for precision in precisions:
            runs[precision].append(ours_steps_per_s(
                sentences, args.steps, args.warmup, args.batch_size, args.max_length,
                args.negatives, args.dropout, precision, args.method,
                args.mini_batch_size, matryoshka))
    ours_rates = {precision: statistics.median(rates) for precision, rates in runs.items()}
    from keras_sentemb.kernels.precision import resolve_training_precision

    default, default_why = resolve_training_precision("auto")
    # Ours' default (`precision="auto"`) is one of the precisions timed, else the first.
    ours = ours_rates.get(default, ours_rates[precisions[0]])
    ours_peak = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    st_runs = {}
    st_precisions = [x.strip() for x in args.st_precisions.split(",") if x.strip()]
    for st_precision in ([] if args.method == "consert" else st_precisions):
        out = run_st("st_ct_train.py", [
            "--sentences", path, "--pool", args.pool, "--steps", args.steps,
            "--warmup", args.warmup, "--batch-size", args.batch_size,
            "--max-length", args.max_length,
            "--negatives", ("simcse" if args.method == "simcse" else "bce"
                            if args.negatives == "k7" else "in_batch"),
            *(["--lr", 3e-5] if args.method == "simcse" else []),
            *(["--threads", args.threads] if args.threads else []),
            *(["--bf16"] if st_precision == "bf16" else [])], args.st_python)
        if out is not None:
            st_runs[st_precision] = out
    st_fastest = max(st_runs, key=lambda k: st_runs[k]["steps_per_s"]) if st_runs else None
    st = st_runs.get(st_fastest)
    result = {
        "benchmark": "train",
        "method": args.method,
        "negatives": args.negatives if args.method == "ct" else None,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "dropout": args.dropout,
        "mini_batch_size": args.mini_batch_size,
        "matryoshka_dims": matryoshka,
        "threads": args.threads,
        "tf_default_threads": args.tf_default_threads,
        "intra_op_threads": tf_threads("intra"),
        "inter_op_threads": tf_threads("inter"),
        "fused_gelu": not args.plain_gelu,
        "fused_optimizer": not args.plain_optimizer,
        **cpu_info(),
        "keras_sentemb_default_precision": default,
        "keras_sentemb_default_precision_why": default_why,
        "keras_sentemb_steps_per_s": round(ours, 3),
        # The peer's fastest path on this CPU (float32 or bf16 autocast), and each.
        "sentence_transformers_fastest": st_fastest,
        "sentence_transformers_steps_per_s": round(st["steps_per_s"], 3) if st else None,
        "sentence_transformers_steps_per_s_by_precision": {
            k: v["steps_per_s"] for k, v in st_runs.items()},
        "sentence_transformers_peak_rss_mib_by_precision": {
            k: v.get("peak_rss_mib") for k, v in st_runs.items()},
        "keras_sentemb_steps_per_s_by_precision": {k: round(v, 3) for k, v in ours_rates.items()},
        "keras_sentemb_steps_per_s_runs": {k: [round(x, 3) for x in v] for k, v in runs.items()},
        # Peak before ST ran: a child's getrusage peak starts at its parent's.
        "keras_sentemb_peak_rss_mib": ours_peak,
        "sentence_transformers_peak_rss_mib": st.get("peak_rss_mib") if st else None,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    if st:
        # Ours' default against the peer's fastest path; and against each of its paths.
        result["ratio"] = round(ours / st["steps_per_s"], 2)
        result["ratio_by_st_precision"] = {
            k: round(ours / v["steps_per_s"], 2) for k, v in st_runs.items()}
    if "bfloat16" in ours_rates and "float32" in ours_rates:
        result["ratio_bfloat16_vs_float32"] = round(
            ours_rates["bfloat16"] / ours_rates["float32"], 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
