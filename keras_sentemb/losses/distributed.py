"""Cross-replica gathering of in-batch candidates for contrastive losses.

In-batch contrastive losses (InfoNCE / MultipleNegativesRankingLoss, NT-Xent,
in-batch Contrastive Tension) get better with more negatives. Under a
`tf.distribute` strategy each replica only holds `b` rows of the global batch
`B = num_replicas * b`; the helpers here let every replica score its local
anchors against the candidates of the *whole* global batch.

Distributed training convention (trainers must follow it exactly):

    Each replica computes `loss = some_loss(...)` on its local rows (the loss
    is the mean over the replica's local anchors, scored against candidates
    gathered from all replicas), takes gradients of
    `loss / num_replicas_in_sync` (see `scale_loss_for_replicas`; also pass it
    through `optimizer.scale_loss` for mixed precision), and lets the optimizer
    sum the gradients across replicas (what `optimizer.apply_gradients` does
    under `tf.distribute`). The value to report is the unscaled `loss`,
    averaged over replicas.

This is the same convention Keras applies to compiled losses
(`Model.compute_loss` divides by `num_replicas_in_sync`, the optimizer
all-reduces gradients with SUM). With equal local batch sizes it reproduces
exactly the loss and gradients of a single device on the global batch:
the gradient of `all_gather` (defined by TensorFlow, see below) sums the
upstream gradients of every replica's loss over replicas and hands each replica
the slice belonging to its own rows, so replica `r`'s gradient is
`d(sum_r' loss_r' / R) / d(local rows of r)`; summing those over replicas gives
`d(mean global loss) / d(weights)`.

With unequal local batch sizes (a final partial batch) the gathered candidates
and label offsets are still exact, but the mean-of-replica-means weighting
differs slightly from a single device's mean; that is the same approximation
Keras makes for its compiled losses.
"""

import tensorflow as tf


def _replica_context():
    """The replica context if it spans more than one replica, else `None`."""
    ctx = tf.distribute.get_replica_context()
    # `None` in a cross-replica context (inside `strategy.scope()` but outside
    # `strategy.run`): tensors there are not per-replica shards.
    if ctx is None or ctx.num_replicas_in_sync <= 1:
        return None
    return ctx


def num_replicas_in_sync():
    """Number of replicas of the current replica context (1 outside a strategy).

    Returns:
        A Python int.
    """
    ctx = tf.distribute.get_replica_context()
    if ctx is None:
        return tf.distribute.get_strategy().num_replicas_in_sync
    return ctx.num_replicas_in_sync


def gather_across_replicas(x):
    """All-gathers `x` along axis 0 across replicas, with gradients.

    Inside a `tf.distribute` replica context with more than one replica the
    result is the concatenation of every replica's `x` along the batch axis,
    in replica order (`replica_id_in_sync_group`), identical on all replicas.
    Outside a strategy, with a single replica, or in a cross-replica context,
    `x` is returned unchanged.

    Gradients flow back to the local shard. This uses
    `tf.distribute.ReplicaContext.all_gather`, whose gradient TensorFlow
    defines with `tf.custom_gradient`: the upstream gradients of the gathered
    tensor are all-reduced with SUM over replicas and each replica receives the
    slice of that sum corresponding to its own rows. That is exactly the
    gradient of `sum over replicas of loss_r` with respect to the local rows,
    which, combined with the convention in this module's docstring (divide the
    per-replica loss by `num_replicas_in_sync`, optimizer sums gradients),
    matches single-device training on the global batch.

    All replicas must call this the same number of times, in the same order
    (it is a collective op), and the inputs must agree in every dimension but
    the first. Pass several tensors as a list to gather them in one batched
    collective.

    Args:
        x: tensor of shape `[b, ...]`, or a nested structure (list, tuple,
            dict) of such tensors. This replica's rows.

    Returns:
        Same structure as `x`, each tensor of shape `[B, ...]` where `B` is
        the sum of the replicas' `b`; `x` itself when there is nothing to
        gather.

    Examples:

    ```python
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

    @tf.function
    def step(local_embeddings):
        candidates = gather_across_replicas(local_embeddings)  # [B, d]
        offset = replica_offset(tf.shape(local_embeddings)[0])
        ...
    ```
    """
    ctx = _replica_context()
    if ctx is None:
        return x
    return ctx.all_gather(x, axis=0)


def replica_offset(local_batch_size):
    """Row index of this replica's first row in `gather_across_replicas`'s output.

    The positive of local anchor `i` sits at row `replica_offset(b) + i` of
    the gathered candidates. Local batch sizes may differ between replicas
    (they are gathered to compute the offset), so a final partial batch is
    handled exactly.

    Args:
        local_batch_size: int or scalar int tensor. Number of rows this
            replica contributes (`tf.shape(x)[0]`).

    Returns:
        A scalar int32 tensor: 0 outside a strategy or with one replica,
        otherwise the sum of the local batch sizes of the replicas before
        this one.
    """
    ctx = _replica_context()
    if ctx is None:
        return tf.constant(0, dtype=tf.int32)
    size = tf.reshape(tf.cast(local_batch_size, tf.int32), [1])
    sizes = ctx.all_gather(size, axis=0)
    return tf.reduce_sum(sizes[: ctx.replica_id_in_sync_group])


def scale_loss_for_replicas(loss):
    """Divides a per-replica loss by the number of replicas in sync.

    Take gradients of this value (after `optimizer.scale_loss`) so that the
    optimizer's SUM all-reduce of gradients yields the gradient of the mean
    global loss. Identity outside a strategy.

    Args:
        loss: scalar tensor. The per-replica loss (mean over local anchors).

    Returns:
        `loss / num_replicas_in_sync`, same dtype as `loss`.
    """
    replicas = num_replicas_in_sync()
    if replicas <= 1:
        return loss
    loss = tf.convert_to_tensor(loss)
    return loss * tf.cast(1.0 / replicas, loss.dtype)


def gather_with_offset(x, local_batch_size):
    """`gather_across_replicas(x)` and `replica_offset(local_batch_size)`, ordered.

    Every replica must issue its collectives in the same order, or their
    instance keys mismatch ("Collective instance N expected type ..."). Two
    independent gathers in one graph (the int32 batch sizes and the float
    embeddings) have no order, so the runtime may start them differently on
    each replica. Here the data gather waits for the offset's gather.

    Returns:
        `(gathered, offset)`; outside a strategy `(x, 0)`.
    """
    ctx = _replica_context()
    if ctx is None:
        return x, tf.constant(0, dtype=tf.int32)
    offset = replica_offset(local_batch_size)
    with tf.control_dependencies([offset]):
        x = tf.nest.map_structure(tf.identity, x)
    return ctx.all_gather(x, axis=0), offset


def gather_rows(x, local_batch_size, gather=True):
    """`(x gathered, the global rows of this replica's batch)`.

    With `gather`, `gather_with_offset(x, local_batch_size)` and the rows
    `offset + range(local_batch_size)`; without it, `x` as it is and the rows
    `range(local_batch_size)`.
    """
    if gather:
        x, offset = gather_with_offset(x, local_batch_size)
    else:
        offset = tf.constant(0, tf.int32)
    return x, offset + tf.range(local_batch_size, dtype=tf.int32)


def all_replicas_agree(flag):
    """`True` iff the boolean scalar `flag` is `True` on every replica.

    Trainers use it for the non-finite guard: a NaN that appears in one
    replica's shard only (a per-replica loss such as CT's k-negatives) must
    make every replica skip the update and report it. Otherwise the other
    replicas' gradients would be applied alone, and the step would be logged
    as a fraction (Keras averages the replicas' logs) or not at all (on TPU it
    shows the first replica's). One SUM all-reduce of the count of replicas
    where `flag` is false; `flag` itself outside a strategy.

    Args:
        flag: boolean scalar tensor.

    Returns:
        A boolean scalar tensor, identical on all replicas.
    """
    ctx = _replica_context()
    if ctx is None:
        return tf.convert_to_tensor(flag)
    failures = ctx.all_reduce(
        tf.distribute.ReduceOp.SUM, 1.0 - tf.cast(flag, tf.float32)
    )
    return tf.equal(failures, 0.0)
