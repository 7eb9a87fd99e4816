"""SentEval transfer tasks: frozen sentence vectors, a logistic-regression probe.

`evaluate_transfer(encoder, data_dir, tasks)` reads the tasks in SentEval's
`data/downstream` layout (`transfer_readers`), encodes every distinct
sentence once (the encoder's `encode`, the same path as STS), and runs
SentEval's protocol for each task (`transfer_protocols`):

| task | protocol | features |
|---|---|---|
| MR, CR, SUBJ, MPQA | `inner_kfold`: 10-fold CV, L2 chosen by inner 10-fold CV | u |
| SST2 | `split_selection`: L2 chosen on dev, scored on test | u |
| TREC | `kfold_then_test`: L2 chosen by 10-fold CV on train, scored on test | u |
| MRPC | `kfold_then_test`, accuracy and F1 (class 1) | `[abs(u - v), u * v]` |

SentEval's MRPC features are `[|u - v|, u * v]` (`senteval/mrpc.py`); the
InferSent-style `[u, v, |u - v|, u * v]` is available as
`mrpc_features="concat"`. The classifier configuration is SentEval's
"paper" one by default (`TRANSFER_CONFIGS`: Adam, batch 64, tenacity 5,
epoch size 4, 10 folds, L2 in {1e-5, 1e-4, 1e-3, 1e-2}); `"fast"` is its
prototyping one (RMSprop, batch 128, tenacity 3, epoch size 2, 5 folds).

References:
    - [Conneau & Kiela, 2018](https://arxiv.org/abs/1803.05449): SentEval.
    - [Conneau et al., 2017](https://arxiv.org/abs/1705.02364): InferSent
      (the pair features).
    - [Gao et al., 2021](https://arxiv.org/abs/2104.08821): SimCSE,
      Appendix E (transfer tasks with SentEval's default configuration).
"""

import logging
import time

import numpy as np

from keras_sentemb import validation
from keras_sentemb.evaluation import transfer_protocols as protocols
from keras_sentemb.evaluation import transfer_readers as readers
from keras_sentemb.evaluation.sts import _encode
from keras_sentemb.evaluation.sts import _pooling_name
from keras_sentemb.evaluation.sts import keras_hub_encoder
from keras_sentemb.evaluation.sts import resolved_names

logger = logging.getLogger(__name__)

TASK_PROTOCOLS = {
    "MR": "inner_kfold",
    "CR": "inner_kfold",
    "SUBJ": "inner_kfold",
    "MPQA": "inner_kfold",
    "SST2": "split_selection",
    "TREC": "kfold_then_test",
    "MRPC": "kfold_then_test",
}
MRPC_FEATURES = ("senteval", "concat")


def pair_features(a, b, mode="senteval"):
    """Features of sentence pairs: `[|u - v|, u * v]` (SentEval) or `[u, v, |u - v|, u * v]`.

    Examples:

    >>> pair_features(np.array([[1.0, 2.0]]), np.array([[3.0, -1.0]])).tolist()
    [[2.0, 3.0, 3.0, -2.0]]
    >>> pair_features(np.array([[1.0]]), np.array([[3.0]]), "concat").tolist()
    [[1.0, 3.0, 2.0, 3.0]]
    """
    if mode not in MRPC_FEATURES:
        raise ValueError(f"`mrpc_features` must be one of {list(MRPC_FEATURES)}. Received: {mode!r}.")
    parts = [np.abs(a - b), a * b]
    if mode == "concat":
        parts = [a, b] + parts
    return np.concatenate(parts, axis=1)


def f1_binary(labels, predictions):
    """F1 x100 of class 1 (SentEval's MRPC F1), rounded to 2 decimals.

    Examples:

    >>> f1_binary([1, 1, 0, 0], [1, 0, 1, 0])
    50.0
    """
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    tp = int(np.sum((predictions == 1) & (labels == 1)))
    fp = int(np.sum((predictions == 1) & (labels == 0)))
    fn = int(np.sum((predictions == 0) & (labels == 1)))
    if tp == 0:
        return 0.0
    return round(100.0 * 2 * tp / (2 * tp + fp + fn), 2)


def _resolve_tasks(data_dir, tasks):
    if tasks is None:
        names = readers.available_transfer_tasks(data_dir)
        if not names:
            raise FileNotFoundError(
                f"No SentEval transfer task found in {data_dir}; expected e.g. "
                + ", ".join(str(p) for p in readers.task_files(data_dir, "SST2"))
            )
        return names
    if isinstance(tasks, str):
        tasks = tasks.split(",")
    return resolved_names(tasks, readers.resolve_transfer_task)


def _embed(encoder, texts, batch_size, pooling, encode_kwargs):
    """Vectors of `texts` (each distinct text encoded once), float32 `[n, dim]`."""

    unique = list(dict.fromkeys(texts))
    vectors = _encode(encoder, unique, batch_size, pooling, encode_kwargs)
    index = {t: i for i, t in enumerate(unique)}
    return np.asarray(vectors, dtype=np.float32), np.array([index[t] for t in texts], np.int64)


def _task_texts(task, splits):
    """Every text of a task to encode, in the order `_classify` takes their vectors."""
    if task == "MRPC":
        return [s for split in ("train", "test") for part in splits[split][:2] for s in part]
    return [s for split in splits.values() for s in split[0]]


def _classify(task, splits, vectors, rows, cfg, seed, mrpc_features):
    """Train and score one task's classifier under its `TASK_PROTOCOLS` protocol.

    `vectors[rows]` are the embeddings of `_task_texts(task, splits)`, in
    that order (`_embed`'s output). Returns the protocol's result dict
    (MRPC's also with `f1`).
    """
    protocol = TASK_PROTOCOLS[task]
    position = 0

    def take(count):  # the next `count` texts' vectors, in `_task_texts` order
        nonlocal position
        position += count
        return vectors[rows[position - count : position]]

    if protocol == "inner_kfold":
        sentences, labels = splits["all"]
        return protocols.inner_kfold(take(len(sentences)), labels, cfg, seed)
    if protocol == "split_selection":
        feats = {s: take(len(splits[s][0])) for s in ("train", "dev", "test")}
        return protocols.split_selection(
            feats["train"], splits["train"][1], feats["dev"], splits["dev"][1],
            feats["test"], splits["test"][1], cfg, seed,
        )
    if task == "MRPC":
        feats = {}
        for split in ("train", "test"):
            a_text, b_text, _ = splits[split]
            a, b = take(len(a_text)), take(len(b_text))
            feats[split] = pair_features(a, b, mrpc_features)
        out = protocols.kfold_then_test(
            feats["train"], splits["train"][2], feats["test"], splits["test"][2], cfg, seed
        )
        out["f1"] = f1_binary(splits["test"][2], out["predictions"])
        return out
    feats = {s: take(len(splits[s][0])) for s in ("train", "test")}
    return protocols.kfold_then_test(
        feats["train"], splits["train"][1], feats["test"], splits["test"][1], cfg, seed
    )


def evaluate_transfer(
    encoder,
    data_dir,
    tasks=None,
    pooling=None,
    seed=1111,
    config="paper",
    mrpc_features="senteval",
    batch_size=128,
    **encode_kwargs,
):
    """Evaluates frozen sentence vectors on SentEval's transfer tasks.

    Args:
        encoder: an object with `encode(sentences, batch_size=...,
            pooling=..., **kwargs)` (e.g. `SentenceEncoder`), a keras-hub
            `TextEmbedder`, or a callable `f(list[str]) -> array [n, dim]`.
        data_dir: str or path. SentEval's `data/downstream` folder (see
            `transfer_readers` for the layout).
        tasks: str (comma-separated), list of str, or None. Any of `"MR"`,
            `"CR"`, `"SUBJ"`, `"MPQA"`, `"SST2"`, `"TREC"`, `"MRPC"`; None
            runs every task whose files exist. Defaults to None.
        pooling: str or None. Passed to `encoder.encode` (the encoder's own
            pooling when None). Defaults to None.
        seed: int. Seeds the folds, the classifiers' initial weights and
            their minibatch order. Defaults to `1111` (SentEval's).
        config: str or dict. `"paper"` (SentEval's recommended setting, the
            one the papers report), `"fast"`, or a dict overriding `"paper"`
            keys (`kfold`, `optimizer`, `batch_size`, `tenacity`,
            `epoch_size`, `max_epoch`, `l2_regs`). Defaults to `"paper"`.
        mrpc_features: str. `"senteval"` (`[|u-v|, u*v]`, SentEval's) or
            `"concat"` (`[u, v, |u-v|, u*v]`). Defaults to `"senteval"`.
        batch_size: int. Encoding batch size. Defaults to `128`.
        **encode_kwargs: passed on to the encoder (e.g. `max_length=`).

    Returns:
        A JSON-serialisable dict: one entry per task (`acc`, `devacc`,
        `ndev`, `ntest`, `protocol`, the chosen `l2`, ...; MRPC also `f1`),
        `"avg"` (mean test accuracy over the tasks run) and `"protocol"`
        (the classifier configuration, seed, pooling, features and data
        folder). Accuracies are percentages rounded to 2 decimals.

    Raises:
        ValueError: for an unknown task, config or feature mode, or a
            malformed data line (file and line named).
        FileNotFoundError: when a task's files are missing (paths named).

    Examples:

    ```python
    result = evaluate_transfer(SentenceEncoder.from_preset("default"), "data/downstream",
                               tasks="SST2,TREC,MRPC")
    result["TREC"]["acc"], result["MRPC"]["f1"], result["avg"]
    ```

    References:
        - [Conneau & Kiela, 2018](https://arxiv.org/abs/1803.05449)
    """
    cfg = protocols.resolve_config(config)
    encoder = keras_hub_encoder(encoder)
    seed = validation.non_negative_int(seed, "seed")
    validation.positive_int(batch_size, "batch_size")
    if mrpc_features not in MRPC_FEATURES:
        raise ValueError(
            f"`mrpc_features` must be one of {list(MRPC_FEATURES)}. Received: {mrpc_features!r}."
        )
    names = _resolve_tasks(data_dir, tasks)
    data = {task: readers.read_transfer_task(data_dir, task) for task in names}

    results = {
        "protocol": {
            "name": f"senteval-{cfg['name']}",
            "classifier": "logistic regression (SentEval MLP, nhid 0)",
            "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.items() if k != "name"},
            "seed": seed,
            "pooling": _pooling_name(pooling, encoder),
            "mrpc_features": "[u, v, |u-v|, u*v]" if mrpc_features == "concat" else "[|u-v|, u*v]",
            "metric": "accuracy x100 (MRPC also F1 x100 of the paraphrase class)",
            "data": str(data_dir),
        }
    }
    for task in names:
        start = time.time()
        splits = data[task]
        protocol = TASK_PROTOCOLS[task]
        vectors, rows = _embed(encoder, _task_texts(task, splits), batch_size, pooling,
                               encode_kwargs)
        encoded = time.time() - start
        out = _classify(task, splits, vectors, rows, cfg, seed, mrpc_features)
        out.pop("predictions", None)
        out["protocol"] = protocol
        out["seconds"] = {"encode": round(encoded, 1), "classifier": round(time.time() - start - encoded, 1)}
        logger.info("%s: acc %.2f (%s, %.0f s)", task, out["acc"], protocol, time.time() - start)
        results[task] = out
    results["avg"] = {
        "acc": round(float(np.mean([results[t]["acc"] for t in names])), 2),
        "tasks": names,
    }
    return results
