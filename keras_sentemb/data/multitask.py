"""CS224N minBERT multitask data (SST-5, Quora, STS): readers and tf.data batches.

- `load_multitask_data`: the three tasks' train and dev sets from a folder.
- `multitask_batches` / `tokenize_multitask`: endless, step-indexed batches
  of every task for a training procedure (`schedule_position` defines the
  procedures' schedules), for `MultitaskModel.fit`.
- `pretraining_examples`: columns for contrastive pre-training with the
  `SimCSE` trainer.

The folder layout is the one of the CS224N minBERT project's `data/`:

```
ids-sst-train.csv  ids-sst-dev.csv   # <idx> id sentence sentiment (0-4)
sts-train.csv      sts-dev.csv       # <idx> id sentence1 sentence2 similarity (0-5)
quora-dev.csv                        # <idx> id sentence1 sentence2 is_duplicate (0/1)
```

Every file is tab-separated, with a header and a leading index column;
fields may be quoted (`csv` quoting). Rows whose label does not parse (or
that have the wrong number of fields) are skipped and counted: upstream
`quora-dev.csv` has 2 such rows.

The Quora train file is not available, so `quora-dev.csv` is split
deterministically into train and dev: a pair goes to dev when the first 8
hex digits of `sha1(id)` (the file's `id` column), as an integer modulo
1000, are below `1000 * quora_dev_fraction`. The split does not depend on
row order or on any random seed.
"""

import csv
import hashlib
import logging
import os
import random
import warnings
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_sentemb import validation
from keras_sentemb.data.batching import step_counter
from keras_sentemb.data.batching import without_autotuner

logger = logging.getLogger(__name__)

TASKS = ("sentiment", "paraphrase", "similarity")
PROCEDURES = ("average", "batch_round_robin", "epoch_round_robin", "pcgrad", "single")
PRETRAIN_MODES = ("none", "unsup", "paraphrase", "nli", "three_given")
# The text columns of each task's batches.
TASK_COLUMNS = {
    "sentiment": ("sentence",),
    "paraphrase": ("sentence1", "sentence2"),
    "similarity": ("sentence1", "sentence2"),
}
NUM_SENTIMENT_CLASSES = 5
FILES = {
    "sentiment": ("ids-sst-train.csv", "ids-sst-dev.csv"),
    "similarity": ("sts-train.csv", "sts-dev.csv"),
    "paraphrase": ("quora-dev.csv", None),
}
STSB_TEST_LEAKAGE_WARNING = (
    "multitask/sts-train.csv is a re-shuffle of all of STS-B and contains 961 "
    "STS-B *test* pairs: an encoder trained on it must never be reported on "
    "STS-B test (use sts-dev.csv / STS-B dev instead)."
)


def _read_rows(path, num_fields):
    """Rows of a tab-separated file with a header; malformed rows counted."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"multitask file not found: {path}")
    rows, bad = [], 0
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.reader(f, delimiter="\t")
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path} is empty; expected a header row.")
        for row in reader:
            if len(row) != num_fields:
                bad += 1
                continue
            rows.append(row)
    return rows, bad


def read_sst(path):
    """Read an `ids-sst-*.csv` file.

    Args:
        path: str or path. The file.

    Returns:
        `(examples, skipped)`: a list of `(id, sentence, label)` with the label
        an int in `[0, 5)`, and the number of malformed rows skipped.
    """
    rows, skipped = _read_rows(path, 4)
    out = []
    for row in rows:
        try:
            label = int(float(row[3]))
        except ValueError:
            skipped += 1
            continue
        sentence = row[2].strip()
        if not sentence or not 0 <= label < NUM_SENTIMENT_CLASSES:
            skipped += 1
            continue
        out.append((row[1], sentence, label))
    return out, skipped


def read_pair_file(path, low=0.0, high=5.0):
    """Read a `sts-*.csv` or `quora-*.csv` file.

    Args:
        path: str or path. The file.
        low: float. Smallest valid label. Defaults to `0.0`.
        high: float. Largest valid label. Defaults to `5.0`.

    Returns:
        `(examples, skipped)`: a list of `(id, sentence1, sentence2, label)`
        with a float label in `[low, high]`, and the number of malformed rows
        skipped (label missing or not a number, empty sentence, wrong number
        of fields).
    """
    rows, skipped = _read_rows(path, 5)
    out = []
    for row in rows:
        try:
            label = float(row[4])
        except ValueError:
            skipped += 1
            continue
        s1, s2 = row[2].strip(), row[3].strip()
        if not s1 or not s2 or not low <= label <= high:
            skipped += 1
            continue
        out.append((row[1], s1, s2, label))
    return out, skipped


def in_quora_dev(pair_id, fraction):
    """Whether the Quora pair `pair_id` belongs to our dev part (hash split)."""
    digest = hashlib.sha1(str(pair_id).encode("utf-8")).hexdigest()
    return int(digest[:8], 16) % 1000 < round(1000 * fraction)


def load_multitask_data(data_dir, quora_dev_fraction=0.1, verbose=True):
    """Load the three tasks' train and dev sets from a multitask folder.

    Args:
        data_dir: str or path. A folder laid out like minBERT's `data/`.
        quora_dev_fraction: float in (0, 1). Share of `quora-dev.csv` held out
            as the paraphrase dev set (hash split on the `id` column, see the
            module docstring). Defaults to `0.1`.
        verbose: bool. Log the skipped-row counts and the Quora split at
            INFO level (else DEBUG). Defaults to `True`.

    Returns:
        A dict with `"train"` and `"dev"` (each `{task: examples}`; sentiment
        examples are `(sentence, label)`, pair examples
        `(sentence1, sentence2, label)`) and `"skipped"` (`{file name: number
        of malformed rows skipped}`).
    """
    data_dir = Path(os.fspath(data_dir))
    if not data_dir.is_dir():
        raise FileNotFoundError(
            "`data_dir` must be a folder laid out like the minBERT project's data/ "
            f"(docs/data.md); received {data_dir}"
        )
    if not 0.0 < float(quora_dev_fraction) < 1.0:
        raise ValueError(
            "`quora_dev_fraction` must be in (0, 1); received "
            f"{quora_dev_fraction!r}"
        )
    skipped = {}
    train, dev = {}, {}
    for split, name in zip(("train", "dev"), FILES["sentiment"]):
        rows, bad = read_sst(data_dir / name)
        skipped[name] = bad
        (train if split == "train" else dev)["sentiment"] = [
            (s, y) for _, s, y in rows
        ]
    for split, name in zip(("train", "dev"), FILES["similarity"]):
        rows, bad = read_pair_file(data_dir / name, 0.0, 5.0)
        skipped[name] = bad
        (train if split == "train" else dev)["similarity"] = [
            (a, b, y) for _, a, b, y in rows
        ]
    name = FILES["paraphrase"][0]
    rows, bad = read_pair_file(data_dir / name, 0.0, 1.0)
    skipped[name] = bad
    train["paraphrase"], dev["paraphrase"] = [], []
    for pair_id, a, b, y in rows:
        part = "dev" if in_quora_dev(pair_id, quora_dev_fraction) else "train"
        (dev if part == "dev" else train)["paraphrase"].append((a, b, y))
    for task in TASKS:
        if not train[task] or not dev[task]:
            raise ValueError(
                f"No usable {task} examples in {data_dir} (train "
                f"{len(train[task])}, dev {len(dev[task])})."
            )
    log = logger.info if verbose else logger.debug
    for file_name, count in skipped.items():
        if count:
            log("%s: skipped %d malformed row(s)", file_name, count)
    log(
        "quora-dev.csv split by sha1(id) into %d train / %d dev pairs (dev "
        "fraction %s); the Quora train file is not available.",
        len(train["paraphrase"]), len(dev["paraphrase"]), quora_dev_fraction,
    )
    return {"train": train, "dev": dev, "skipped": skipped}


def warn_stsb_test_leakage():
    """Warn loudly that multitask/sts-train.csv holds STS-B test pairs."""
    warnings.warn(STSB_TEST_LEAKAGE_WARNING, UserWarning, stacklevel=2)


# ------------------------------------------------------------------ schedules
def check_procedure(procedure, single_task="similarity"):
    """Validate a training procedure (and the task of `"single"`)."""
    validation.choice(procedure, "procedure", PROCEDURES)
    if procedure == "single":
        validation.choice(single_task, "single_task", TASKS)
    return procedure


def trained_tasks(procedure, single_task="similarity"):
    """The tasks a procedure trains (all three, or `single_task`)."""
    check_procedure(procedure, single_task)
    return (single_task,) if procedure == "single" else TASKS


def schedule_position(procedure, step, task_index, steps_per_epoch=1, single_index=0,
                      num_tasks=len(TASKS)):
    """Whether task `task_index` is trained at `step`, and its batch index there.

    The one definition of the procedures' schedules, for Python ints and for
    int64 tensors alike (only `//`, `%` and `==` are used):

    - `"average"` / `"pcgrad"`: every task at every step; task batch `step`.
    - `"batch_round_robin"`: task `step % num_tasks`; its batch `step // num_tasks`.
    - `"epoch_round_robin"`: `steps_per_epoch` steps of one task (one
      down-sampled epoch), then the next; task `(step // steps_per_epoch) %
      num_tasks`, its batch `(step // (steps_per_epoch * num_tasks)) *
      steps_per_epoch + step % steps_per_epoch`.
    - `"single"`: task `single_index` only; its batch `step`.

    The batch index counts the steps at which that task was trained before,
    so each task reads its own data stream in order whatever the schedule.

    Args:
        procedure: str. One of `PROCEDURES`.
        step: int or int64 scalar tensor. 0-based optimizer step.
        task_index: int. Index of the task in `TASKS`.
        steps_per_epoch: int. Batches in one down-sampled task epoch (epoch
            round robin). Defaults to `1`.
        single_index: int. Index of the trained task of `"single"`.
            Defaults to `0`.
        num_tasks: int. Defaults to `3`.

    Returns:
        `(active, batch_index)`: bool (or bool tensor) and int (or tensor).
    """
    if procedure in ("average", "pcgrad"):
        return _as_bool(True, step), step
    if procedure == "batch_round_robin":
        return step % num_tasks == task_index, step // num_tasks
    if procedure == "epoch_round_robin":
        block = step // steps_per_epoch
        index = (block // num_tasks) * steps_per_epoch + step % steps_per_epoch
        return block % num_tasks == task_index, index
    if procedure == "single":
        return _as_bool(task_index == single_index, step), step
    raise ValueError(f"`procedure` must be one of {PROCEDURES}. Received: {procedure!r}.")


def _as_bool(value, like):
    if isinstance(like, tf.Tensor):
        return tf.constant(bool(value))
    return bool(value)


def task_schedule(procedure, steps, steps_per_epoch=1, single_task="similarity"):
    """The tasks trained at each of the first `steps` steps (a Python list).

    Args:
        procedure: str. One of `PROCEDURES`.
        steps: int. Number of steps.
        steps_per_epoch: int. For `"epoch_round_robin"` (see
            `schedule_position`). Defaults to `1`.
        single_task: str. For `"single"`. Defaults to `"similarity"`.

    Returns:
        list of `steps` tuples of task names.

    Examples:

    >>> task_schedule("batch_round_robin", 4)
    [('sentiment',), ('paraphrase',), ('similarity',), ('sentiment',)]
    """
    check_procedure(procedure, single_task)
    steps_per_epoch = validation.positive_int(steps_per_epoch, "steps_per_epoch")
    single_index = TASKS.index(single_task) if procedure == "single" else 0
    return [
        tuple(
            t for i, t in enumerate(TASKS)
            if schedule_position(procedure, s, i, steps_per_epoch, single_index)[0]
        )
        for s in range(validation.non_negative_int(steps, "steps"))
    ]


def schedule_sizes(train, procedure, batch_size, single_task="similarity"):
    """`(batch_size, epoch_size, steps_per_epoch)` of a procedure on `train`.

    Every trained task is down-sampled to the smallest trained set
    (`epoch_size` rows per task epoch, a fresh random subset each epoch);
    `steps_per_epoch = epoch_size // batch_size`. With fewer rows than
    `batch_size`, every batch is a whole (down-sampled) epoch.
    """
    tasks = trained_tasks(procedure, single_task)
    batch_size = validation.positive_int(batch_size, "batch_size")
    epoch_size = min(len(train[t]) for t in tasks)
    if epoch_size == 0:
        raise ValueError(f"No training examples for {[t for t in tasks if not train[t]]}.")
    if epoch_size < batch_size:
        logger.warning(
            "The smallest trained task has %d examples, fewer than batch_size=%d: "
            "every batch holds %d.", epoch_size, batch_size, epoch_size,
        )
        batch_size = epoch_size
    return batch_size, epoch_size, epoch_size // batch_size


def multitask_batches(train, procedure="average", batch_size=16, seed=0, start_step=0,
                      single_task="similarity"):
    """An endless, step-indexed `tf.data.Dataset` of multitask string batches.

    Every element holds every task (a fixed structure, so one trace of the
    training step serves every schedule):

    ```
    {"sentiment":  {"sentence": str [B], "label": int32 [B], "mask": float32 [B]},
     "paraphrase": {"sentence1": str [B], "sentence2": str [B], "label": float32 [B],
                    "mask": float32 [B]},
     "similarity": {... as paraphrase, label = score 0-5 ...}}
    ```

    The procedure decides which tasks are trained at step `s`
    (`schedule_position`): a trained task has its next batch and `mask` 1;
    the others have `B` placeholder rows (empty sentences, label 0) and
    `mask` 0, so their losses are exactly 0. Each task reads its own stream:
    its `k`-th batch is rows `k % steps_per_epoch` of epoch `k //
    steps_per_epoch`, an epoch being the first `epoch_size` rows of a
    permutation drawn from `(seed, epoch, task)` (down-sampling to the
    smallest trained set, `schedule_sizes`). Element `s` is a pure function
    of `(seed, s)`, so a run resumed at `start_step` sees exactly the
    batches of the uninterrupted run.

    Args:
        train: dict `{task: examples}` (`load_multitask_data(...)["train"]`).
        procedure: str. One of `PROCEDURES`. Defaults to `"average"`.
        batch_size: int. Rows per task batch. Defaults to `16`.
        seed: int. Defaults to `0`.
        start_step: int. Index of the first element. Defaults to `0`.
        single_task: str. The task of `"single"`. Defaults to `"similarity"`.

    Returns:
        A `tf.data.Dataset` of the dicts above.
    """
    tasks = trained_tasks(procedure, single_task)
    batch_size, epoch_size, per_epoch = schedule_sizes(train, procedure, batch_size, single_task)
    seed = validation.non_negative_int(seed, "seed")
    single_index = TASKS.index(single_task) if procedure == "single" else 0
    tensors = {}
    for task in tasks:
        rows = train[task]
        columns = {name: [r[i] for r in rows] for i, name in enumerate(TASK_COLUMNS[task])}
        tensors[task] = {k: tf.constant(v, tf.string) for k, v in columns.items()}
        labels = [r[-1] for r in rows]
        dtype = np.int32 if task == "sentiment" else np.float32
        tensors[task]["label"] = tf.constant(np.asarray(labels, dtype))
    b = batch_size

    def task_batch(task, step):
        index = TASKS.index(task)
        active, k = schedule_position(procedure, step, index, per_epoch, single_index)
        label_dtype = tf.int32 if task == "sentiment" else tf.float32
        if task not in tensors:
            out = {name: tf.fill([b], "") for name in TASK_COLUMNS[task]}
            out["label"] = tf.zeros([b], label_dtype)
            out["mask"] = tf.zeros([b], tf.float32)
            return out
        epoch = k // per_epoch
        first = (k % per_epoch) * b
        n = len(train[task])
        order = tf.random.experimental.stateless_shuffle(
            tf.range(n, dtype=tf.int64),
            seed=tf.stack([tf.constant(seed, tf.int64), epoch * len(TASKS) + index]),
        )
        rows = order[:epoch_size][first : first + b]
        out = {}
        for name in TASK_COLUMNS[task]:
            out[name] = tf.ensure_shape(
                tf.where(active, tf.gather(tensors[task][name], rows), tf.fill([b], "")), [b]
            )
        label = tf.gather(tensors[task]["label"], rows)
        out["label"] = tf.ensure_shape(tf.where(active, label, tf.zeros_like(label)), [b])
        out["mask"] = tf.fill([b], tf.cast(active, tf.float32))
        return out

    def make_element(step):
        return {task: task_batch(task, step) for task in TASKS}

    steps = step_counter(validation.non_negative_int(start_step, "start_step"))
    return steps.map(make_element, num_parallel_calls=tf.data.AUTOTUNE)


def tokenize_multitask(encoder, dataset, max_length=None):
    """Pack the text columns of `multitask_batches` elements into model inputs.

    Each text column becomes `{"token_ids", "padding_mask", "segment_ids"}`
    padded to its own longest row (placeholder rows pack to `[CLS] [SEP]`);
    labels and masks pass through.
    """

    def pack(element):
        out = {}
        for task, batch in element.items():
            out[task] = dict(batch)
            for name in TASK_COLUMNS[task]:
                out[task][name] = encoder.preprocess(batch[name], max_length)
        return out

    return without_autotuner(
        dataset.map(pack, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    )


# ---------------------------------------------------------------- pre-training
def pretraining_examples(mode, train, nli_triplets=None, seed=0):
    """Columns of raw strings for contrastive pre-training (the `SimCSE` trainer).

    - `"unsup"`: every distinct sentence of the three train sets (in order of
      appearance), `{"sentence": [...]}` for unsupervised SimCSE.
    - `"paraphrase"`: Quora paraphrase pairs as (anchor, positive); the hard
      negative of each anchor is a question it was labelled *not* a
      paraphrase of when there is one, else a random question from a
      non-paraphrase pair (seeded); `{"sent0", "sent1", "hard_neg"}` for
      supervised SimCSE.
    - `"nli"`: `(premise, entailment, contradiction)` triplets (read with
      `keras_sentemb.data.nli.read_nli_triplets`), the same columns.

    Args:
        mode: str. `"unsup"`, `"paraphrase"` or `"nli"`.
        train: dict `{task: examples}` (`load_multitask_data(...)["train"]`).
        nli_triplets: list of `(anchor, positive, negative)` (for `"nli"`).
        seed: int. Seed of the random hard negatives. Defaults to `0`.

    Returns:
        dict of equally long lists of str.
    """
    if mode == "unsup":
        seen, sentences = set(), []
        texts = [s for s, _ in train["sentiment"]]
        for task in ("paraphrase", "similarity"):
            texts.extend(s for a, b, _ in train[task] for s in (a, b))
        for s in texts:
            if s not in seen:
                seen.add(s)
                sentences.append(s)
        return {"sentence": sentences}
    if mode == "paraphrase":
        rng = random.Random(seed)
        pairs = train["paraphrase"]
        negative_partner = {}
        negative_pool = []
        for a, b, y in pairs:
            if y < 0.5:
                negative_partner.setdefault(a, b)
                negative_partner.setdefault(b, a)
                negative_pool.append(b)
        if not negative_pool:
            raise ValueError("Paraphrase pre-training needs non-paraphrase pairs.")
        columns = {"sent0": [], "sent1": [], "hard_neg": []}
        for a, b, y in pairs:
            if y >= 0.5:
                columns["sent0"].append(a)
                columns["sent1"].append(b)
                columns["hard_neg"].append(negative_partner.get(a) or rng.choice(negative_pool))
        if not columns["sent0"]:
            raise ValueError("Paraphrase pre-training needs paraphrase pairs.")
        return columns
    if mode == "nli":
        if not nli_triplets:
            raise ValueError("NLI pre-training needs `nli_triplets`.")
        return {
            "sent0": [t[0] for t in nli_triplets],
            "sent1": [t[1] for t in nli_triplets],
            "hard_neg": [t[2] for t in nli_triplets],
        }
    raise ValueError(f"`mode` must be one of {PRETRAIN_MODES[1:4]}. Received: {mode!r}.")
