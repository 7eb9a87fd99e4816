"""Shared plumbing of the `fit_*` functions: encoder, tf.data, dev selection."""

import logging
import math
import os

import keras
import numpy as np
import tensorflow as tf

from keras_sentemb.data.batching import tokenize_columns
from keras_sentemb.trainers.callbacks import NonFiniteGuard
from keras_sentemb.trainers.callbacks import STSDevEvaluation

logger = logging.getLogger(__name__)


def resolve_encoder(model, max_length=None):
    """A `SentenceEncoder` from a preset name / folder, or the given encoder."""
    from keras_sentemb.models import SentenceEncoder

    if isinstance(model, SentenceEncoder):
        encoder = model
    elif isinstance(model, (str, os.PathLike)):
        encoder = SentenceEncoder.from_preset(os.fspath(model))
    else:
        raise ValueError(
            "`model` must be a preset name, a model folder or a SentenceEncoder. "
            f"Received: {type(model).__name__}."
        )
    if max_length is not None:
        max_length = int(max_length)
        limit = int(encoder.backbone.max_sequence_length)
        if not 3 <= max_length <= limit:
            raise ValueError(
                f"`max_length` must be an int in [3, {limit}], received {max_length!r}."
            )
    return encoder


def check_positive(value, name, kind=int):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"`{name}` must be a positive {kind.__name__}. Received: {value!r}.")
    if kind is int and int(value) != value:
        raise ValueError(f"`{name}` must be a positive int. Received: {value!r}.")
    if not value > 0:
        raise ValueError(f"`{name}` must be a positive {kind.__name__}. Received: {value!r}.")
    return kind(value)


def columns_dataset(encoder, columns, batch_size, max_length, seed=0, extra=None):
    """Infinite, shuffled, batched dataset of tokenized string columns.

    Args:
        encoder: `SentenceEncoder` (tokenizer and packing).
        columns: dict name -> list of str (same lengths).
        batch_size: int. Examples per batch (the last partial batch of an
            epoch is dropped so every batch has the same size).
        max_length: int. Tokens per sentence, special tokens included.
        seed: int. Shuffle seed.
        extra: dict name -> list of numbers passed through untokenized
            (e.g. labels).

    Returns:
        A `tf.data.Dataset` of dicts `{name: packed inputs, ...}`.
    """
    names = list(columns)
    n = len(columns[names[0]])
    if n < batch_size:
        raise ValueError(
            f"The training data has {n} examples, fewer than batch_size={batch_size}."
        )
    tensors = {k: tf.constant(list(v), tf.string) for k, v in columns.items()}
    for k, v in (extra or {}).items():
        tensors[k] = tf.constant(np.asarray(v))
    ds = tf.data.Dataset.from_tensor_slices(tensors)
    ds = ds.shuffle(min(n, 100_000), seed=seed, reshuffle_each_iteration=True).repeat()
    ds = ds.batch(batch_size, drop_remainder=True)
    return tokenize_columns(encoder, ds, names, max_length)


def default_dev_pairs():
    """STS-B dev pairs (SentEval version): shared data if present, else bundled."""
    from keras_sentemb.data.resources import bundled_sts_dir
    from keras_sentemb.evaluation.readers import read_stsb

    return read_stsb(bundled_sts_dir(), "dev")


def resolve_dev(dev):
    """`dev` argument -> list of (s1, s2, score) or None."""
    from keras_sentemb.evaluation.readers import read_stsb

    if dev is None or (isinstance(dev, str) and dev.lower() in ("none", "")):
        return None
    if isinstance(dev, str) and dev.lower() in ("auto", "stsb"):
        return default_dev_pairs()
    if isinstance(dev, (str, os.PathLike)):
        return read_stsb(os.fspath(dev), "dev")
    if isinstance(dev, (list, tuple)):
        return list(dev)
    raise ValueError(
        "`dev` must be 'stsb', None, an STS-B file/folder or a list of "
        f"(s1, s2, score). Received: {type(dev).__name__}."
    )


def fit_with_selection(trainer, dataset, steps, eval_every=100, dev_pairs=None,
                       callbacks=None, verbose="auto"):
    """`trainer.fit` for `steps` steps, in epochs of `eval_every` steps.

    Adds `NonFiniteGuard` and, with `dev_pairs`, `STSDevEvaluation` (scores
    the candidate encoders before training, every `eval_every` steps and at
    the end, and keeps the best, the starting weights included). Epochs of
    `eval_every` steps make `BackupAndRestore(save_freq="epoch")` resume at a
    dev-evaluation boundary with the step count (and so the schedule)
    restored. Returns the `STSDevEvaluation` callback (or None), also stored
    as `trainer.selection`.
    """
    steps = check_positive(steps, "steps")
    steps_per_epoch = max(1, min(int(eval_every), steps))
    epochs = math.ceil(steps / steps_per_epoch)
    cbs = [NonFiniteGuard()]
    dev_cb = None
    if dev_pairs:
        dev_cb = STSDevEvaluation(dev_pairs, every=steps_per_epoch)
        cbs.append(dev_cb)
    cbs.extend(callbacks or [])
    trainer.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch,
                callbacks=cbs, verbose=verbose)
    if dev_cb is not None:
        logger.info("dev history (step, spearman per candidate): %s", dev_cb.history)
    trainer.selection = dev_cb
    return dev_cb


def run_fit(
    trainer,
    dataset,
    steps,
    learning_rate,
    dev_pairs=None,
    eval_every=125,
    weight_decay=0.0,
    warmup_ratio=0.0,
    callbacks=None,
    verbose="auto",
):
    """Compiles `trainer` with AdamW (linear decay) and fits `steps` steps.

    See `fit_with_selection` for the dev selection. Returns the
    `STSDevEvaluation` callback (or None).
    """
    warmup = int(round(warmup_ratio * steps))
    schedule = _linear_schedule(learning_rate, steps, warmup)
    trainer.compile(
        optimizer=keras.optimizers.AdamW(
            learning_rate=schedule, weight_decay=weight_decay, epsilon=1e-6
        ),
        jit_compile=False,
    )
    return fit_with_selection(trainer, dataset, steps, eval_every, dev_pairs, callbacks, verbose)


def _linear_schedule(learning_rate, steps, warmup):
    """Linear warm-up then linear decay to 0 (Hugging Face's default)."""
    lr = float(learning_rate)

    class _Linear(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = tf.cast(step, "float32")
            up = step / float(max(warmup, 1)) if warmup else tf.constant(1.0)
            down = tf.maximum(0.0, (float(steps) - step) / float(max(steps - warmup, 1)))
            return lr * tf.minimum(up, down) if warmup else lr * down

        def get_config(self):
            return {}

    return _Linear()


def epoch_steps(n, batch_size):
    """Steps in one epoch over `n` examples (at least 1)."""
    return max(1, math.floor(n / batch_size))


def scope(strategy):
    """`strategy.scope()`, or a no-op context for None."""
    import contextlib

    return strategy.scope() if strategy is not None else contextlib.nullcontext()
