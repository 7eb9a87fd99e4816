"""The reference GradCache is checked against: one tape through the whole batch.

`reference_loss_and_gradients` embeds the batch chunk by chunk exactly as
`BaseTrainer.grad_cache_gradients` does (same rows per chunk, a last partial
chunk filled with the first rows, each chunk's random draws from its own
`(step, chunk)` seed) but under ONE `GradientTape` over the embeddings, the
loss and every weight: the plain full-batch backpropagation through the same
dropout masks. GradCache must give the same loss and the same gradients.
"""

import tensorflow as tf


def chunked_rows(data, size):
    """`(padded_data, chunks, batch)`: rows repeated up to a multiple of `size`."""
    batch = int(tf.nest.flatten(data)[0].shape[0])
    chunks = -(-batch // size)
    rows = tf.range(chunks * size) % batch
    return tf.nest.map_structure(lambda t: tf.gather(t, rows), data), chunks, batch


def reference_loss_and_gradients(trainer, data, size, chunk_ids=None):
    """Loss and gradients (of `loss / replicas`, unscaled) with one tape.

    Args:
        chunk_ids: seed index of each chunk (default `0..chunks-1`). Under a
            strategy each replica numbers its own chunks from 0, so the
            single-device reference of a global batch split over R replicas
            passes `list(range(chunks // R)) * R`.
    """
    padded, chunks, batch = chunked_rows(data, size)
    chunk_ids = list(range(chunks)) if chunk_ids is None else chunk_ids
    trainer._reseed()
    with tf.GradientTape() as tape:
        parts = []
        for i in range(chunks):
            trainer._reseed(chunk=chunk_ids[i])
            piece = tf.nest.map_structure(lambda t: t[i * size : (i + 1) * size], padded)
            parts.append(trainer.embed_batch(piece, training=True))
        embeddings = tf.nest.map_structure(lambda *xs: tf.concat(xs, 0)[:batch], *parts)
        loss = trainer.embeddings_loss(embeddings, data, True).loss
    return loss, tape.gradient(loss, trainer.trainable_variables)


def max_gradient_difference(a, b):
    """Largest absolute difference between two gradient lists (None = zero)."""
    worst = 0.0
    for x, y in zip(a, b):
        if x is None and y is None:
            continue
        x = tf.zeros_like(tf.convert_to_tensor(y)) if x is None else tf.convert_to_tensor(x)
        y = tf.zeros_like(x) if y is None else tf.convert_to_tensor(y)
        worst = max(worst, float(tf.reduce_max(tf.abs(x - y))))
    return worst


def largest_gradient(grads):
    return max(float(tf.reduce_max(tf.abs(tf.convert_to_tensor(g)))) for g in grads if g is not None)
