"""PCGrad gradient surgery (Yu et al., 2020) as pure tensor functions."""

import numpy as np
import tensorflow as tf


def pcgrad_project(task_gradients, shuffle=True, seed=None, epsilon=1e-12):
    """Project each task's gradient off the tasks it conflicts with (PCGrad).

    For every task `i`, start from `g_i` and visit the other tasks `j` (in a
    random order when `shuffle`, else in index order); whenever the current
    `g_i_pc` conflicts with the *original* `g_j` (`g_i_pc . g_j < 0`), remove
    the component along `g_j`:

    `g_i_pc <- g_i_pc - (g_i_pc . g_j) / ||g_j||^2 * g_j`.

    Non-conflicting pairs are left alone. This is Algorithm 1 of Yu et al.
    The update direction is the sum of the projected gradients
    (`pcgrad_combine`).

    Args:
        task_gradients: float tensor `[num_tasks, num_params]`, one flattened
            gradient per task.
        shuffle: bool. Visit the other tasks in a random order (as in the
            paper). Defaults to `True`.
        seed: int, int tensor of shape `[2]`, or None. Seed of the shuffle:
            an int is an op seed (`tf.random.shuffle`); a shape-`[2]` tensor
            makes the order a pure function of it
            (`tf.random.experimental.stateless_shuffle`, task `i` using
            `[seed[0], seed[1] * num_tasks + i]`), so a training step can be
            replayed exactly (e.g. seeded by `(seed, step)`). Defaults to
            `None`.
        epsilon: float. Added to `||g_j||^2`. Defaults to `1e-12`.

    Returns:
        float tensor `[num_tasks, num_params]`: the projected gradients.

    Examples:

    >>> g = tf.constant([[1.0, 0.0], [-1.0, 1.0]])
    >>> pcgrad_project(g, shuffle=False).numpy()
    array([[0.5, 0.5],
           [0. , 1. ]], dtype=float32)

    References:
        - [Yu et al., 2020. Gradient Surgery for Multi-Task
          Learning](https://arxiv.org/abs/2001.06782)
    """
    grads = tf.convert_to_tensor(task_gradients)
    if grads.shape.rank != 2:
        raise ValueError(
            "`task_gradients` must have shape [num_tasks, num_params]; "
            f"received shape {grads.shape}"
        )
    num_tasks = grads.shape[0]
    if num_tasks is None:
        raise ValueError("The number of tasks must be known statically.")
    dtype = grads.dtype
    squared_norms = tf.reduce_sum(tf.square(grads), axis=1)
    stateless = seed is not None and not isinstance(seed, int)
    if stateless:
        seed = tf.cast(tf.reshape(seed, [2]), tf.int64)
    projected = []
    for i in range(num_tasks):
        others = tf.constant([j for j in range(num_tasks) if j != i], tf.int32)
        if shuffle and num_tasks > 2:
            if stateless:
                task_seed = tf.stack([seed[0], seed[1] * num_tasks + i])
                others = tf.random.experimental.stateless_shuffle(others, seed=task_seed)
            else:
                others = tf.random.shuffle(others, seed=seed)
        g = grads[i]
        for k in range(num_tasks - 1):
            j = others[k]
            g_j = tf.gather(grads, j)
            dot = tf.reduce_sum(g * g_j)
            coeff = tf.where(
                dot < 0,
                dot / (tf.gather(squared_norms, j) + tf.cast(epsilon, dtype)),
                tf.zeros([], dtype),
            )
            g = g - coeff * g_j
        projected.append(g)
    return tf.stack(projected)


def pcgrad_combine(task_gradients, shuffle=True, seed=None):
    """The PCGrad update: the sum of the projected task gradients.

    Args:
        task_gradients: float tensor `[num_tasks, num_params]`.
        shuffle: bool. See `pcgrad_project`. Defaults to `True`.
        seed: int, int tensor `[2]` or None. See `pcgrad_project`. Defaults
            to `None`.

    Returns:
        float tensor `[num_params]`.
    """
    return tf.reduce_sum(pcgrad_project(task_gradients, shuffle, seed), axis=0)


def flatten_gradients(gradients, variables):
    """Concatenate per-variable gradients into one vector (`None` -> zeros)."""
    parts = []
    for g, v in zip(gradients, variables):
        if g is None:
            g = tf.zeros_like(v)
        elif isinstance(g, tf.IndexedSlices):
            g = tf.convert_to_tensor(g)
        parts.append(tf.reshape(tf.cast(g, tf.float32), [-1]))
    return tf.concat(parts, axis=0)


def unflatten_gradients(flat, variables):
    """Split a flat vector back into tensors shaped like `variables`."""
    sizes = [int(np.prod(v.shape)) for v in variables]
    pieces = tf.split(flat, sizes)
    return [
        tf.cast(tf.reshape(p, v.shape), v.dtype) for p, v in zip(pieces, variables)
    ]


def pcgrad_task_gradients(task_gradients, variables, active, shuffle=True, seed=None):
    """PCGrad's update of per-task gradients: projected, averaged over the trained tasks.

    Under a `tf.distribute` strategy the task gradients are summed over the
    replicas first (PCGrad needs the global ones), and the result is divided
    by the number of replicas, since the optimizer sums the replicas'
    gradients again.

    Args:
        task_gradients: list, one per task, of gradient lists for `variables`
            (`None` for a variable the task does not reach).
        variables: the variables.
        active: list of boolean scalars, one per task: whether the batch
            trains it (an untrained task's projected gradient is left out).
        shuffle: bool. See `pcgrad_project`. Defaults to `True`.
        seed: see `pcgrad_project`. Defaults to `None`.

    Returns:
        One gradient per variable.
    """
    ctx = tf.distribute.get_replica_context()
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    flat = tf.stack([flatten_gradients(grads, variables) for grads in task_gradients])
    if replicas > 1 and ctx is not None:
        flat = ctx.all_reduce(tf.distribute.ReduceOp.SUM, flat)  # the global task gradients
    projected = pcgrad_project(flat, shuffle=shuffle, seed=seed)
    weights = tf.stack([tf.cast(a, tf.float32) for a in active])
    combined = tf.reduce_sum(projected * weights[:, None], axis=0) / tf.maximum(
        tf.reduce_sum(weights), 1.0
    )
    if replicas > 1:
        combined = combined / replicas
    return unflatten_gradients(combined, variables)
