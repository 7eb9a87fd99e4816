"""How encoding and training spend a CPU's cores: independent work side by side.

TensorFlow splits each op of a forward pass across its intra-op threads. The
many small ops of a Transformer (layer norms, softmax, reshapes) parallelise
poorly, so a second core adds only about 1.6x on a 2-core host. Running two
batches at once, each on its share of the cores, keeps every core busy:

- `encode(parallel_batches=...)` computes that many batches concurrently on
  Python threads (the compiled forward pass releases the GIL). By default 2
  on a host without an accelerator, 1 with one.
- `configure_encode_threads()` gives each concurrent batch
  `cores // parallel_batches` intra-op threads. It is process-wide and must
  run before TensorFlow executes anything, so the `keras-sentemb encode`
  command calls it and library users may.
- `configure_train_threads()` does the same for a training step whose
  encoder passes are independent (CT's two towers, SimCSE's two dropout
  views, ConSERT's two augmented views): TensorFlow then runs the passes side by side, each on its share
  of the cores, forward and backward. `keras-sentemb train` calls it for
  those methods. A step with one pass wants every thread per op.
- `encode(max_batch_tokens=...)` caps a batch at that many padded tokens
  (rows x width), 2,048 by default on a host without an accelerator: a
  smaller batch whose activations stay in cache is faster per sentence on a
  CPU, and its memory stays bounded however long the sentences are.

Measured on a 2-core AVX2 host, 2,000 wiki sentences, batch 128 (README):
one batch at a time 139 sentences/s; two at once with TensorFlow's default
threads 148; two at once with one intra-op thread each 158; the same with at
most 2,048 padded tokens per batch 177.
"""

from concurrent.futures import FIRST_COMPLETED
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait
import os

import numpy as np
import tensorflow as tf

# Concurrent batches on a CPU-only host. More than two adds activation memory
# without speed on the hosts measured.
CPU_PARALLEL_BATCHES = 2
# Packed batches waiting per thread (token ids only, no activations).
QUEUED_PER_THREAD = 4
# Padded tokens (rows x width) per batch on a CPU-only host. The hidden
# states of 2,048 tokens take 3 MiB at width 384 and the FFN's 12 MiB, so a
# batch's working set stays in the last-level cache; bigger batches run out
# of it. On 2,000 wiki sentences 1,024-4,096 were equally fast and 8,192 or
# no cap 12 % slower; on the 2,000 longest, 1,024-4,096 within 4 % and no
# cap 25 % slower (README, benchmarks/encode_batch_tokens.py). Smaller caps
# use less memory; 2,048 keeps batches of 16 rows at width 128. It also
# bounds a batch's activation memory.
CPU_MAX_BATCH_TOKENS = 2048
# Independent encoder passes of a CT or unsupervised SimCSE training step.
TRAIN_SIDE_BY_SIDE_PASSES = 2


def cpu_count():
    """Cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def has_accelerator():
    """True when TensorFlow sees a GPU or TPU."""
    return any(tf.config.list_physical_devices(kind) for kind in ("GPU", "TPU"))


def default_parallel_batches():
    """2 on a CPU-only host with 2 or more cores, else 1."""
    if has_accelerator() or cpu_count() < 2:
        return 1
    return CPU_PARALLEL_BATCHES


def default_max_batch_tokens():
    """`CPU_MAX_BATCH_TOKENS` on a host without GPU or TPU; `None` (no cap) with one."""
    return None if has_accelerator() else CPU_MAX_BATCH_TOKENS


def _positive_int_or_default(value, name, default):
    """`None` -> `default()`; else `value` as a positive int, or a clear error."""
    if value is None:
        return default()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"`{name}` must be a positive int or None. Received: {name}={value!r}.")
    return int(value)


def check_max_batch_tokens(max_batch_tokens):
    """`None` -> `default_max_batch_tokens()`; else a positive int, or a clear error."""
    return _positive_int_or_default(
        max_batch_tokens, "max_batch_tokens", default_max_batch_tokens
    )


def check_parallel_batches(parallel_batches):
    """`None` -> `default_parallel_batches()`; else a positive int, or a clear error."""
    return _positive_int_or_default(
        parallel_batches, "parallel_batches", default_parallel_batches
    )


def configure_encode_threads(parallel_batches=None):
    """Split the cores between concurrent encode batches, if still possible.

    Sets TensorFlow's intra-op threads to `cores // parallel_batches` (at
    least 1) and its inter-op threads to at least `parallel_batches` (two
    batches cannot run at once on one inter-op thread). Leaves everything
    as it is when the user already set a thread count, when the split would
    change nothing (one batch at a time), or when TensorFlow has already
    started (the settings are then fixed).

    Args:
        parallel_batches: int or None. Defaults to `default_parallel_batches()`.

    Returns:
        bool: whether the threads were set.
    """
    return _split_cores(check_parallel_batches(parallel_batches))


def configure_train_threads(passes=TRAIN_SIDE_BY_SIDE_PASSES):
    """Split the cores between the independent passes of a training step, if still possible.

    A step of Contrastive Tension (two towers), unsupervised SimCSE (two
    dropout views) or ConSERT (two augmented views) runs two encoder passes that do not depend on each
    other, forward and backward. With each pass on its share of the cores
    (intra-op threads `cores // passes`) TensorFlow runs them side by side
    instead of splitting every small op over all cores: on a 2-core host CT
    K=7 ran 2 % faster in float32 and 8 % in bfloat16, SimCSE (against one
    pass over the doubled batch) 10.5 % and 7 %, ConSERT 5.5 % in float32
    (docs/performance.md). `keras-sentemb train` calls it for those methods;
    call it first thing in a script that trains them. A step with a single
    pass (masked language modelling) would run on fewer cores: do not call it
    there. Does nothing with a GPU or TPU, on one core, when the user already
    set a thread count, or once TensorFlow has started.

    Args:
        passes: int. Independent passes per step. Defaults to 2.

    Returns:
        bool: whether the threads were set.
    """
    passes = _positive_int_or_default(passes, "passes", lambda: TRAIN_SIDE_BY_SIDE_PASSES)
    if has_accelerator() or cpu_count() < 2:
        return False
    return _split_cores(passes)


def _split_cores(ways):
    """Intra-op threads `cores // ways`, inter-op at least `ways`; see the callers."""
    threading = tf.config.threading
    if ways == 1:
        return False
    if threading.get_intra_op_parallelism_threads() or threading.get_inter_op_parallelism_threads():
        return False  # the user's choice
    try:
        threading.set_intra_op_parallelism_threads(max(1, cpu_count() // ways))
        threading.set_inter_op_parallelism_threads(max(ways, cpu_count()))
    except RuntimeError:  # TensorFlow already initialised its thread pools
        return False
    return True


def run_batches(fn, batches, parallel_batches=None):
    """Yield `(indices, fn(token_ids, mask) as numpy)` for each packed batch.

    `batches` yields `(indices, token_ids, mask)`. With `parallel_batches`
    above 1, a pool of that many threads computes batches while the next
    ones are packed. Results are yielded as they finish, not in the order
    given: batches differ in length (`packed_batches` gives the longest
    first), and waiting for a long one would leave the other threads idle.
    At most `QUEUED_PER_THREAD * parallel_batches` packed batches wait, and
    only `parallel_batches` are computed at once (their activations are what
    memory holds).
    """
    parallel_batches = check_parallel_batches(parallel_batches)
    if parallel_batches == 1:
        for idx, token_ids, mask in batches:
            yield idx, fn(token_ids, mask).numpy()
        return

    def compute(token_ids, mask):
        return fn(token_ids, mask).numpy()

    limit = QUEUED_PER_THREAD * parallel_batches
    with ThreadPoolExecutor(parallel_batches, thread_name_prefix="encode") as pool:
        pending = {}
        try:
            for idx, token_ids, mask in batches:
                pending[pool.submit(compute, token_ids, mask)] = idx
                if len(pending) >= limit:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        yield pending.pop(future), future.result()
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield pending.pop(future), future.result()
        finally:
            for future in pending:  # an error or a closed generator: drop the rest
                future.cancel()
