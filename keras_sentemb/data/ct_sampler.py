"""Contrastive Tension's pair sampler: one positive and K negatives per group."""

import tensorflow as tf


def ct_pair_dataset(sentences, batch_size=16, negatives_per_positive=7, seed=0, start_step=0):
    """An endless dataset of CT batches sampled from the whole corpus.

    Each batch is made of groups of `K + 1` rows: first `(s, s)` with label 1
    for a sentence `s` drawn uniformly from the corpus, then `K` rows
    `(a, b)` of two independently drawn sentences with label 0 (Carlsson et
    al.'s official layout: batch 16 with K = 7 holds 2 positives and 14
    negatives). With `K = 0` every row is a positive `(s, s)` pair (the
    in-batch-negatives variant).

    Draws are stateless functions of `(seed, step)`, so the stream is
    reproducible and a resumed run (`start_step`) continues it.

    Args:
        sentences: list of str. The corpus (every sentence can be drawn).
        batch_size: int. Rows per batch; a multiple of `K + 1`. Defaults to
            `16`.
        negatives_per_positive: int. `K`. Defaults to `7`.
        seed: int. Defaults to `0`.
        start_step: int. Index of the first batch. Defaults to `0`.

    Returns:
        `tf.data.Dataset` of `{"left": string [B], "right": string [B],
        "labels": float32 [B]}`.

    References:
        - [Carlsson et al., 2021](https://openreview.net/forum?id=Ov_sMNau-PF)
    """
    k = int(negatives_per_positive)
    if k < 0:
        raise ValueError(f"`negatives_per_positive` must be >= 0, received {k}.")
    group = k + 1
    if batch_size < 1 or batch_size % group:
        raise ValueError(
            f"`batch_size` must be a positive multiple of K + 1 = {group}, "
            f"received {batch_size}."
        )
    if len(sentences) == 0:
        raise ValueError("The CT corpus is empty.")
    if k > 0 and len(sentences) < 2:
        raise ValueError("CT with negatives needs at least 2 distinct sentences.")
    corpus = tf.constant(list(sentences))
    n = len(sentences)
    groups = batch_size // group
    labels = tf.tile(tf.constant([1.0] + [0.0] * k), [groups])

    def make_batch(step):
        seeds = tf.stack([tf.constant(seed, tf.int64), step])
        draws = tf.random.stateless_uniform(
            [groups, 1 + 2 * k], seed=seeds, maxval=n, dtype=tf.int64
        )
        positive = draws[:, :1]
        left_neg, right_neg = draws[:, 1 : 1 + k], draws[:, 1 + k :]
        left = tf.reshape(tf.concat([positive, left_neg], axis=1), [-1])
        right = tf.reshape(tf.concat([positive, right_neg], axis=1), [-1])
        return {
            "left": tf.gather(corpus, left),
            "right": tf.gather(corpus, right),
            "labels": labels,
        }

    steps = tf.data.Dataset.counter(start=start_step, dtype=tf.int64)
    return steps.map(make_batch, num_parallel_calls=tf.data.AUTOTUNE)
