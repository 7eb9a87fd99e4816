"""Word repetition (ESimCSE's positive view), on packed token ids, in TensorFlow ops.

For a sentence of `N` subword tokens (its special tokens and padding left
out), `dup_len` is drawn uniformly from `[0, max(2, int(dup_rate * N))]`
(at most `N`), `dup_len` distinct token positions are drawn uniformly and
each of those tokens is written twice, in place. The view is packed again
(start and end tokens, padding) and cut to `max_length`: a sentence whose
view is too long loses its last content tokens, never its end token. An
encoder with a prompt template repeats the sentence's tokens only, and the
view is framed in the template as the sentence is.

Everything here is stateless and runs in the `tf.data` pipeline: the draws
of batch `step` depend on `(seed, step)` only, so a resumed run sees the
views the uninterrupted run saw.
"""

import tensorflow as tf

from keras_sentemb.data.batching import pad_to_bucket
from keras_sentemb.models.encoding_engine import pack_tokens


def content_mask(packed, prefix=(), suffix=()):
    """`[B, T]` bool: each row's content tokens (not start, end, a template's tokens or padding)."""
    mask = tf.cast(packed["padding_mask"], tf.bool)
    lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1, keepdims=True)
    positions = tf.range(tf.shape(mask)[1])[tf.newaxis, :]
    return mask & (positions >= 1 + len(prefix)) & (positions <= lengths - 2 - len(suffix))


def repetition_counts(packed, seed, dup_rate, prefix=(), suffix=()):
    """`[B, T]` int32: how many times each position is written in the view (0, 1 or 2).

    Padding is written 0 times, the start and end tokens once, and each row
    writes `dup_len` of its content tokens twice (the others once), with
    `dup_len` uniform in `[0, min(N, max(2, int(dup_rate * N)))]`.

    Args:
        packed: dict with `token_ids` and `padding_mask` `[B, T]`.
        seed: int tensor `[2]`. The stateless seed of the draws.
        dup_rate: float. The maximum repetition rate.
        prefix, suffix: the template's token ids around the sentence, if any
            (written once, as the start and end tokens).
    """
    content = content_mask(packed, prefix, suffix)
    n = tf.reduce_sum(tf.cast(content, tf.int32), axis=1)
    length_seed, position_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    # int(dup_rate * N) in float64, as Python computes it.
    cap = tf.maximum(2, tf.cast(tf.floor(dup_rate * tf.cast(n, tf.float64)), tf.int32))
    draw = tf.random.stateless_uniform(tf.shape(n), length_seed, dtype=tf.float64)
    dup_len = tf.minimum(tf.cast(tf.floor(draw * tf.cast(cap + 1, tf.float64)), tf.int32), n)
    # dup_len distinct positions, uniformly: the dup_len lowest of uniform scores.
    scores = tf.random.stateless_uniform(tf.shape(content), position_seed)
    scores = tf.where(content, scores, 2.0)
    ranks = tf.argsort(tf.argsort(scores, axis=1, stable=True), axis=1, stable=True)
    chosen = content & (ranks < dup_len[:, tf.newaxis])
    mask = tf.cast(packed["padding_mask"], tf.bool)
    return tf.cast(mask, tf.int32) + tf.cast(chosen, tf.int32)


def repeat_tokens(packed, counts, max_length, start_token_id, end_token_id, pad_token_id,
                  prefix=(), suffix=(), body_length=None):
    """The view written by `counts`, packed again (in the template of `prefix` and `suffix`,
    if any) and cut to `max_length`.

    Returns a dict `token_ids`, `padding_mask`, `segment_ids` `[B, T']`, `T'`
    the longest row of the view: at most `max_length`, plus the template's
    tokens. `body_length` is the sentence's limit (default `max_length - 2`).
    """
    ids = packed["token_ids"]
    content = content_mask(packed, prefix, suffix)
    content_counts = tf.boolean_mask(counts, content)
    tokens = tf.repeat(tf.boolean_mask(ids, content), content_counts)
    rows = tf.math.unsorted_segment_sum(
        content_counts, tf.boolean_mask(tf.broadcast_to(
            tf.range(tf.shape(ids)[0])[:, tf.newaxis], tf.shape(ids)), content),
        tf.shape(ids)[0])
    body = tf.RaggedTensor.from_row_lengths(tf.cast(tokens, tf.int32), rows)
    view = pack_tokens(body, max_length - 2 if body_length is None else body_length,
                       start_token_id, end_token_id, pad_token_id, prefix, suffix)
    out = {"token_ids": tf.cast(view["token_ids"], ids.dtype),
           "padding_mask": tf.cast(view["padding_mask"], packed["padding_mask"].dtype)}
    if "segment_ids" in packed:
        out["segment_ids"] = tf.zeros_like(out["token_ids"], dtype=packed["segment_ids"].dtype)
    return out


def word_repetition(encoder, packed, seed, dup_rate, max_length, buckets=True):
    """ESimCSE's positive view of packed inputs (see the module docstring).

    Args:
        encoder: `SentenceEncoder`. Its start, end and pad token ids.
        packed: dict with `token_ids`, `padding_mask` (and `segment_ids`) `[B, T]`.
        seed: int tensor `[2]`. The stateless seed of the batch's draws.
        dup_rate: float. The maximum repetition rate.
        max_length: int. The view's token limit, special tokens included.
        buckets: bool. Pad the view to a bucket width, as the batches are.

    Returns:
        The view's packed inputs.
    """
    prompt = encoder.prompt
    prefix, suffix = ((), ()) if prompt is None else (prompt.prefix, prompt.suffix)
    counts = repetition_counts(packed, seed, dup_rate, prefix, suffix)
    view = repeat_tokens(packed, counts, max_length, encoder.start_token_id,
                         encoder.end_token_id, encoder.pad_token_id, prefix, suffix,
                         encoder.body_length(max_length))
    if buckets:
        view = pad_to_bucket(view, encoder.packed_length(max_length), encoder.pad_token_id)
    return view


def with_word_repetition(make_dataset, encoder, seed, dup_rate, max_length,
                         column="sentence", view="positive"):
    """`make_dataset(start_step)` whose batches also hold the repeated view of `column`.

    Batch `i` of the run (the `start_step`-th first when resumed) draws its
    view from the stateless seed `(seed, i)`.
    """
    def add_view(step, batch):
        out = dict(batch)
        key = tf.stack([tf.cast(seed, tf.int64), tf.cast(step, tf.int64)])
        out[view] = word_repetition(encoder, batch[column], key, dup_rate, max_length)
        return out

    def make(start_step):
        ds = make_dataset(start_step).enumerate(start=start_step or 0)
        return ds.map(add_view, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

    return make
