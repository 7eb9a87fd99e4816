"""Streamed multitask data: each task's rows read while training runs.

`fit_multitask` reads a minBERT-layout folder into memory
(`keras_sentemb.data.multitask`). Task data too large for that is given as
a dict, one stream per task:

```python
keras_sentemb.fit_multitask({
    "sentiment": keras_sentemb.streamed("sst/*.tsv", columns=("sentence", "sentiment")),
    "paraphrase": "quora/part-*.jsonl",           # sentence1, sentence2, label
    "similarity": "sts/part-*.jsonl",             # sentence1, sentence2, label (0-5)
}, steps=10_000, dev="stsb", pretrain="none")
```

Columns: sentiment `(sentence, label)` with labels 0-4; paraphrase and
similarity `(sentence1, sentence2, label)` with labels in [0, 1] and [0, 5]
(`.jsonl` keys and `.csv` headers by these names, `.tsv` columns in this
order, or `columns=`). Rows whose label does not parse or is out of range
are skipped. A list of rows is streamed from memory.

What differs from the folder, by construction:

- each task reads its own endless shuffled stream, one batch per step it
  is trained at; there is no down-sampling to the smallest task (its size
  is not known), so `"epoch_round_robin"` (epochs of that size) is refused;
- `"batch_round_robin"` takes the next batch of the scheduled task's
  stream (each stream is read in order, one batch per step its task is
  trained at), as the folder's schedule does;
- the dev sets are not in the data: `dev` is an STS set (`"stsb"`, a
  path, pairs) or None, not `"multitask"`;
- pre-training `"unsup"` draws the sentences of all three streams through
  one shuffle buffer (no duplicate in a batch, not de-duplicated across
  the corpus); `"nli"` needs `nli_file`; `"paraphrase"` (every question's
  non-paraphrase partner) and `"three_given"` (epochs of each set) need the
  whole data and are refused.
"""

import tensorflow as tf

from keras_sentemb.data.batching import step_counter
from keras_sentemb.data.labeled_streams import class_labels
from keras_sentemb.data.labeled_streams import score_labels
from keras_sentemb.data.multitask import NUM_SENTIMENT_CLASSES
from keras_sentemb.data.multitask import TASK_COLUMNS
from keras_sentemb.data.multitask import TASKS
from keras_sentemb.data.stream_batches import Mixture
from keras_sentemb.data.stream_batches import as_stream
from keras_sentemb.data.stream_batches import stream_batches
from keras_sentemb.data.stream_batches import streamed

STREAM_PROCEDURES = ("average", "pcgrad", "batch_round_robin", "single")
STREAM_PRETRAIN = ("none", "unsup", "nli")


def task_labels(task):
    """The label parser of a task (see the module docstring)."""
    if task == "sentiment":
        return class_labels(NUM_SENTIMENT_CLASSES)
    return score_labels(0.0, 1.0 if task == "paraphrase" else 5.0)


def _as_task_stream(task, value):
    if isinstance(value, (list, tuple)):
        rows = [tuple(r) for r in value]
        width = len(TASK_COLUMNS[task]) + 1
        if not rows or any(len(r) != width for r in rows):
            raise ValueError(f"The {task} rows must be a non-empty list of {width}-tuples "
                             f"{TASK_COLUMNS[task] + ('label',)}.")
        names = TASK_COLUMNS[task] + ("label",)
        columns = {n: tf.constant([str(r[i]) for r in rows]) for i, n in enumerate(names)}
        return streamed(tf.data.Dataset.from_tensor_slices(columns))
    stream = as_stream(value)
    return stream if stream is not None else streamed(value)


def task_streams(data, procedure, single_task="similarity"):
    """`data` as `{task: stream}` when it is a dict of task data, else None (a folder).

    Args:
        data: the `data` argument of `fit_multitask`.
        procedure: str. The training procedure (must be one of
            `STREAM_PROCEDURES`).
        single_task: str. The task of `"single"`.
    """
    if not isinstance(data, dict):
        return None
    unknown = sorted(set(data) - set(TASKS))
    if unknown:
        raise ValueError(f"Streamed multitask data is a dict task -> data; unknown tasks "
                         f"{unknown} (the tasks are {list(TASKS)}).")
    if procedure not in STREAM_PROCEDURES:
        raise ValueError(f"procedure={procedure!r} counts epochs of the smallest task, whose "
                         f"size a stream does not tell; streamed tasks train with "
                         f"{list(STREAM_PROCEDURES)}.")
    needed = (single_task,) if procedure == "single" else TASKS
    missing = [t for t in needed if t not in data]
    if missing:
        raise ValueError(f"procedure={procedure!r} trains {list(needed)}; the data has no "
                         f"{missing}.")
    return {t: _as_task_stream(t, data[t]) for t in needed}


def _placeholder(task, b):
    out = {name: tf.fill([b], "") for name in TASK_COLUMNS[task]}
    out["label"] = tf.zeros([b], tf.int32 if task == "sentiment" else tf.float32)
    out["mask"] = tf.zeros([b], tf.float32)
    return out


def streamed_multitask_batches(streams, procedure, batch_size, seed=0, start_step=0,
                               single_task="similarity", workers=1, no_duplicates=()):
    """Endless multitask string batches (the layout of `multitask_batches`) from task streams.

    Args:
        streams: dict task -> stream (`task_streams`).
        procedure: str. One of `STREAM_PROCEDURES`.
        batch_size: int. Rows per task batch.
        seed: int. Defaults to `0`.
        start_step: int. Index of the first element (a resumed run).
        single_task: str. The task of `"single"`.
        workers: see `stream_batches`.
        no_duplicates: tuple of str. Tasks whose batches hold no text twice
            (an in-batch loss reads them: the fusion update's similarity).
    """
    b = int(batch_size)

    def task_elements(task):
        ds = stream_batches(streams[task], TASK_COLUMNS[task], b, seed=seed + TASKS.index(task),
                            no_duplicates=task in no_duplicates, workers=workers,
                            labels={"label": task_labels(task)})

        @tf.autograph.experimental.do_not_convert
        def full(batch):
            out = {t: _placeholder(t, b) for t in TASKS}
            out[task] = dict(batch, mask=tf.ones([b], tf.float32))
            return out

        return ds.map(full)

    if procedure == "single":
        ds = task_elements(single_task)
    elif procedure == "batch_round_robin":
        @tf.autograph.experimental.do_not_convert
        def scheduled(step):
            return step % len(TASKS)

        choice = step_counter().map(scheduled)
        ds = tf.data.Dataset.choose_from_datasets([task_elements(t) for t in TASKS], choice)
    else:  # every task at every step
        @tf.autograph.experimental.do_not_convert
        def merge(*elements):
            return {t: element[t] for t, element in zip(TASKS, elements)}

        ds = tf.data.Dataset.zip(tuple(task_elements(t) for t in TASKS)).map(merge)
    return ds.skip(int(start_step)) if start_step else ds


class TaskSentences:
    """The sentences of several task streams as one stream of sentences (for pre-training).

    Each row of each task gives its text columns as sentences; the tasks'
    sentences are drawn at random (seeded) into one stream.

    Args:
        streams: dict task -> stream.
    """

    def __init__(self, streams):
        for task, stream in streams.items():
            if isinstance(stream, Mixture):
                raise ValueError(f"Pre-training reads the {task} data as one stream; give a "
                                 "source, not a Mixture.")
        self.streams = streams
        self.files = [f for s in streams.values() for f in s.files]
        self.size = None
        self.infinite = False
        self.options = next(iter(streams.values())).options
        self.where = ", ".join(s.where for s in streams.values())

    def __repr__(self):
        return f"TaskSentences({list(self.streams)})"

    def rows(self, names, seed=None, cycle_length=8, shard=None, scan=None, counter=None):
        """The tasks' sentences drawn at random into one stream; `counter` counts their rows."""
        parts = []
        for task, stream in self.streams.items():
            columns = TASK_COLUMNS[task]
            rows = stream.rows(columns, seed=seed, shard=shard, scan=scan, counter=counter)
            parts.append(rows.flat_map(lambda r, columns=columns: tf.data.Dataset.from_tensor_slices(
                {names[0]: tf.stack([r[c] for c in columns])})))
        return tf.data.Dataset.sample_from_datasets(parts, seed=seed,
                                                    stop_on_empty_dataset=False)

    def parts(self, names):
        """Every task's files, raw, with the task's columns."""
        return [part for task, stream in self.streams.items()
                for part in stream.parts(TASK_COLUMNS[task])]

    def wanted(self, names):
        return tuple(c for task in self.streams for c in TASK_COLUMNS[task])

    def fields(self):
        return None
