"""SentEval's transfer protocol, ours vs an independent implementation, on real sentence vectors.

Encodes a task's sentences once (the model's `encode`, its own pooling), then runs
`keras_sentemb.evaluation.transfer_protocols` (SentEval's Adam + early stopping) and
`tests/evaluation/reference_transfer.py` (scipy L-BFGS to convergence, no shared code) on the
same features, and prints one JSON line per task with both test accuracies and their gap.

    PYTHONPATH=. python benchmarks/transfer_independent_check.py --data data/senteval --tasks TREC,MRPC
"""

import argparse
import json
import sys
import time

import numpy as np

from benchmarks._common import REPO

sys.path.insert(0, str(REPO / "tests" / "evaluation"))
import reference_transfer as reference  # tests/evaluation, not a package dependency

from keras_sentemb import SentenceEncoder
from keras_sentemb.evaluation import transfer_protocols as protocols
from keras_sentemb.evaluation.transfer import pair_features
from keras_sentemb.evaluation.transfer_readers import read_transfer_task

SUPPORTED = ("SST2", "TREC", "MRPC")


def check(encoder, data, task, seed):
    splits = read_transfer_task(data, task)
    cfg = protocols.resolve_config("paper")
    start = time.time()

    def encode(texts):
        return encoder.encode(list(texts), show_progress=False)

    if task == "MRPC":
        feats = {s: pair_features(encode(splits[s][0]), encode(splits[s][1]))
                 for s in ("train", "test")}
        labels = {s: np.asarray(splits[s][2]) for s in ("train", "test")}
    else:
        feats = {s: encode(splits[s][0]) for s in splits}
        labels = {s: np.asarray(splits[s][1]) for s in splits}
    encoded = time.time() - start
    if task == "SST2":
        args = (feats["train"], labels["train"], feats["dev"], labels["dev"], feats["test"], labels["test"])
        ours = protocols.split_selection(*args, cfg, seed)
        theirs, _ = reference.split_selection(*args)
    else:
        args = (feats["train"], labels["train"], feats["test"], labels["test"])
        ours = protocols.kfold_then_test(*args, cfg, seed)
        theirs, _, _ = reference.kfold_then_test(*args, k=cfg["kfold"], seed=seed)
    return {"task": task, "ours": ours["acc"], "ours_l2": ours["l2"], "independent": theirs,
            "gap": round(abs(ours["acc"] - theirs), 2), "seed": seed,
            "seconds": {"encode": round(encoded, 1), "classifiers": round(time.time() - start - encoded, 1)}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--data", required=True, help="SentEval downstream folder")
    parser.add_argument("--tasks", default="TREC,MRPC", help=f"comma-separated, of {SUPPORTED}")
    parser.add_argument("--seed", type=int, default=1111)
    args = parser.parse_args(argv)
    tasks = [t.strip().upper() for t in args.tasks.split(",") if t.strip()]
    unknown = sorted(set(tasks) - set(SUPPORTED))
    if unknown:
        parser.error(f"unsupported tasks {unknown}; choose from {list(SUPPORTED)}")
    encoder = SentenceEncoder.from_preset(args.model)
    for task in tasks:
        print(json.dumps(check(encoder, args.data, task, args.seed)), flush=True)


if __name__ == "__main__":
    main()
