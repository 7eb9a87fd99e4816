"""GPU benchmark suite: encode and training throughput (sentences/s, MFU), as JSONL.

    python benchmarks/gpu.py --output gpu_results.jsonl             # on a GPU
    python benchmarks/gpu.py --smoke --output /tmp/smoke.jsonl      # CPU, tiny sizes

Measures, for each model (`default`: the bundled all-MiniLM-L6-v2;
`bert-base`: a randomly initialised BERT-base-sized backbone, 12 layers,
hidden 768, with the default model's 30,522-word tokenizer) and each mode
(`fp32`; `mixed`: bfloat16 compute with float32 weights, keras_sentemb's
`precision="bfloat16"`; `xla`: float32 with `jit_compile=True`; `mixed_xla`):

- `encode`: `SentenceEncoder.encode` throughput over `--sentences` wiki
  sentences (length-sorted, bucket-padded batches), batch sizes `--batches`
  (XLA modes: the same batches through a `jit_compile=True` forward);
- `train_mnrl`: SimCSE-style InfoNCE over (anchor, positive) pairs of
  different sentences (sentence-transformers' MultipleNegativesRankingLoss),
  batch sizes `--batches` (pairs per step);
- `train_ct`: Contrastive Tension, K = 7, batch 64.

Every record counts `sequences_per_s` (sequences through the encoder per
second: a training step of batch B pairs is 2B sequences) and
`examples_per_s` (pairs / sentences per second), the achieved TFLOP/s from
an analytic count (2 x non-embedding parameters x tokens for a forward pass,
x3 for training, plus the attention score and value products, 4 x layers x
T^2 x hidden per sequence forward) and `mfu` against `--peak-tflops` (or the
table below for the detected GPU; null when unknown, e.g. on CPU). Timing:
`--warmup` steps (tracing, XLA compilation) are excluded; the median of
`--repeats` timed runs is reported. One JSON object per line goes to
`--output` (and stdout), each naming the device.

Reference points (sentence-transformers, one H100): encode
MiniLM 21.1k sentences/s fp32, BERT-base 10.9k fp16; MNRL batch 512:
MiniLM 6.8k sentences/s, BERT-base 4.9k; CT K=7 batch 64 BERT-base 740
sentences/s.
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from _common import read_lines, sentences_file  # noqa: E402

# Dense peak TFLOP/s (no sparsity): (bfloat16/float16, TF32 for float32 matmuls).
PEAK_TFLOPS = {
    "H100": (989.0, 494.0),
    "H200": (989.0, 494.0),
    "A100": (312.0, 156.0),
    "L4": (121.0, 60.0),
    "A10": (125.0, 62.5),
    "T4": (65.0, 8.1),
}
MODES = ("fp32", "mixed", "xla", "mixed_xla")


def device_name():
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return details.get("device_name", "GPU"), True
    model = "CPU"
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    return f"{model} ({os.cpu_count()} CPUs)", False


def peak_tflops(device, mixed, override):
    if override:
        return override
    for key, (low, fp32) in PEAK_TFLOPS.items():
        if key in device:
            return low if mixed else fp32
    return None


def build_encoder(name, smoke):
    """`(encoder, label)`: the default model, or a random backbone with its tokenizer."""
    import keras_hub

    from keras_sentemb import SentenceEncoder

    default = SentenceEncoder.from_preset("default")
    if name == "default" and not smoke:
        return default, "all-MiniLM-L6-v2"
    size = dict(num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64) if smoke else dict(
        num_layers=12, num_heads=12, hidden_dim=768, intermediate_dim=3072)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=default.tokenizer.vocabulary_size(), max_sequence_length=512,
        **size,
    )
    label = "tiny-random (smoke)" if smoke else "bert-base-random"
    return SentenceEncoder(backbone, default.tokenizer, pooling="mean", max_length=256), label


def non_embedding_params(encoder):
    total = 0
    for layer in encoder.backbone.transformer_layers:
        total += sum(int(w.numpy().size) for w in layer.weights)
    return total


def flops_per_sequence(encoder, length, training):
    """Analytic FLOPs of one sequence of `length` tokens (forward, x3 training)."""
    dense = 2 * non_embedding_params(encoder) * length
    attention = 4 * encoder.num_layers * length * length * encoder.hidden_dim
    return (dense + attention) * (3 if training else 1)


def timed(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_encode(encoder, sentences, batch, mode, args):
    import numpy as np
    import tensorflow as tf

    mixed = mode.startswith("mixed")
    model = encoder.precision_twin("bfloat16") if mixed else encoder
    max_length = args.max_length
    batches = list(model.packed_batches(sentences, batch, max_length))
    tokens = sum(int(np.prod(ids.shape)) for _, ids, _ in batches)
    flops = sum(flops_per_sequence(encoder, ids.shape[1], False) * ids.shape[0]
                for _, ids, _ in batches)
    if mode.endswith("xla"):
        @tf.function(jit_compile=True)
        def forward(token_ids, padding_mask):
            inputs = {"token_ids": token_ids, "padding_mask": padding_mask}
            states = model.hidden_states(inputs)
            return tf.cast(model.pool(states, padding_mask), "float32")

        def run():
            for _, ids, mask in batches:
                forward(ids, mask).numpy()
    else:
        def run():
            model.encode(sentences, batch_size=batch, max_length=max_length, show_progress=False)
    seconds = timed(run, args.warmup, args.repeats)
    return {"sequences": len(sentences), "examples": len(sentences), "tokens": tokens,
            "flops": flops, "seconds": seconds}


def bench_train(encoder, sentences, batch, mode, task, args):
    import keras
    import tensorflow as tf

    from keras_sentemb.data.batching import shuffled_batches
    from keras_sentemb.data.batching import tokenize_columns
    from keras_sentemb.data.ct_sampler import ct_pair_dataset
    from keras_sentemb.methods.contrastive_tension.trainer import ContrastiveTension
    from keras_sentemb.methods.simcse.trainer import SimCSE

    mixed = mode.startswith("mixed")
    model = encoder.clone(name="trained", dtype="mixed_bfloat16" if mixed else None)
    if task == "train_mnrl":
        trainer = SimCSE(model, mode="paraphrase", pooling="mean", mlp="none")
        # (anchor, positive) pairs: consecutive sentences; all labels 1 = MNRL.
        n = len(sentences) - 1
        columns = {"sentence1": sentences[:n], "sentence2": sentences[1:]}
        ds = tokenize_columns(model, shuffled_batches(columns, batch, seed=0,
                                                      extra={"label": [1] * n}),
                              list(columns), args.max_length)
        sequences = 2 * batch
    else:
        trainer = ContrastiveTension(model, negatives="k7")
        ds = tokenize_columns(model, ct_pair_dataset(sentences, batch, 7, seed=0),
                              ["left", "right"], args.max_length)
        sequences = 2 * batch
    trainer.compile(optimizer=keras.optimizers.AdamW(1e-5), jit_compile=mode.endswith("xla"))
    count = args.warmup + args.repeats * args.steps
    column = "sentence1" if task == "train_mnrl" else "left"
    lengths = [b[column]["token_ids"].shape[1] for b in ds.take(count)]
    # The batches are tokenized once and cached: the steps time the model only.
    iterator = iter(ds.take(count).cache().repeat())
    trainer.make_train_function()

    def steps(k):
        for _ in range(k):
            trainer.train_function(iterator)

    steps(args.warmup)  # tracing, XLA compilation
    times = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        steps(args.steps)
        float(trainer.loss_tracker.result())  # waits for the device
        times.append((time.perf_counter() - t) / args.steps)
    seconds = statistics.median(times)
    mean_length = sum(lengths) / len(lengths)
    flops = flops_per_sequence(encoder, mean_length, True) * sequences
    return {"sequences": sequences, "examples": batch,
            "tokens": int(mean_length * sequences), "flops": flops, "seconds": seconds}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output", default="gpu_benchmark.jsonl")
    p.add_argument("--models", default="default,bert-base")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--tasks", default="encode,train_mnrl,train_ct")
    p.add_argument("--batches", default="64,128,256,512")
    p.add_argument("--ct-batch", type=int, default=64)
    p.add_argument("--sentences", default=None)
    p.add_argument("--n", type=int, default=10000, help="sentences encoded per timed run")
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=10, help="training steps per timed run")
    p.add_argument("--peak-tflops", type=float, default=None)
    p.add_argument("--smoke", action="store_true",
                   help="tiny random model and sizes: checks the suite on a CPU in a minute")
    args = p.parse_args(argv)
    if args.smoke:
        args.models, args.batches, args.ct_batch = "default", "8", 8
        args.modes = "fp32,mixed_xla"  # every code path (bfloat16, XLA) in few traces
        args.n, args.max_length, args.warmup, args.repeats, args.steps = 32, 32, 1, 1, 1
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    device, is_gpu = device_name()
    sentences = read_lines(sentences_file(args.sentences), max(args.n, 64))
    results = []
    with open(args.output, "w", encoding="utf-8") as out:
        for name in args.models.split(","):
            encoder, label = build_encoder(name, args.smoke)
            for task in args.tasks.split(","):
                batches = [args.ct_batch] if task == "train_ct" else [
                    int(b) for b in args.batches.split(",")]
                for mode in args.modes.split(","):
                    if mode not in MODES:
                        raise SystemExit(f"unknown mode {mode!r}; choose from {MODES}")
                    for batch in batches:
                        if task == "encode":
                            r = bench_encode(encoder, sentences[: args.n], batch, mode, args)
                        else:
                            r = bench_train(encoder, sentences, batch, mode, task, args)
                        peak = peak_tflops(device, mode.startswith("mixed"), args.peak_tflops)
                        achieved = r["flops"] / r["seconds"] / 1e12
                        record = {
                            "task": task, "model": label, "mode": mode, "batch": batch,
                            "device": device, "gpu": is_gpu, "smoke": args.smoke,
                            "max_length": args.max_length,
                            "sequences_per_s": round(r["sequences"] / r["seconds"], 1),
                            "examples_per_s": round(r["examples"] / r["seconds"], 1),
                            "tokens_per_s": round(r["tokens"] / r["seconds"], 1),
                            "achieved_tflops": round(achieved, 4),
                            "peak_tflops": peak,
                            "mfu": None if not peak else round(achieved / peak, 4),
                            "seconds": round(r["seconds"], 4),
                            "tensorflow": tf.__version__,
                        }
                        results.append(record)
                        line = json.dumps(record)
                        out.write(line + "\n")
                        out.flush()
                        print(line, flush=True)
    return results


if __name__ == "__main__":
    main()
