"""Batches of training text for tf.data: step-indexed, tokenized, bucket-padded, prefetched.

Every tokenized batch is padded to a length from a small set (the
`SentenceEncoder` buckets 8, 16, 24, 32, 40, 48, 56, 64, 80, ... capped at
the training `max_length`), and every batch has the same number of rows. The
step function therefore meets only a handful of shapes in a whole run: it is
traced once (its input signature has a dynamic length) and, with
`jit_compile=True`, XLA compiles it once per bucket instead of once per
distinct batch length.
"""

import logging

import numpy as np
import tensorflow as tf

from keras_sentemb import compat
from keras_sentemb import validation
from keras_sentemb.models.encoding_engine import BUCKETS

logger = logging.getLogger(__name__)


def step_counter(start=0):
    """`tf.data.Dataset.counter(start)` (int64 step numbers, endless), made so that it stays no
    longer than the datasets that use it: TensorFlow's counter would leave its function in the
    process's global graph (`compat.functions_kept_out_of_the_global_graph`)."""
    with compat.functions_kept_out_of_the_global_graph():
        return tf.data.Dataset.counter(start=int(start), dtype=tf.int64)


def shuffled_batches(columns, batch_size, seed=0, start_step=0, extra=None):
    """An endless `tf.data.Dataset` of shuffled batches of aligned columns.

    Epoch `e` visits the rows in a permutation drawn from `(seed, e)` and
    drops the last partial batch, so every batch has `batch_size` rows
    (with fewer rows than `batch_size`, each batch is all of them, shuffled:
    few-shot runs on a handful of sentences).
    Batch `s` is a pure function of `(seed, s)`: a run resumed at step
    `start_step` sees exactly the batches the uninterrupted run would have.

    Args:
        columns: dict name -> list of str, all of the same length (may be
            empty when `extra` has the rows).
        batch_size: int. Rows per batch.
        seed: int. Defaults to `0`.
        start_step: int. Index of the first batch. Defaults to `0`.
        extra: dict name -> list or array of numbers (rows first), passed
            through untokenized (e.g. labels, precomputed vectors). Defaults
            to `None`.

    Returns:
        A dataset of dicts `{name: tf.string [batch_size], ...}` (plus the
        `extra` entries).
    """
    batch_size = validation.positive_int(batch_size, "batch_size")
    names = list(columns)
    if not names and not extra:
        raise ValueError("`columns` and `extra` are both empty: there is nothing to batch.")
    n = len(columns[names[0]]) if names else len(next(iter(extra.values())))
    if any(len(columns[k]) != n for k in names):
        raise ValueError(
            "All columns must have the same length. Received: "
            f"{ {k: len(v) for k, v in columns.items()} }."
        )
    if n == 0:
        raise ValueError("The training data is empty.")
    if n < batch_size:
        logger.warning(
            "The training data has %d examples, fewer than batch_size=%d: every "
            "batch holds all of them.", n, batch_size,
        )
        batch_size = n
    tensors = {k: tf.constant(list(v), tf.string) for k, v in columns.items()}
    for k, v in (extra or {}).items():
        if len(v) != n:
            raise ValueError(f"`extra[{k!r}]` has {len(v)} rows; the columns have {n}.")
        tensors[k] = tf.constant(np.asarray(v))
    per_epoch = n // batch_size
    seed = int(seed)

    @tf.autograph.experimental.do_not_convert  # plain TensorFlow ops: nothing to convert
    def make_batch(step):
        epoch = step // per_epoch
        first = (step % per_epoch) * batch_size
        order = tf.random.experimental.stateless_shuffle(
            tf.range(n, dtype=tf.int64), seed=tf.stack([tf.constant(seed, tf.int64), epoch])
        )
        rows = tf.ensure_shape(order[first : first + batch_size], [batch_size])
        return {k: tf.gather(t, rows) for k, t in tensors.items()}

    steps = step_counter(start_step)
    return steps.map(make_batch, num_parallel_calls=tf.data.AUTOTUNE)


def with_text_views(dataset, views, seed=0, start_step=0):
    """`dataset` with views of its texts made before tokenization, one new column each.

    A view is a function of a batch's strings and a stateless random key
    (e.g. TSDAE's word deletion). The key of view `i` at batch `s` is drawn
    from `(seed, s, i)`, so a run resumed at `start_step` draws the views the
    uninterrupted run drew.

    Args:
        dataset: `tf.data.Dataset` of dicts of string batches (e.g. from
            `shuffled_batches`), one element per step from `start_step`.
        views: dict new column -> `(source column, fn)`, `fn(texts, key)`
            returning a string tensor `[batch]` from `texts` `[batch]` and an
            int64 key of shape `[2]`.
        seed: int. Defaults to `0`.
        start_step: int. The step of the dataset's first element. Defaults
            to `0`.

    Returns:
        A dataset of the same dicts plus one string column per view.
    """
    views = dict(views)
    seed = int(seed)

    @tf.autograph.experimental.do_not_convert  # plain TensorFlow ops: nothing to convert
    def add_views(step, element):
        out = dict(element)
        base = tf.stack([tf.constant(seed, tf.int64), step])
        for index, (name, (source, fn)) in enumerate(sorted(views.items())):
            key = tf.random.experimental.stateless_fold_in(base, index)
            out[name] = tf.ensure_shape(fn(element[source], key), element[source].shape)
        return out

    steps = step_counter(start_step)
    return tf.data.Dataset.zip((steps, dataset)).map(add_views,
                                                     num_parallel_calls=tf.data.AUTOTUNE)


def bucket_widths(max_length):
    """The lengths a batch may be padded to: the buckets below `max_length`, and it."""

    return tuple(b for b in BUCKETS if b < max_length) + (int(max_length),)


def pad_to_bucket(packed, max_length, pad_token_id):
    """Pad packed inputs `[B, T]` to the smallest bucket width >= T (in graph).

    Padding positions have `padding_mask` 0, so a batch's pooled vectors do
    not depend on its width.
    """
    widths = tf.constant(bucket_widths(max_length), tf.int32)
    length = tf.shape(packed["token_ids"])[1]
    width = tf.reduce_min(tf.boolean_mask(widths, widths >= length))
    extra = [[0, 0], [0, width - length]]
    out = {}
    for key, value in packed.items():
        fill = pad_token_id if key == "token_ids" else 0
        out[key] = tf.pad(value, extra, constant_values=tf.cast(fill, value.dtype))
    return out


def tokenize_columns(encoder, dataset, columns, max_length=None, encoders=None, buckets=True):
    """Map a dataset of string batches to packed model inputs per column.

    Args:
        encoder: `SentenceEncoder` whose tokenizer and packing are used.
        dataset: `tf.data.Dataset` whose elements are dicts of string tensors
            of shape [batch], already batched.
        columns: list of keys to tokenize; other entries pass through.
        max_length: int or None. Defaults to the encoder's `max_length`.
        encoders: dict column -> `SentenceEncoder` for columns tokenized by
            another encoder (e.g. a teacher with its own vocabulary).
            Defaults to `None`.
        buckets: bool. Pad each batch to a bucket width (`bucket_widths`)
            instead of its own maximum. Defaults to `True`.

    Returns:
        A dataset of dicts `{column: {"token_ids", "padding_mask",
        "segment_ids"}, ...}`, each padded to a bucket width (or its own
        batch maximum), prefetched.
    """
    encoders = encoders or {}

    # Traced without autograph: plain TensorFlow ops only, and autograph's
    # source conversion would be most of the time this map takes to trace.
    @tf.autograph.experimental.do_not_convert
    def pack(element):
        out = dict(element)
        for key in columns:
            column_encoder = encoders.get(key, encoder)
            length = column_encoder.max_length if max_length is None else max_length
            packed = column_encoder.preprocess(element[key], length)
            if buckets:
                packed = pad_to_bucket(packed, column_encoder.packed_length(length),
                                       column_encoder.pad_token_id)
            rows = element[key].shape[0]  # static when the batches are (shuffled_batches)
            out[key] = {k: tf.ensure_shape(v, [rows, None]) for k, v in packed.items()}
        return out

    return without_autotuner(
        dataset.map(pack, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    )


def without_autotuner(dataset):
    """`dataset` with tf.data's autotuner off, for the whole pipeline.

    tf.data's autotuner runs one thread per iterator, which sleeps for a
    period that doubles after each round, up to a minute. When the iterator
    is freed (at the end of `fit`, or at a garbage collection long after),
    its destructor waits for that thread to finish its current sleep: the
    freeing thread stalled for up to 60 s (measured with TensorFlow 2.21:
    `gc.collect()` took 11.4 s after a fit iterator had been idle for 70 s,
    0.3 s with the autotuner off). The options apply to the whole pipeline,
    a user's `tf.data.Dataset` source included. Without the autotuner,
    `AUTOTUNE` parallel maps run on a fixed number of threads (as many as
    the runner has) and `prefetch(AUTOTUNE)` sizes its buffer from use:
    tokenizing a batch costs far less than a training step, so the steps
    never wait for input.

    Args:
        dataset: `tf.data.Dataset`. A training input pipeline.

    Returns:
        The dataset with `options().autotune.enabled` False.
    """
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)
