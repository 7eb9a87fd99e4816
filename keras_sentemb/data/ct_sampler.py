"""Contrastive Tension's pair sampler: one positive and K negatives per group."""

import tensorflow as tf

from keras_sentemb.data.batching import step_counter


LAYOUTS = ("official", "paper")


def ct_pair_dataset(sentences, batch_size=16, negatives_per_positive=7, seed=0, start_step=0,
                    layout="official"):
    """An endless dataset of CT batches sampled from the whole corpus.

    Each batch is made of groups of `K + 1` rows: first `(s, s)` with label 1
    for a sentence `s` drawn uniformly from the corpus, then `K` rows with
    label 0 (batch 16 with K = 7 holds 2 positives and 14 negatives). The
    negative rows follow `layout`:

    - `"official"`: `(a, b)`, two independently drawn sentences (the
      authors' code: tower 1 embeds `a`, tower 2 embeds `b`).
    - `"paper"`: `(s, n)`, the group's sentence `s` against a drawn
      negative `n` (section 4 and Appendix A.1, Figure 4: "K negative
      sentences are sampled to generate K + 1 training samples by pairing s
      with the negative sentences ... always use f2 to embed the K negative
      sentences"): tower 1 embeds `s` in every row of the group, tower 2 the
      negatives.

    The right column (tower 2's sentences) is the same in both layouts for
    the same seed; only tower 1's negative-row sentences differ. With `K = 0`
    every row is a positive `(s, s)` pair (the in-batch-negatives variant)
    and `layout` changes nothing.

    Draws are stateless functions of `(seed, step)`, so the stream is
    reproducible and a resumed run (`start_step`) continues it.

    Args:
        sentences: list of str. The corpus (every sentence can be drawn).
        batch_size: int. Rows per batch; a multiple of `K + 1`. Defaults to
            `16`.
        negatives_per_positive: int. `K`. Defaults to `7`.
        seed: int. Defaults to `0`.
        start_step: int. Index of the first batch. Defaults to `0`.
        layout: str. `"official"` or `"paper"` (see above). Defaults to
            `"official"`.

    Returns:
        `tf.data.Dataset` of `{"left": string [B], "right": string [B],
        "labels": float32 [B]}`.

    References:
        - [Carlsson et al., 2021](https://openreview.net/forum?id=Ov_sMNau-PF)
    """
    if layout not in LAYOUTS:
        raise ValueError(f"`layout` must be one of {list(LAYOUTS)}, received {layout!r}.")
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

    @tf.autograph.experimental.do_not_convert  # plain TensorFlow ops: nothing to convert
    def make_batch(step):
        seeds = tf.stack([tf.constant(seed, tf.int64), step])
        draws = tf.random.stateless_uniform(
            [groups, 1 + 2 * k], seed=seeds, maxval=n, dtype=tf.int64
        )
        positive = draws[:, :1]
        left_neg, right_neg = draws[:, 1 : 1 + k], draws[:, 1 + k :]
        if layout == "paper":  # (s, negative): tower 1 sees s in every row of its group
            left_neg = tf.tile(positive, [1, k])
        left = tf.reshape(tf.concat([positive, left_neg], axis=1), [-1])
        right = tf.reshape(tf.concat([positive, right_neg], axis=1), [-1])
        return {
            "left": tf.gather(corpus, left),
            "right": tf.gather(corpus, right),
            "labels": labels,
        }

    steps = step_counter(start_step)
    return steps.map(make_batch, num_parallel_calls=tf.data.AUTOTUNE)
