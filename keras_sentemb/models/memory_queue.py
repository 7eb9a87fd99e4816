"""`MemoryQueue`: a FIFO ring buffer of embeddings used as extra negatives."""

import keras
import tensorflow as tf

from keras_sentemb.losses.distributed import gather_across_replicas


@keras.saving.register_keras_serializable(package="keras_sentemb")
class MemoryQueue(keras.layers.Layer):
    """A first-in first-out queue of embeddings (MoCo-style ring buffer).

    The queue holds up to `size` rows of dimension `dim` in a non-trainable
    variable, with a write pointer and a fill count. `enqueue(x)` writes the
    rows of `x` at the pointer (wrapping around, so the oldest rows are
    overwritten first) and advances it; when `x` has more rows than the queue
    only its last `size` rows are kept. `contents()` returns the filled rows
    in slot order (what a loss uses as negatives; the order does not matter
    there) and `ordered()` returns them from oldest to newest.

    Under a `tf.distribute` strategy `enqueue` first gathers `x` from every
    replica (`keras_sentemb.losses.distributed.gather_across_replicas`), so
    each replica writes the same global batch and all copies of the queue stay
    identical; the variables are created with `only_first_replica`
    aggregation for that reason. Nothing is differentiated through the queue
    (`x` is wrapped in `tf.stop_gradient`).

    Args:
        size: int. Number of rows the queue holds (`Q`), >= 1.
        dim: int. Embedding dimension (`d`), >= 1.
        dtype: str. Storage dtype. Defaults to `"float32"`.

    Examples:

    >>> queue = MemoryQueue(size=3, dim=2)
    >>> queue.enqueue(tf.constant([[1.0, 0.0], [0.0, 1.0]]))
    >>> queue.enqueue(tf.constant([[2.0, 2.0], [3.0, 3.0]]))
    >>> queue.ordered().numpy()  # oldest first; [1, 0] was overwritten
    array([[0., 1.],
           [2., 2.],
           [3., 3.]], dtype=float32)

    References:
        - [He et al., 2020. Momentum Contrast for Unsupervised Visual
          Representation Learning](https://arxiv.org/abs/1911.05722)
    """

    def __init__(self, size, dim, dtype="float32", **kwargs):
        super().__init__(dtype=dtype, **kwargs)
        for name, value in (("size", size), ("dim", dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"`{name}` must be a positive int, received {value!r}."
                )
        self.size = int(size)
        self.dim = int(dim)
        self.queue = self._state((self.size, self.dim), dtype, "queue")
        self.pointer = self._state((), "int32", "pointer")
        self.count = self._state((), "int32", "count")
        self.built = True

    def _state(self, shape, dtype, name):
        """A zero-initialised, non-trainable weight kept by the first replica."""
        return self.add_weight(
            shape=shape,
            initializer="zeros",
            dtype=dtype,
            trainable=False,
            aggregation="only_first_replica",
            name=name,
        )

    def contents(self):
        """The filled rows `[min(count, size), dim]`, in slot order."""
        return tf.convert_to_tensor(self.queue)[: tf.convert_to_tensor(self.count)]

    def ordered(self):
        """The filled rows from the oldest to the newest."""
        rows = self.contents()
        full = tf.equal(tf.convert_to_tensor(self.count), self.size)
        return tf.cond(
            full,
            lambda: tf.roll(rows, shift=-tf.convert_to_tensor(self.pointer), axis=0),
            lambda: rows,
        )

    def enqueue(self, x, gather=True):
        """Write the rows of `x` (`[n, dim]`) into the queue, oldest out first.

        Args:
            x: float tensor `[n, dim]`. Rows to add, e.g. this step's teacher
                embeddings (the local shard under a strategy).
            gather: bool. Gather `x` across replicas first. Defaults to
                `True`.

        A batch that holds a non-finite value is dropped: the queue is left
        unchanged, so one bad step cannot poison the negatives of every later
        step.
        """
        x = tf.stop_gradient(tf.cast(x, self.queue.dtype))
        if x.shape.rank != 2 or (x.shape[-1] is not None and x.shape[-1] != self.dim):
            raise ValueError(
                f"`enqueue` expects a tensor of shape [n, {self.dim}], "
                f"received shape {x.shape}."
            )
        if gather:
            x = gather_across_replicas(x)
        x = x[-self.size :]  # more rows than slots: keep the newest
        # A batch with a NaN / Inf (a skipped training step) is dropped, with
        # no branch: a replica-context tf.cond around the assigns would need a
        # merge_call inside control flow under MirroredStrategy.
        n = tf.where(tf.reduce_all(tf.math.is_finite(x)), tf.shape(x)[0], 0)
        x = x[:n]
        pointer = tf.convert_to_tensor(self.pointer)
        slots = tf.math.floormod(pointer + tf.range(n), self.size)
        self.queue.assign(
            tf.tensor_scatter_nd_update(
                tf.convert_to_tensor(self.queue), slots[:, None], x
            )
        )
        self.pointer.assign(tf.math.floormod(pointer + n, self.size))
        self.count.assign(tf.minimum(tf.convert_to_tensor(self.count) + n, self.size))

    def reset(self):
        """Empty the queue."""
        self.queue.assign(tf.zeros_like(tf.convert_to_tensor(self.queue)))
        self.pointer.assign(0)
        self.count.assign(0)

    def call(self, inputs=None):
        return self.contents()

    def get_config(self):
        config = super().get_config()
        config.update({"size": self.size, "dim": self.dim})
        return config
