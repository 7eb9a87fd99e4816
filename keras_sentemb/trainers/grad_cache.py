"""GradCache for `BaseTrainer`: a batch of any size in the memory of a few rows.

`GradCacheMixin.grad_cache_gradients` takes the gradients of a trainer
whose loss is split into `embed_batch` and `loss_from_embeddings` chunk by
chunk (Gao et al., 2021): (1) embed the batch in chunks of
`mini_batch_size` rows without gradients; (2) compute the loss of the whole
batch and its gradient with respect to the embeddings (and to the loss's
own weights, such as a learnable logit scale); (3) embed each chunk again
with gradients and accumulate the vector-Jacobian products
`d(sum(embeddings * cached_gradient)) / d(weights)`. Each chunk's random
draws (dropout masks, view masks) are replayed exactly: its `SeedGenerator`
counters are set to the same `(step, chunk)` values in both passes
(`BaseTrainer._reseed(chunk=...)`), so the update equals the full-batch
gradient through the same masks. The chunks run one after the other
(`tf.while_loop`, `parallel_iterations=1`), so only one chunk's activations
live at a time. Every entry of a batch must have one row per example (a last
partial chunk is filled with repeated rows whose gradient is zero).

References:
    - [Gao, Zhang, Han & Callan, 2021. Scaling Deep Contrastive Learning
      Batch Size under Memory Limited Setup](https://arxiv.org/abs/2101.06983)
"""

import tensorflow as tf

# Counter values reserved per step for each SeedGenerator (draws within a step).
SEED_STRIDE = 1 << 20
# Within a step, counter values reserved per GradCache chunk: a chunk's
# forward pass draws from `step * SEED_STRIDE + (chunk + 1) * CHUNK_STRIDE`
# on, in the pass without gradients and again in the pass with them.
CHUNK_STRIDE = 1 << 10
MAX_CHUNKS = SEED_STRIDE // CHUNK_STRIDE - 1


class GradCacheMixin:
    """`grad_cache_gradients` for a `BaseTrainer` (see the module docstring)."""

    def grad_cache_gradients(self, data, variables=None):
        """GradCache: `(LossOutput, gradients)` of a batch, chunk by chunk.

        The gradients are those of `optimizer.scale_loss(loss / replicas)`
        with respect to `variables` (default: the trainable ones), as the
        plain step takes them; `None` for a variable nothing depends on.
        Call it after `_reseed()` (as `train_step` does).
        """
        variables = self.trainable_variables if variables is None else variables
        padded, chunks, batch = self._grad_cache_chunks(data)
        size = self.mini_batch_size

        def embed_chunk(i):
            self._reseed(chunk=i)
            chunk = tf.nest.map_structure(lambda t: _rows(t, i * size, size), padded)
            return self.embed_batch(chunk, training=True)

        structure, flat = self._embed_chunks(embed_chunk, chunks, batch)
        # Loss of the whole batch; its gradient w.r.t. the embeddings and
        # w.r.t. the weights the loss uses directly (a logit scale).
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        with tf.GradientTape() as tape:
            tape.watch(flat)
            embeddings = tf.nest.pack_sequence_as(structure, flat)
            out = self._checked_loss(
                self.embeddings_loss(embeddings, data, training=True), "loss_from_embeddings"
            )
            scaled = self.optimizer.scale_loss(out.loss / replicas)
        cached, loss_grads = tape.gradient(scaled, (flat, variables))
        cached = [
            tf.zeros_like(e) if g is None else tf.concat(
                [tf.cast(g, e.dtype), tf.zeros_like(_rows(e, 0, chunks * size - batch))], 0
            )
            for e, g in zip(flat, cached)
        ]
        sums, reached = self._chunk_gradients(embed_chunk, cached, chunks, size, variables)
        grads = []
        for total, direct, hit in zip(sums, loss_grads, reached):
            if direct is not None:
                direct = tf.convert_to_tensor(direct)
            if hit:
                grads.append(total if direct is None else total + direct)
            else:
                grads.append(direct)
        return out, grads

    def _grad_cache_chunks(self, data):
        """`(padded, chunks, batch)`: `data`'s rows repeated up to whole chunks.

        A last partial chunk repeats rows from the start; their embeddings
        get a zero gradient.
        """
        size = self.mini_batch_size
        first_leaf = tf.nest.flatten(data)[0]
        batch = tf.shape(first_leaf)[0]
        static_batch = first_leaf.shape[0]
        if static_batch is not None:
            chunks = -(-int(static_batch) // size)
            if chunks > MAX_CHUNKS:
                raise ValueError(
                    f"GradCache handles at most {MAX_CHUNKS} chunks per step; a batch of "
                    f"{static_batch} rows with mini_batch_size={size} makes {chunks}."
                )
        else:
            chunks = (batch + size - 1) // size
        padded = tf.nest.map_structure(
            lambda t: tf.gather(t, tf.range(chunks * size) % batch), data
        )
        return padded, chunks, batch

    @staticmethod
    def _embed_chunks(embed_chunk, chunks, batch):
        """Pass 1: every chunk's embeddings, no tape (no activations kept).

        Returns `(structure, flat)`: the nest of the first chunk's output and
        the batch's embeddings as a flat list of `[batch, ...]` tensors.
        """
        first = embed_chunk(0)
        arrays = [
            tf.TensorArray(t.dtype, size=chunks, element_shape=t.shape).write(0, t)
            for t in tf.nest.flatten(first)
        ]

        def body(i, arrays):
            out = tf.nest.flatten(embed_chunk(i))
            return i + 1, [a.write(i, o) for a, o in zip(arrays, out)]

        _, arrays = tf.while_loop(
            lambda i, _: i < chunks, body, (tf.constant(1), arrays),
            parallel_iterations=1,
        )
        return first, [a.concat()[:batch] for a in arrays]

    @staticmethod
    def _chunk_gradients(embed_chunk, cached, chunks, size, variables):
        """Pass 2: each chunk again, with the same draws, under a tape.

        Accumulates `d(sum(embeddings * cached gradient)) / d(weights)` over
        the chunks. Returns `(sums, reached)`: one sum per variable and
        whether any chunk's embeddings depend on it.
        """
        reached = [False] * len(variables)

        def body(i, sums):
            pieces = [_rows(g, i * size, size) for g in cached]
            with tf.GradientTape() as chunk_tape:
                out = tf.nest.flatten(embed_chunk(i))
                surrogate = tf.add_n([
                    tf.reduce_sum(o * tf.stop_gradient(tf.cast(g, o.dtype)))
                    for o, g in zip(out, pieces)
                ])
            grads = chunk_tape.gradient(surrogate, variables)
            new = []
            for k, (total, g) in enumerate(zip(sums, grads)):
                if g is None:
                    new.append(total)
                else:
                    reached[k] = True
                    new.append(total + tf.cast(tf.convert_to_tensor(g), total.dtype))
            return i + 1, new

        zeros = [tf.zeros(v.shape, v.dtype) for v in variables]
        _, sums = tf.while_loop(
            lambda i, _: i < chunks, body, (tf.constant(0), zeros),
            parallel_iterations=1,
        )
        return sums, reached


def _rows(x, start, size):
    """Rows `[start, start + size)` of `x` (a static `size`: XLA-friendly)."""
    rank = x.shape.rank
    return tf.slice(x, [start] + [0] * (rank - 1), [size] + [-1] * (rank - 1))
