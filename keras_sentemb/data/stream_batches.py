"""Batches from stream sources: shuffle buffer, no duplicate texts, mixing, sharding, resume.

- **Shuffling.** Files are read in a seeded order (reshuffled each epoch),
  several at a time, and rows pass a shuffle buffer (`shuffle_buffer`
  rows, default 10,000): memory stays constant whatever the corpus size.
- **No duplicates.** With an in-batch loss, the same text twice in one
  batch is a false negative: the row is its own positive and a negative at
  once. With `no_duplicates=True` (the default for in-batch methods) a row
  whose text already occurs in the batch is held back for a later batch
  (sentence-transformers' `NoDuplicatesBatchSampler` does the same).
- **Mixing.** `Mixture({"name": (source, weight), ...})` draws every batch
  from one dataset, chosen round-robin or in proportion to the weights: a
  batch that mixes datasets lets the loss tell the datasets apart instead
  of the sentences (sentence-transformers' round-robin and proportional
  batch samplers).
- **Resume.** The stream is a pure function of the seed: a run resumed at
  step `s` skips the first `s` batches (read, not tokenized) and sees the
  batch the uninterrupted run would have seen.
- **Workers.** Under a multi-worker strategy each worker reads its own
  files (worker `i` of `W` reads files `i, i + W, ...`; tf.data's
  auto-sharding is off, as it cannot see through the no-duplicates step);
  with fewer files than workers, or a source that is not a set of files,
  every worker reads all rows and keeps its share (tf.data's DATA
  auto-sharding), with a one-line notice.
"""

import logging

import tensorflow as tf

from keras_sentemb import compat
from keras_sentemb import validation
from keras_sentemb.data.batching import step_counter
from keras_sentemb.data.row_accounting import BAD_LABEL
from keras_sentemb.data.row_accounting import active_accounting
from keras_sentemb.data.row_accounting import new_counter
from keras_sentemb.data.stream_checks import check_stream
from keras_sentemb.data.stream_checks import parse_labels
from keras_sentemb.data.streams import DatasetSource
from keras_sentemb.data.streams import TextFiles
from keras_sentemb.data.streams import stream_source

logger = logging.getLogger(__name__)

SHUFFLE_BUFFER = 10_000
MIXING = ("proportional", "round_robin")
# Rows waiting for a batch without a duplicate: at most this many batches' worth.
CARRY_BATCHES = 8


class StreamOptions:
    """How a stream is batched (held by a source: see `streamed`)."""

    def __init__(self, shuffle_buffer=SHUFFLE_BUFFER, no_duplicates=None):
        self.shuffle_buffer = validation.positive_int(shuffle_buffer, "shuffle_buffer")
        if no_duplicates not in (None, True, False):
            raise ValueError(f"`no_duplicates` must be True, False or None; received {no_duplicates!r}.")
        self.no_duplicates = no_duplicates


def streamed(data, columns=None, format=None, shuffle_buffer=SHUFFLE_BUFFER, no_duplicates=None):
    """Training data to stream, with its batching options.

    Args:
        data: a glob, a path, a list of paths, or a `tf.data.Dataset`.
        columns: str or tuple or None. The column(s) of the text (see
            `TextFiles`).
        format: str or None. The file format (see `TextFiles`).
        shuffle_buffer: int. Rows in the shuffle buffer. Defaults to `10000`.
        no_duplicates: bool or None. Hold back a row whose text is already
            in the batch. None: on for methods with an in-batch loss.

    Returns:
        A stream source for any `fit_*` function.

    Examples:

    ```python
    data = keras_sentemb.streamed("corpus/part-*.jsonl", columns="text")
    keras_sentemb.fit_simcse(data, steps=10_000)
    ```
    """
    if isinstance(data, tf.data.Dataset):
        source = DatasetSource(data, columns)
    elif isinstance(data, (TextFiles, DatasetSource)):
        source = data
    else:
        source = TextFiles(data, columns, format)
    source.options = StreamOptions(shuffle_buffer, no_duplicates)
    return source


class Mixture:
    """Several datasets mixed batch by batch: each batch comes from one of them.

    Args:
        datasets: dict name -> `(source, weight)` (or a bare source,
            weight 1). A source is anything `streamed` takes (what
            `streamed` returned keeps its own options), or a list of str
            (kept in memory, streamed through the same buffer).
        mode: str. `"proportional"` (a dataset is drawn for each batch
            with probability proportional to its weight) or
            `"round_robin"` (the datasets in turn; weights unused).
            Defaults to `"proportional"`.
        shuffle_buffer: int. As in `streamed`, for every dataset. Defaults to
            `10000`.
        no_duplicates: bool or None. As in `streamed`, for every dataset.
            Defaults to `None`.

    Examples:

    ```python
    data = keras_sentemb.Mixture({
        "wiki": ("wiki/*.txt", 3.0),
        "news": ("news/*.jsonl", 1.0),
    })
    keras_sentemb.fit_simcse(data, steps=10_000)
    ```
    """

    def __init__(self, datasets, mode="proportional", shuffle_buffer=SHUFFLE_BUFFER,
                 no_duplicates=None):
        if not isinstance(datasets, dict) or not datasets:
            raise ValueError("`datasets` must be a non-empty dict name -> (source, weight).")
        validation.choice(mode, "mode", MIXING)
        self.mode = mode
        self.sources, self.weights = {}, {}
        for name, value in datasets.items():
            if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], (int, float)):
                source, weight = value
            else:
                source, weight = value, 1.0
            weight = float(weight)
            if not weight > 0:
                raise ValueError(f"The weight of dataset {name!r} must be > 0; received {weight}.")
            if hasattr(source, "options"):  # made by `streamed`: its own options
                pass
            elif isinstance(source, (list, tuple)):
                source = streamed(tf.data.Dataset.from_tensor_slices(list(source)),
                                  shuffle_buffer=shuffle_buffer, no_duplicates=no_duplicates)
            else:
                source = streamed(source, shuffle_buffer=shuffle_buffer,
                                  no_duplicates=no_duplicates)
            self.sources[name], self.weights[name] = source, weight
        self.options = StreamOptions(shuffle_buffer, no_duplicates)
        sizes = [s.size for s in self.sources.values()]
        self.size = None if None in sizes else sum(sizes)
        self.files = [f for s in self.sources.values() for f in s.files]

    def __repr__(self):
        return f"Mixture({self.weights}, mode={self.mode!r})"


def as_stream(data, columns=None, tfds=False):
    """`data` as a stream (`Mixture` or source), or None for in-memory data; dicts become mixtures."""
    if isinstance(data, Mixture):
        return data
    if isinstance(data, dict):
        return Mixture(data)
    source = stream_source(data, columns, tfds=tfds)
    if source is not None and not hasattr(source, "options"):
        source.options = StreamOptions()
    return source


def _shuffled_rows(source, names, seed, shuffle_buffer, shard=None, counter=None):
    """Endless shuffled rows: each pass over the source shuffled on its own, then the next.

    Shuffling before repeating keeps passes apart: every row is used once
    per pass (epoch) before any is used again. `counter` (a `RowCounter` or
    None) counts the rows read and skipped.
    """
    rows = source.rows(names, seed=seed, shard=shard, counter=counter)
    rows = rows.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    return rows if getattr(source, "infinite", False) else rows.repeat()


def unique_batches(rows, batch_size, names):
    """Batches of `batch_size` rows in which no text occurs twice (in any column of `names`).

    A row whose text already occurs in an earlier row of the window waits
    for a later batch (kept in arrival order); at most `CARRY_BATCHES`
    batches' worth of rows wait, beyond that the newest are dropped (only a
    stream of mostly duplicates gets there). Other columns of the rows
    (labels) travel with them.
    """
    cap = CARRY_BATCHES * batch_size
    chunks = rows.batch(batch_size)
    spec = rows.element_spec
    init = {n: tf.zeros([0], spec[n].dtype) for n in spec}

    def step(carry, chunk):
        window = {n: tf.concat([carry[n], chunk[n]], 0) for n in spec}
        texts = tf.stack([window[n] for n in names], axis=1)  # [m, columns]
        m = tf.shape(texts)[0]
        flat = tf.reshape(texts, [-1])
        row_of = tf.repeat(tf.range(m), len(names))
        _, idx = tf.unique(flat)
        first = tf.math.unsorted_segment_min(row_of, idx, tf.reduce_max(idx) + 1)
        repeated = tf.reshape(tf.gather(first, idx) < row_of, [m, len(names)])
        accepted = tf.where(tf.logical_not(tf.reduce_any(repeated, axis=1)))[:, 0]
        full = tf.size(accepted) >= batch_size
        taken = accepted[:batch_size]
        keep = tf.tensor_scatter_nd_update(
            tf.ones([m], tf.bool), taken[:, None], tf.zeros_like(taken, tf.bool))
        keep = tf.cond(full, lambda: keep, lambda: tf.ones([m], tf.bool))
        rest = tf.where(keep)[:, 0][:cap]
        new_carry = {n: tf.gather(window[n], rest) for n in spec}
        batch = {n: tf.gather(window[n], tf.cond(full, lambda: taken, lambda: taken[:0]))
                 for n in spec}
        return new_carry, (full, batch)

    with compat.functions_kept_out_of_the_global_graph():
        out = chunks.scan(init, step).filter(lambda full, batch: full)
    return out.map(lambda full, batch: {n: tf.ensure_shape(batch[n], [batch_size])
                                        for n in spec})


def head_rows(stream, names, n):
    """The first `n` rows of a stream in file order (no shuffling), as tuples of str.

    For what must be set aside before training (held-out pairs) or looked
    at once (a vocabulary sample): it reads `n` rows, not the whole stream.
    """
    sources = stream.sources.values() if isinstance(stream, Mixture) else [stream]
    out = []
    for source in sources:
        for row in source.rows(names).take(n - len(out)).as_numpy_iterator():
            out.append(tuple(row[k].decode("utf-8", "replace") for k in names))
        if len(out) >= n:
            break
    return out


def _without(rows, exclude):
    """`rows` minus those whose text in a column is one of `exclude[column]`."""
    tables = {}
    for column, texts in (exclude or {}).items():
        texts = sorted(set(texts))
        if texts:
            tables[column] = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    tf.constant(texts), tf.ones([len(texts)], tf.int32)), 0)
    if not tables:
        return rows

    def keep(row):
        hits = [table.lookup(row[c]) for c, table in tables.items()]
        return tf.equal(tf.add_n(hits), 0)

    return rows.filter(keep)


def _labelled(rows, labels, counter=None):
    """`rows` with each label column parsed (`labels[name]`: text -> (value, ok)); bad rows out.

    `counter` (a `RowCounter` or None) counts the rows left out.
    """
    if not labels:
        return rows

    @tf.autograph.experimental.do_not_convert  # plain TensorFlow ops
    def parse(row):
        out, ok = parse_labels(row, labels)
        if counter is not None:
            with tf.control_dependencies([counter.count(tf.where(ok, -1, BAD_LABEL))]):
                ok = tf.identity(ok)
        return out, ok

    @tf.autograph.experimental.do_not_convert
    def parsed(row, ok):
        return ok

    @tf.autograph.experimental.do_not_convert
    def value(row, ok):
        return row

    return rows.map(parse).filter(parsed).map(value)


def _source_batches(source, names, batch_size, seed, no_duplicates, shard=None, exclude=None,
                    labels=None):
    options = source.options
    dedupe = no_duplicates if options.no_duplicates is None else options.no_duplicates
    columns = tuple(names) + tuple(labels or ())
    counter = new_counter(source, columns)
    rows = _shuffled_rows(source, columns, seed, options.shuffle_buffer, shard, counter)
    rows = _without(_labelled(rows, labels, counter), exclude)
    if dedupe:
        return unique_batches(rows, batch_size, names)
    return rows.batch(batch_size, drop_remainder=True)


def stream_batches(stream, names, batch_size, seed=0, start_step=0, no_duplicates=False,
                   workers=1, exclude=None, labels=None):
    """An endless dataset of string batches `{name: tf.string [batch_size]}` from a stream.

    Args:
        stream: a source (see `keras_sentemb.data.streams`) or a `Mixture`.
        names: tuple of str. The columns.
        batch_size: int. Rows per (global) batch.
        seed: int. Defaults to `0`.
        start_step: int. Index of the first batch (the earlier ones are
            skipped: a resumed run sees the batches the whole run would).
        no_duplicates: bool. The method's default when the source leaves
            it None.
        workers: int or `(count, index)`. Workers of the strategy and this
            worker's index (see `worker_shard`); an int is a count with
            index 0.
        exclude: dict column -> texts, or None. Rows with one of these
            texts in that column are left out (held-out data).
        labels: dict column -> parser, or None. Columns read beside
            `names` and parsed into numbers (`text -> (value, ok)`, see
            `keras_sentemb.data.labeled_streams`); a row whose label does
            not parse is skipped. They take no part in the no-duplicates
            rule.

    Raises:
        DataError: a source's first records show it cannot train (see
            `keras_sentemb.data.stream_checks`); one line.
    """
    batch_size = validation.positive_int(batch_size, "batch_size")
    seed = int(seed or 0)
    check_stream(stream, names, batch_size, labels, no_duplicates, _max_skipped())
    policy, shard = _sharding(stream, workers)
    if isinstance(stream, Mixture):
        parts = [
            _source_batches(s, names, batch_size, seed + 1000 * i, no_duplicates, shard, exclude,
                            labels)
            for i, s in enumerate(stream.sources.values())
        ]
        ds = _choose(parts, list(stream.weights.values()), stream.mode, seed)
    else:
        ds = _source_batches(stream, names, batch_size, seed, no_duplicates, shard, exclude,
                             labels)
    if start_step:
        ds = ds.skip(int(start_step))
    return _with_policy(ds, policy)


def _max_skipped():
    """The share of skipped rows the training run being built allows (None outside one)."""
    state = active_accounting()
    return None if state is None else state.max_skipped


def _choose(parts, weights, mode, seed):
    n = len(parts)
    if n == 1:
        return parts[0]
    logits = tf.math.log(tf.constant([weights], tf.float32))

    def pick(step):
        if mode == "round_robin":
            return step % n
        draw = tf.random.stateless_categorical(
            logits, 1, seed=tf.stack([tf.constant(seed, tf.int64), step]))
        return draw[0, 0]

    choice = step_counter().map(pick)
    return tf.data.Dataset.choose_from_datasets(parts, choice)


def worker_shard(strategy):
    """`(workers, this worker's index)` of a `tf.distribute` strategy; `(1, 0)` on one machine.

    The index follows tf.distribute's input pipelines: the chief first,
    then the workers in order.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1, 0
    spec = resolver.cluster_spec().as_dict()
    chiefs, workers = len(spec.get("chief", ())), len(spec.get("worker", ()))
    if chiefs + workers <= 1:
        return 1, 0
    task_type, task_id = resolver.task_type, int(resolver.task_id or 0)
    index = 0 if task_type == "chief" else chiefs + task_id
    return chiefs + workers, index


def shard_policy(stream, workers):
    """FILE when every worker gets a file of its own, else DATA (with a notice)."""
    policy = tf.data.experimental.AutoShardPolicy
    if workers <= 1:
        return policy.AUTO
    sources = stream.sources.values() if isinstance(stream, Mixture) else [stream]
    sources = [getattr(s, "source", s) for s in sources]  # through TripletPairs
    readable = all(isinstance(s, TextFiles) for s in sources)
    files = min(len(s.files) for s in sources) if readable else 0
    if readable and files >= workers:
        return policy.FILE
    logger.warning(
        "%d worker(s) and %s: sharding by data (every worker reads all rows and keeps its share)",
        workers, f"{files} file(s)" if readable else "a source that is not a set of files",
    )
    return policy.DATA


def _sharding(stream, workers):
    """`(tf.data auto-shard policy, (count, index) of this worker's files or None)`."""
    count, index = (workers, 0) if isinstance(workers, int) else workers
    policy = shard_policy(stream, count)
    if policy == tf.data.experimental.AutoShardPolicy.FILE:  # sharded here, by file
        return tf.data.experimental.AutoShardPolicy.OFF, (count, index)
    return policy, None


def _with_policy(ds, policy):
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = policy
    return ds.with_options(options)


def ct_stream_batches(stream, batch_size, negatives_per_positive, seed=0, start_step=0,
                      layout="official", workers=1):
    """Contrastive Tension's batches from a stream (see `ct_pair_dataset` for the layout).

    Each group of `K + 1` rows takes `1 + 2K` consecutive sentences of the
    shuffled stream: the positive `(s, s)`, then `K` rows `(a, b)`
    (`"official"`) or `(s, b)` (`"paper"`), label 0.

    Returns:
        dataset of `{"left": string [B], "right": string [B], "labels": float32 [B]}`.
    """
    k = int(negatives_per_positive)
    group = k + 1
    if batch_size < 1 or batch_size % group:
        raise ValueError(
            f"`batch_size` must be a positive multiple of K + 1 = {group}, "
            f"received {batch_size}."
        )
    groups = batch_size // group
    seed = int(seed or 0)
    check_stream(stream, ("sentence",), groups if k == 0 else groups * (1 + 2 * k),
                 no_duplicates=k == 0, max_skipped=_max_skipped())
    sources = stream.sources.values() if isinstance(stream, Mixture) else [stream]
    labels = tf.tile(tf.constant([1.0] + [0.0] * k), [groups])

    def make(sentences):
        draws = tf.reshape(sentences, [groups, 1 + 2 * k])
        positive = draws[:, :1]
        left_neg, right_neg = draws[:, 1: 1 + k], draws[:, 1 + k:]
        if layout == "paper":
            left_neg = tf.tile(positive, [1, k])
        return {
            "left": tf.reshape(tf.concat([positive, left_neg], 1), [batch_size]),
            "right": tf.reshape(tf.concat([positive, right_neg], 1), [batch_size]),
            "labels": labels,
        }

    policy, shard = _sharding(stream, workers)
    parts = []
    for i, source in enumerate(sources):
        rows = _shuffled_rows(source, ("sentence",), seed + 1000 * i,
                              source.options.shuffle_buffer, shard,
                              new_counter(source, ("sentence",)))
        if k == 0 and source.options.no_duplicates is not False:
            # In-batch negatives: no sentence twice in a batch.
            sentences = unique_batches(rows, groups, ("sentence",))
            parts.append(sentences.map(lambda b: make(b["sentence"])))
        else:
            sentences = rows.map(lambda r: r["sentence"])
            parts.append(sentences.batch(groups * (1 + 2 * k), drop_remainder=True).map(make))
    if isinstance(stream, Mixture):
        ds = _choose(parts, list(stream.weights.values()), stream.mode, seed)
    else:
        ds = parts[0]
    if start_step:
        ds = ds.skip(int(start_step))
    return _with_policy(ds, policy)
