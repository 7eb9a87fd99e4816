"""Frozen-teacher contrastive learning on translation pairs; `fit_parallel`."""

import logging
import math
import os
import zlib

import keras
import numpy as np
import tensorflow as tf

from keras_sentemb.losses.distributed import gather_with_offset
from keras_sentemb.losses.similarity import l2_normalize
from keras_sentemb.trainers.base_trainer import BaseTrainer
from keras_sentemb.trainers.memory_queue import MemoryQueue

logger = logging.getLogger(__name__)

MODES = ("frozen_teacher", "dual", "shared")
POOLINGS = ("cls_mlp", "cls", "mean")


class _ClampConstraint(keras.constraints.Constraint):
    """Clips a variable into `[low, high]` (applied by the optimizer after each update)."""

    def __init__(self, low, high):
        self.low = float(low)
        self.high = float(high)

    def __call__(self, w):
        return keras.ops.clip(w, self.low, self.high)

    def get_config(self):
        return {"low": self.low, "high": self.high}


def _set_trainable(encoder, value):
    """Set `trainable` on an encoder and all its sublayers.

    Keras only propagates the flag to sublayers when it changes, and a clone
    of a frozen encoder is rebuilt with frozen sublayers under a trainable
    top level, so the flag is toggled.
    """
    encoder.trainable = not value
    encoder.trainable = value


def _resolve_temperature(temperature):
    if isinstance(temperature, str):
        if temperature.strip().lower() == "learnable":
            return None
        try:
            temperature = float(temperature)
        except ValueError:
            temperature = None
        if temperature is None:
            raise ValueError(
                "`temperature` must be 'learnable' or a positive float, "
                f"received {temperature!r}."
            )
    if isinstance(temperature, bool) or not isinstance(
        temperature, (int, float, np.floating)
    ) or not (math.isfinite(float(temperature)) and float(temperature) > 0):
        raise ValueError(
            "`temperature` must be 'learnable' or a positive float (e.g. 0.05, "
            f"0.01), received {temperature!r}."
        )
    return float(temperature)


class ParallelContrastive(BaseTrainer):
    """Frozen source encoder teaching a target encoder on translation pairs.

    Each training example is a translation pair (source sentence, target
    sentence). The teacher embeds the source side, the student the target
    side; the positive of student embedding `i` is teacher embedding `i`, the
    negatives are the other teacher embeddings of the (global) batch and the
    contents of a FIFO memory queue of teacher embeddings from earlier steps
    (`MemoryQueue`, MoCo-style; this step's batch is enqueued after the loss).
    With `B` the global batch and `K` the queue rows, the logits of student
    embedding `i` are `scale * cos(s_i, c_j)` over the `B + K` candidates
    `c = [teacher batch; queue]` and the loss is the softmax cross-entropy with
    label `replica_offset + i`.

    The logit scale is either fixed (`temperature=0.05` means scale 20) or
    learnable as in CLIP: stored as its log, initialised to
    `log(1 / init_temperature)` (`log(1 / 0.07)`), clamped to
    `[0, log(max_logit_scale)]` after every optimizer update (a variable
    constraint, which Keras optimizers apply after each step) and meant to be
    excluded from weight decay (`fit_parallel` does it with
    `optimizer.exclude_from_weight_decay`; see `no_decay_variables()`).

    Pooling of the trained side(s): `"cls_mlp"` ([CLS] followed, during
    training only, by a dense tanh MLP head that is dropped afterwards, as in
    SimCSE; the head is initialised to the identity so training starts from
    the student's own space), `"cls"` or `"mean"`. The frozen teacher always
    uses its own pooling and head (what it was trained with).

    Modes (the paper's ablation):
    - `"frozen_teacher"`: the teacher is frozen (never updated, run without
      dropout), the student is trained. The paper's method.
    - `"dual"`: both encoders are trained (a dual encoder); both sides use
      `pooling` (each with its own MLP head); the queue holds detached
      source embeddings.
    - `"shared"`: one encoder (the student) embeds both languages.

    The kept encoder (`.encoder`, also `.student`) is the student; after
    training call `finalize()` to set its pooling for inference (`"cls"` for
    `"cls_mlp"`).

    Args:
        student: `SentenceEncoder`. The trained target-language encoder.
        teacher: `SentenceEncoder` or None. The source-language encoder;
            required unless `mode="shared"` (where it must be None or the
            student itself).
        mode: str. `"frozen_teacher"`, `"dual"` or `"shared"`. Defaults to
            `"frozen_teacher"`.
        queue_size: int. Rows of the memory queue; `0` disables it (in-batch
            negatives only). Defaults to `10000`.
        temperature: `"learnable"` or float. Defaults to `"learnable"`.
        init_temperature: float. Initial temperature of the learnable scale.
            Defaults to `0.07` (CLIP).
        max_logit_scale: float. Upper clamp of the learnable scale (the
            log is clamped to `[0, log(max_logit_scale)]`). Defaults to `100`.
        pooling: str. `"cls_mlp"`, `"cls"` or `"mean"`. Defaults to
            `"cls_mlp"`.

    Examples:

    ```python
    teacher = SentenceEncoder.from_preset("default")
    trainer = ParallelContrastive(teacher.clone("student"), teacher)
    trainer.compile(optimizer=keras.optimizers.AdamW(2e-5), jit_compile=False)
    trainer.fit(make_parallel_dataset(pairs, trainer, batch_size=64), steps_per_epoch=100)
    student = trainer.finalize()
    ```

    References:
        - [Learning Monolingual Sentence Embeddings with Large-scale Parallel
          Translation Datasets (ACL ARR 2022)](https://openreview.net/forum?id=_vXqKfxoJfN)
        - [He et al., 2020. MoCo](https://arxiv.org/abs/1911.05722)
        - [Radford et al., 2021. CLIP](https://arxiv.org/abs/2103.00020)
    """

    def __init__(
        self,
        student,
        teacher=None,
        mode="frozen_teacher",
        queue_size=10000,
        temperature="learnable",
        init_temperature=0.07,
        max_logit_scale=100.0,
        pooling="cls_mlp",
        **kwargs,
    ):
        super().__init__(student, **kwargs)
        if mode not in MODES:
            raise ValueError(f"`mode` must be one of {MODES}, received {mode!r}.")
        if pooling not in POOLINGS:
            raise ValueError(
                f"`pooling` must be one of {POOLINGS}, received {pooling!r}."
            )
        if isinstance(queue_size, bool) or not isinstance(queue_size, int) or queue_size < 0:
            raise ValueError(
                f"`queue_size` must be an int >= 0, received {queue_size!r}."
            )
        if mode == "shared":
            if teacher is not None and teacher is not student:
                raise ValueError(
                    "mode='shared' uses one encoder for both languages; pass "
                    "teacher=None (received a separate teacher)."
                )
            teacher = None
        elif teacher is None:
            raise ValueError(f"mode={mode!r} needs a `teacher` encoder, received None.")
        elif teacher is student:
            raise ValueError(
                f"mode={mode!r} needs a teacher separate from the student "
                "(use `student.clone()`), or mode='shared'."
            )
        self.mode = mode
        self.pooling_mode = pooling
        self.queue_size = int(queue_size)
        self.fixed_temperature = _resolve_temperature(temperature)
        if not (0 < float(init_temperature) <= 1):
            raise ValueError(
                f"`init_temperature` must be in (0, 1], received {init_temperature!r}."
            )
        if not float(max_logit_scale) >= 1.0 / float(init_temperature):
            raise ValueError(
                "`max_logit_scale` must be >= 1 / init_temperature, received "
                f"{max_logit_scale!r}."
            )
        self.init_temperature = float(init_temperature)
        self.max_logit_scale = float(max_logit_scale)

        self._teacher = teacher
        if mode == "frozen_teacher":
            # Excludes the teacher's weights from `trainable_variables` (this
            # sets the flag on the given encoder object).
            _set_trainable(teacher, False)
        source = teacher if teacher is not None else student
        self.embedding_dim = (
            source.output_dim if mode == "frozen_teacher" else student.output_dim
        )
        if mode != "frozen_teacher" and source.output_dim != student.output_dim:
            raise ValueError(
                f"mode={mode!r} needs encoders of the same output size; received "
                f"{source.output_dim} and {student.output_dim}."
            )
        if pooling != "cls_mlp" and student.output_dim != self.embedding_dim:
            raise ValueError(
                f"The student's output size ({student.output_dim}) differs from the "
                f"teacher's ({self.embedding_dim}); use pooling='cls_mlp', whose "
                "head maps between them."
            )

        def mlp(name, in_dim):
            layer = keras.layers.Dense(
                self.embedding_dim,
                activation="tanh",
                kernel_initializer="identity",
                name=name,
            )
            layer.build((None, in_dim))
            return layer

        self.target_mlp = None
        self.source_mlp = None
        if pooling == "cls_mlp":
            self.target_mlp = mlp("target_mlp", student.output_dim)
            if mode == "dual":
                self.source_mlp = mlp("source_mlp", teacher.output_dim)

        self.logit_scale = None
        if self.fixed_temperature is None:
            self.logit_scale = self.add_weight(
                shape=(),
                initializer=keras.initializers.Constant(
                    math.log(1.0 / self.init_temperature)
                ),
                constraint=_ClampConstraint(0.0, math.log(self.max_logit_scale)),
                trainable=True,
                name="logit_scale",
            )
        self.queue = (
            MemoryQueue(self.queue_size, self.embedding_dim, name="memory_queue")
            if self.queue_size > 0
            else None
        )
        self._pending_keys = None
        self.temperature_tracker = keras.metrics.Mean(name="temperature")
        self.positive_tracker = keras.metrics.Mean(name="positive_cosine")
        self.queue_tracker = keras.metrics.Mean(name="queue_fill")

    # ----------------------------------------------------------- accessors
    @property
    def student(self):
        return self.encoder

    @property
    def teacher(self):
        """The source-side encoder (the student itself in `"shared"` mode)."""
        return self._teacher if self._teacher is not None else self.encoder

    def extra_metrics(self):
        return [self.temperature_tracker, self.positive_tracker, self.queue_tracker]

    def candidate_encoders(self):
        return {"student": self.encoder}

    def select_encoder(self, name):
        pass  # the student is always the kept encoder

    def no_decay_variables(self):
        """Variables to exclude from weight decay (the logit scale)."""
        return [] if self.logit_scale is None else [self.logit_scale]

    def current_logit_scale(self):
        """The multiplier of the cosine similarities, a float32 scalar tensor."""
        if self.logit_scale is None:
            return tf.constant(1.0 / self.fixed_temperature, tf.float32)
        return tf.exp(tf.cast(tf.convert_to_tensor(self.logit_scale), tf.float32))

    # ------------------------------------------------------------- encoding
    def _embed(self, encoder, inputs, training, mlp):
        states = encoder.hidden_states(inputs, training=training)
        pooling = "mean" if self.pooling_mode == "mean" else "cls"
        x = encoder.head(encoder.pool(states, inputs["padding_mask"], pooling), normalize=False)
        x = tf.cast(x, tf.float32)
        if mlp is not None and training:
            x = tf.cast(mlp(x), tf.float32)
        return l2_normalize(x)

    def embed_source(self, inputs, training=False):
        """Teacher-side embeddings (L2-normalised) of packed source inputs."""
        if self.mode == "frozen_teacher":
            out = self._teacher(inputs, training=False)
            return tf.stop_gradient(l2_normalize(tf.cast(out, tf.float32)))
        if self.mode == "dual":
            return self._embed(self._teacher, inputs, training, self.source_mlp)
        return self._embed(self.encoder, inputs, training, self.target_mlp)

    def embed_target(self, inputs, training=False):
        """Student-side embeddings (L2-normalised) of packed target inputs."""
        return self._embed(self.encoder, inputs, training, self.target_mlp)

    # ----------------------------------------------------------------- loss
    def compute_contrastive_loss(self, data, training=True):
        keys = self.embed_source(data["source"], training=training)
        queries = self.embed_target(data["target"], training=training)
        local = tf.shape(queries)[0]
        all_keys, offset = gather_with_offset(keys, local)
        labels = offset + tf.range(local, dtype=tf.int32)
        candidates = all_keys
        if self.queue is not None:
            candidates = tf.concat([all_keys, self.queue.contents()], axis=0)
        scale = self.current_logit_scale()
        logits = tf.matmul(queries, candidates, transpose_b=True) * scale
        loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        )
        if training:
            # Enqueued by train_step after the update: the keys already
            # gathered across replicas (no second, unordered collective).
            self._pending_keys = tf.stop_gradient(all_keys)
        extras = {
            "temperature": 1.0 / scale,
            "positive_cosine": tf.reduce_mean(tf.reduce_sum(queries * keys, axis=-1)),
            "queue_fill": (
                tf.cast(tf.convert_to_tensor(self.queue.count), tf.float32)
                if self.queue is not None
                else tf.constant(0.0)
            ),
        }
        return loss, extras

    def train_step(self, data):
        logs = super().train_step(data)
        if self.queue is not None and self._pending_keys is not None:
            self.queue.enqueue(self._pending_keys, gather=False)
        self._pending_keys = None
        return logs

    # ------------------------------------------------------------- finalize
    def finalize(self):
        """Set the student's inference pooling and return it.

        `"cls_mlp"` and `"cls"` give `"cls"` pooling (the MLP head is used in
        training only), `"mean"` gives `"mean"`.
        """
        self.encoder.pooling = "mean" if self.pooling_mode == "mean" else "cls"
        return self.encoder


# -------------------------------------------------------------------- data
def _as_text(x):
    if isinstance(x, (bytes, bytearray, np.bytes_)):
        return bytes(x).decode("utf-8", errors="replace")
    if not isinstance(x, str):
        raise ValueError(f"Pair items must be str, received {type(x).__name__}: {x!r:.60}")
    return x


def load_parallel_pairs(pairs, limit=None):
    """Translation pairs as a list of (source, target) str tuples.

    Args:
        pairs: a path to a tab-separated UTF-8 file (`source<TAB>target`,
            further columns such as Tatoeba's attribution are ignored), a
            list of 2-tuples, or a `tf.data.Dataset` of `(source, target)`
            string tuples or dicts with `"source"` and `"target"`.
        limit: int or None. Keep at most this many pairs.

    Returns:
        list of (source, target); pairs with an empty side are dropped.
    """
    from keras_sentemb.data.corpus import read_pairs_tsv

    if isinstance(pairs, (str, os.PathLike)):
        path = os.fspath(pairs)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Parallel pairs file not found: {path}")
        out = read_pairs_tsv(path, columns=(0, 1))
    elif isinstance(pairs, tf.data.Dataset):
        spec = pairs.element_spec
        if isinstance(spec, dict):
            if not {"source", "target"} <= set(spec):
                raise ValueError(
                    "A dataset of dicts must have 'source' and 'target' keys; "
                    f"received keys {sorted(spec)}."
                )
            pairs = pairs.map(lambda d: (d["source"], d["target"]))
        elif not (isinstance(spec, tuple) and len(spec) == 2):
            raise ValueError(
                f"The dataset must yield (source, target) string pairs; it yields {spec}."
            )
        if limit is not None:
            pairs = pairs.take(limit)
        out = [(_as_text(a), _as_text(b)) for a, b in pairs.as_numpy_iterator()]
    elif isinstance(pairs, (list, tuple)):
        out = []
        for i, item in enumerate(pairs):
            if not isinstance(item, (list, tuple)) or len(item) < 2:
                raise ValueError(
                    f"Item {i} of `pairs` must be a (source, target) tuple, received {item!r:.80}."
                )
            out.append((_as_text(item[0]), _as_text(item[1])))
    else:
        raise ValueError(
            "`pairs` must be a TSV path, a list of (source, target) tuples or a "
            f"tf.data.Dataset, received {type(pairs).__name__}."
        )
    out = [(a.strip(), b.strip()) for a, b in out]
    out = [(a, b) for a, b in out if a and b]
    if limit is not None:
        out = out[: int(limit)]
    if not out:
        raise ValueError("`pairs` holds no pair with two non-empty sides.")
    return out


def split_pairs(pairs, eval_size=1000, seed=0):
    """Deterministic held-out split of translation pairs, grouped by sentence.

    Source sentences are ordered by a CRC32 hash of `seed` and their text, and
    whole source groups are moved to the held-out set (one pair per source, and
    no target twice) until it has `eval_size` pairs. Every training pair that
    shares its source or its target with a held-out pair is removed, so no
    held-out sentence is seen in training. The split depends only on the
    pairs' texts, not their order.

    Args:
        pairs: list of (source, target).
        eval_size: int. Held-out pairs; `0` gives an empty held-out set.
            Defaults to `1000`.
        seed: int. Changes the hash order. Defaults to `0`.

    Returns:
        `(train_pairs, heldout_pairs)`.
    """
    if isinstance(eval_size, bool) or not isinstance(eval_size, int) or eval_size < 0:
        raise ValueError(f"`eval_size` must be an int >= 0, received {eval_size!r}.")
    if eval_size == 0:
        return list(pairs), []
    by_source = {}
    for a, b in pairs:
        by_source.setdefault(a, []).append(b)
    key = lambda s: zlib.crc32(f"{seed}\t{s}".encode("utf-8"))  # noqa: E731
    heldout, used_targets = [], set()
    for source in sorted(by_source, key=lambda s: (key(s), s)):
        if len(heldout) >= eval_size:
            break
        target = next((t for t in by_source[source] if t not in used_targets), None)
        if target is None:
            continue
        heldout.append((source, target))
        used_targets.add(target)
    if len(heldout) >= len(by_source):
        raise ValueError(
            f"`eval_size={eval_size}` leaves no training pair ({len(by_source)} distinct sources)."
        )
    held_sources = {a for a, _ in heldout}
    train = [(a, b) for a, b in pairs if a not in held_sources and b not in used_targets]
    return train, heldout


def make_parallel_dataset(pairs, trainer, batch_size, max_length=None, seed=0, repeat=True):
    """A shuffled, repeated, tokenized `tf.data.Dataset` of translation pairs.

    Elements are `{"source": packed, "target": packed}`, the source packed
    by the teacher's tokenizer and the target by the student's, each padded
    to its batch maximum. Batches have exactly `batch_size` pairs.
    """
    src = tf.constant([a for a, _ in pairs])
    tgt = tf.constant([b for _, b in pairs])
    ds = tf.data.Dataset.from_tensor_slices({"source": src, "target": tgt})
    ds = ds.shuffle(min(len(pairs), 100_000), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=True)
    teacher, student = trainer.teacher, trainer.student

    def pack(batch):
        return {
            "source": teacher.preprocess(batch["source"], max_length),
            "target": student.preprocess(batch["target"], max_length),
        }

    return ds.map(pack, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def make_optimizer(trainer, learning_rate, steps, weight_decay=0.01, warmup_ratio=0.1):
    """AdamW with linear warmup + cosine decay; logit scale, biases and norms not decayed."""
    warmup = int(round(warmup_ratio * steps))
    decay_steps = max(1, steps - warmup)
    if warmup > 0:
        schedule = keras.optimizers.schedules.CosineDecay(
            0.0, decay_steps, alpha=0.0, warmup_target=learning_rate, warmup_steps=warmup
        )
    else:
        schedule = keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps)
    optimizer = keras.optimizers.AdamW(learning_rate=schedule, weight_decay=weight_decay)
    optimizer.exclude_from_weight_decay(
        var_list=trainer.no_decay_variables(),
        var_names=["bias", "gamma", "beta", "logit_scale"],
    )
    return optimizer


def _load(spec, max_length):
    from keras_sentemb.models import SentenceEncoder

    if isinstance(spec, SentenceEncoder):
        return spec
    if not isinstance(spec, (str, os.PathLike)):
        raise ValueError(
            f"Expected a SentenceEncoder or a model name/folder, received {type(spec).__name__}."
        )
    return SentenceEncoder.from_preset(os.fspath(spec))


# --------------------------------------------------------------------- api
def fit_parallel(
    pairs,
    model="default",
    teacher=None,
    student=None,
    output=None,
    mode="frozen_teacher",
    queue_size=10000,
    temperature="learnable",
    init_temperature=0.07,
    max_logit_scale=100.0,
    pooling="cls_mlp",
    steps=1000,
    batch_size=64,
    learning_rate=3e-5,
    weight_decay=0.01,
    warmup_ratio=0.1,
    max_length=64,
    eval_size=1000,
    seed=0,
    track_alignment=True,
    track_every=0,
    plot=None,
    callbacks=None,
    verbose=1,
):
    """Train a target-language student from a frozen source-language teacher.

    Contrastive learning on translation pairs (see `ParallelContrastive`):
    the teacher embeds the source sentence, the student the target sentence;
    the positive is the translation, the negatives are the other teacher
    embeddings of the batch plus a memory queue of earlier ones. A
    deterministic held-out split (`split_pairs`, `eval_size` pairs) is kept
    out of training; bitext retrieval accuracy on it (both directions) is
    measured before and after training and logged. With `track_alignment`,
    alignment and uniformity of the student on the held-out target sentences
    (alignment on the teacher/student translation pairs) are logged during
    training and their trajectory is plotted to `plot` (default
    `output/alignment_uniformity.png` when `output` is given).

    Args:
        pairs: TSV path (`source<TAB>target[<TAB>...]`), list of
            (source, target), or `tf.data.Dataset` of pairs.
        model: str or `SentenceEncoder`. Initialises both the teacher and the
            student unless `teacher` / `student` say otherwise. Defaults to
            `"default"`.
        teacher: str, `SentenceEncoder` or None. The source-side encoder.
            Defaults to `None` (= `model`).
        student: str, `SentenceEncoder` or None. The student's
            initialisation. Defaults to `None` (a copy of `model`).
        output: str or None. Folder to save the student in. Defaults to None.
        mode: str. `"frozen_teacher"`, `"dual"` or `"shared"`. Defaults to
            `"frozen_teacher"`.
        queue_size: int. Memory queue rows (0: in-batch only). Defaults to
            `10000`.
        temperature: `"learnable"` or float. Defaults to `"learnable"`.
        init_temperature: float. Defaults to `0.07`.
        max_logit_scale: float. Defaults to `100`.
        pooling: str. `"cls_mlp"`, `"cls"` or `"mean"`. Defaults to
            `"cls_mlp"`.
        steps: int. Training steps. Defaults to `1000`.
        batch_size: int. Pairs per step (global). Defaults to `64`.
        learning_rate: float. Peak learning rate (warmup then cosine decay).
            Defaults to `3e-5`.
        weight_decay: float. AdamW weight decay. Defaults to `0.01`.
        warmup_ratio: float. Fraction of steps of linear warmup. Defaults to
            `0.1`.
        max_length: int. Token limit per sentence. Defaults to `64`.
        eval_size: int. Held-out pairs. Defaults to `1000`.
        seed: int. Split and shuffle seed. Defaults to `0`.
        track_alignment: bool. Log alignment/uniformity. Defaults to `True`.
        track_every: int. Steps between tracking points (`0`: steps // 10).
            Defaults to `0`.
        plot: str or None. PNG path of the trajectory plot. Defaults to None.
        callbacks: list of Keras callbacks or None.
        verbose: int. Keras verbosity. Defaults to `1`.

    Returns:
        The trained student `SentenceEncoder` (pooling set for inference).
        Its `parallel_report` attribute holds the held-out retrieval results
        before and after training and the alignment/uniformity history.

    Examples:

    ```python
    student = fit_parallel("cmn-eng.tsv", steps=300, batch_size=32,
                           max_length=48, output="zh_student")
    ```
    """
    import json

    from keras_sentemb.evaluation.alignment_uniformity import AlignmentUniformityTracker
    from keras_sentemb.evaluation.retrieval import evaluate_bitext_retrieval

    for name, value in (("steps", steps), ("batch_size", batch_size), ("max_length", max_length)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive int, received {value!r}.")
    if not (isinstance(learning_rate, (int, float)) and learning_rate > 0):
        raise ValueError(f"`learning_rate` must be > 0, received {learning_rate!r}.")
    if mode not in MODES:
        raise ValueError(f"`mode` must be one of {MODES}, received {mode!r}.")
    _resolve_temperature(temperature)
    all_pairs = load_parallel_pairs(pairs)
    train_pairs, heldout = split_pairs(all_pairs, eval_size=eval_size, seed=seed)
    if len(train_pairs) < batch_size:
        raise ValueError(
            f"Only {len(train_pairs)} training pairs for batch_size={batch_size}."
        )
    logger.info("parallel: %d training pairs, %d held out", len(train_pairs), len(heldout))

    base = _load(model, max_length)
    teacher_enc = base if teacher is None else _load(teacher, max_length)
    source_init = teacher_enc  # the untrained source side (dual-mode reference)
    student_enc = (base if student is None else _load(student, max_length))
    # The student is always a fresh copy (the caller's encoder is never
    # trained in place); so is a dual-mode teacher, which is trained too.
    student_enc = student_enc.clone(name="student")
    _set_trainable(student_enc, True)  # a clone of a frozen encoder inherits the flag
    if mode == "shared":
        teacher_enc = None
    elif mode == "dual":
        teacher_enc = teacher_enc.clone(name="teacher")
        _set_trainable(teacher_enc, True)

    trainer = ParallelContrastive(
        student_enc,
        teacher_enc,
        mode=mode,
        queue_size=queue_size,
        temperature=temperature,
        init_temperature=init_temperature,
        max_logit_scale=max_logit_scale,
        pooling=pooling,
    )
    report = {"train_pairs": len(train_pairs), "heldout_pairs": len(heldout), "mode": mode}
    eval_pooling = "mean" if pooling == "mean" else "cls"
    if heldout:
        report["retrieval_before"] = evaluate_bitext_retrieval(
            trainer.teacher, trainer.student, heldout, max_length=max_length
        )
        logger.info("held-out retrieval before: %s", report["retrieval_before"])

    dataset = make_parallel_dataset(train_pairs, trainer, batch_size, max_length, seed=seed)
    trainer.compile(
        optimizer=make_optimizer(trainer, float(learning_rate), steps, weight_decay, warmup_ratio),
        jit_compile=False,
    )
    callbacks = list(callbacks or [])
    tracker = None
    if track_alignment and heldout:
        every = track_every or max(1, steps // 10)
        tracker = AlignmentUniformityTracker(
            [(a, b) for a, b in heldout[:500]],
            every=every,
            target_pooling=eval_pooling,
            max_length=max_length,
        )
        callbacks.append(tracker)
    trainer.fit(dataset, epochs=1, steps_per_epoch=steps, callbacks=callbacks, verbose=verbose)
    encoder = trainer.finalize()

    if heldout:
        report["retrieval_after"] = evaluate_bitext_retrieval(
            trainer.teacher, encoder, heldout, max_length=max_length
        )
        if mode == "dual":
            report["retrieval_after_initial_teacher"] = evaluate_bitext_retrieval(
                source_init, encoder, heldout, max_length=max_length
            )
        logger.info("held-out retrieval after: %s", report["retrieval_after"])
    if trainer.logit_scale is not None:
        report["final_temperature"] = float(1.0 / np.exp(np.asarray(trainer.logit_scale)))
    if tracker is not None:
        report["alignment_uniformity"] = tracker.history
        plot = plot or (os.path.join(output, "alignment_uniformity.png") if output else None)
        if plot:
            os.makedirs(os.path.dirname(os.path.abspath(plot)), exist_ok=True)
            tracker.plot(plot)
            report["plot"] = plot
    if output is not None:
        encoder.save(output)
        with open(os.path.join(output, "parallel_report.json"), "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    object.__setattr__(encoder, "parallel_report", report)  # untracked
    return encoder
