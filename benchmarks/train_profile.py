"""Where a training step's time goes: TensorFlow's op-level profile, grouped.

    python benchmarks/train_profile.py                       # CT K=7 step, as ct_train_vs_st.py
    python benchmarks/train_profile.py --plain-gelu          # keras-hub's composed GELU ops
    python benchmarks/train_profile.py --by-node --ops Mul,AddV2   # which layers run these ops
    python benchmarks/train_profile.py --train-threads       # with the threads `train` uses
    python benchmarks/train_profile.py --method simcse --batch-size 64 --max-length 32 \
        --precision bfloat16                                 # SimCSE's step in mixed bfloat16

Traces `--steps` steps of `ContrastiveTension.fit` (the step `ct_train_vs_st.py`
times: default model, batch 16 in CT's layout, max length 75, RMSprop,
dropout on) with `tf.profiler`, reads the trace back and prints the time per
step of each op type (or of each op node with `--by-node`), with the share of
all op time. Op times are summed over TensorFlow's threads, so they add up
to more than the wall time when ops run side by side; the shares are what to
read. One JSON line per group, the heaviest first, after a header line with
the wall time per step and `cpu_info`. `ExecuteAsyncOnStream` is XLA running a
compiled function (the fused GELU, layer norm and dropout kernels, and the
optimizer's update).

It found the GELU (about 20 element-wise ops forward and backward on the
largest activation, where PyTorch runs two kernels), now one fused kernel
each way (`keras_sentemb.kernels.fused_gelu`), and a finiteness check that
turned the embedding's sparse gradient into a dense vocabulary-sized tensor.
"""

import argparse
import collections
import glob
import json
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import cpu_info, read_lines, sentences_file  # noqa: E402

# Events of the trace that are not single ops: executor spans and function
# calls that contain other events, and tf.data's work on its own threads.
NOT_OPS = ("Process", "Run", "Start")


def is_op(op):
    op = op.strip()
    return not (op in NOT_OPS or op.startswith("__inference")
                or "Dataset" in op or "Iterator" in op or op.startswith("ParallelMap"))


def op_times(logdir, by_node=False, only=None):
    """{group: seconds} summed over every op event of the trace in `logdir`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    path = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    totals, counts = collections.Counter(), collections.Counter()
    for plane in space.planes:
        metadata = plane.event_metadata
        for line in plane.lines:
            for event in line.events:
                name = metadata[event.metadata_id].name
                if ":" not in name:
                    continue
                node, op = name.rsplit(":", 1)
                if not is_op(op) or (only and op not in only):
                    continue
                if by_node:
                    node = re.sub(r"transformer_layer_\d+", "transformer_layer_N", node)
                    node = re.sub(r"_\d+(?=/|$)", "", node)
                    key = f"{op} {'/'.join(node.split('/')[-3:])}"
                else:
                    key = op
                totals[key] += event.duration_ps / 1e12
                counts[key] += 1
    return totals, counts


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-length", type=int, default=75)
    p.add_argument("--plain-gelu", action="store_true",
                   help="keras-hub's GELU ops instead of the fused kernels")
    p.add_argument("--method", choices=["ct", "simcse"], default="ct",
                   help="simcse: the step ct_train_vs_st.py --method simcse times")
    p.add_argument("--precision", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--by-node", action="store_true")
    p.add_argument("--ops", default=None, help="comma-separated op types to keep")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--train-threads", action="store_true",
                   help="the threads `keras-sentemb train ct|simcse` uses (one pass per core)")
    args = p.parse_args()
    if args.plain_gelu:
        os.environ["KERAS_SENTEMB_PLAIN_GELU"] = "1"
    if args.train_threads:
        from keras_sentemb.kernels.cpu_threads import configure_train_threads

        configure_train_threads()

    import tensorflow as tf

    from keras_sentemb import SentenceEncoder
    from keras_sentemb.data.batching import tokenize_columns
    from keras_sentemb.data.ct_sampler import ct_pair_dataset
    from keras_sentemb.pipelines.schedules import ct_learning_rate_schedule
    from keras_sentemb.trainers import optimizers
    from keras_sentemb.methods.contrastive_tension.trainer import ContrastiveTension

    sentences = read_lines(sentences_file(None), 10000)
    encoder = SentenceEncoder.from_preset("default", max_length=args.max_length)
    if args.precision != "float32":
        encoder = encoder.clone(name=encoder.name, dtype="mixed_bfloat16")
    if args.method == "simcse":
        from ct_train_vs_st import simcse_trainer_and_data

        trainer, data = simcse_trainer_and_data(encoder, sentences, args.batch_size)
    else:
        trainer = ContrastiveTension(encoder, negatives="k7", dropout=True)
        trainer.compile(optimizer=optimizers.RMSprop(ct_learning_rate_schedule()))  # as fit_ct
        data = tokenize_columns(
            encoder, ct_pair_dataset(sentences, args.batch_size, 7, seed=0), ["left", "right"]
        )
    trainer.fit(data, steps_per_epoch=args.warmup, epochs=1, verbose=0)
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        start = time.perf_counter()
        trainer.fit(data, steps_per_epoch=args.steps, epochs=1, verbose=0)
        wall = (time.perf_counter() - start) / args.steps
        tf.profiler.experimental.stop()
        only = set(args.ops.split(",")) if args.ops else None
        totals, counts = op_times(logdir, args.by_node, only)
    everything = sum(totals.values())
    print(json.dumps({"benchmark": "train_profile", "method": args.method,
                      "precision": args.precision, "plain_gelu": args.plain_gelu,
                      "wall_s_per_step": round(wall, 3),
                      "op_s_per_step": round(everything / args.steps, 3), **cpu_info()}))
    for key, seconds in totals.most_common(args.top):
        print(json.dumps({"group": key, "ms_per_step": round(1000 * seconds / args.steps, 1),
                          "share": round(seconds / everything, 4),
                          "calls_per_step": counts[key] // args.steps}))


if __name__ == "__main__":
    main()
