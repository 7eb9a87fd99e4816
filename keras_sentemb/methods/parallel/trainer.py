"""`ParallelContrastive`: a frozen teacher teaching a student on translation pairs."""

import keras
import tensorflow as tf

from keras_sentemb import validation
from keras_sentemb.losses.distributed import gather_with_offset
from keras_sentemb.losses.info_nce import info_nce_loss
from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.losses.similarity import l2_normalize
from keras_sentemb.methods.parallel.config import PAPER_POOLING
from keras_sentemb.methods.parallel.config import ParallelConfig
from keras_sentemb.methods.parallel.config import resolve_temperature
from keras_sentemb.models.logit_scale import LogitScale
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.models.projection_mlp import ProjectionMLP
from keras_sentemb.trainers.training_head import resolve_training_mlp
from keras_sentemb.trainers.base_trainer import BaseTrainer
from keras_sentemb.models.memory_queue import MemoryQueue



def set_trainable(encoder, value):
    """Set `trainable` on an encoder and all its sublayers.

    Keras only propagates the flag to sublayers when it changes, and a clone
    of a frozen encoder is rebuilt with frozen sublayers under a trainable
    top level, so the flag is toggled.
    """
    encoder.trainable = not value
    encoder.trainable = value


def _check_teacher(mode, teacher, student):
    """The teacher `ParallelContrastive` keeps for `mode`: None for `"shared"`.

    The other modes need a teacher that is not the student itself.
    """
    if mode == "shared":
        if teacher is not None and teacher is not student:
            raise ValueError(
                "mode='shared' uses one encoder for both languages; pass "
                "teacher=None (received a separate teacher)."
            )
        return None
    if teacher is None:
        raise ValueError(f"mode={mode!r} needs a `teacher` encoder, received None.")
    if teacher is student:
        raise ValueError(
            f"mode={mode!r} needs a teacher separate from the student "
            "(use `student.clone()`), or mode='shared'."
        )
    return teacher


def _embedding_dim(mode, mlp, teacher, student):
    """The size of the compared embeddings: the frozen teacher's, else the student's.

    Trained sides must agree in size, and without a head (`mlp="none"`) the
    student must already have that size.
    """
    source = teacher if teacher is not None else student
    embedding_dim = source.output_dim if mode == "frozen_teacher" else student.output_dim
    if mode != "frozen_teacher" and source.output_dim != student.output_dim:
        raise ValueError(
            f"mode={mode!r} needs encoders of the same output size; received "
            f"{source.output_dim} and {student.output_dim}."
        )
    if mlp == "none" and student.output_dim != embedding_dim:
        raise ValueError(
            f"The student's output size ({student.output_dim}) differs from the "
            f"teacher's ({embedding_dim}); use mlp='train', whose head maps "
            "between them."
        )
    return embedding_dim


def _identity_head(name, in_dim, out_dim):
    """A built training-only `ProjectionMLP` `in_dim -> out_dim`, initialised to the identity."""
    layer = ProjectionMLP(out_dim, initializer="identity", name=name)
    layer.build((None, in_dim))
    return layer


@keras.saving.register_keras_serializable(package="keras_sentemb")
class ParallelContrastive(BaseTrainer):
    """Frozen source encoder teaching a target encoder on translation pairs.

    Each training example is a translation pair (source sentence, target
    sentence). The teacher embeds the source side, the student the target
    side; the positive of student embedding `i` is teacher embedding `i`, the
    negatives are the other teacher embeddings of the (global) batch and the
    contents of a FIFO memory queue of teacher embeddings from earlier steps
    (`MemoryQueue`, MoCo-style; this step's batch is enqueued after the
    update). With `B` the global batch and `K` the queue rows, the logits of
    student embedding `i` are `scale * cos(s_i, c_j)` over the `B + K`
    candidates `c = [teacher batch; queue]` and the loss is the softmax
    cross-entropy with label `replica_offset + i` (`info_nce_loss` with
    `extra_candidates=queue`).

    The logit scale is a `LogitScale`: fixed (`temperature=0.05` means
    scale 20) or learnable as in CLIP (initialised to `1 / init_temperature`,
    clamped to `[1, max_logit_scale]` by a weight constraint, excluded from
    weight decay).

    The trained side(s) pool with `pooling` (the paper's [CLS]) and, with
    `mlp="train"`, go through a training-only `ProjectionMLP` initialised to
    the identity, dropped afterwards as in SimCSE. The frozen teacher always
    uses its own pooling and head (what it was trained with).

    Modes (the paper's ablation):
    - `"frozen_teacher"`: the teacher is frozen (never updated, run without
      dropout), the student is trained. The paper's method.
    - `"dual"`: both encoders are trained (a dual encoder); both sides use
      `pooling` (each with its own MLP head); the queue holds detached
      source embeddings.
    - `"shared"`: one encoder (the student) embeds both languages.

    The kept encoder (`.encoder`, also `.student`) is the student. The
    defaults are the method's (`ParallelConfig`, in `config.py` beside this
    module): the paper's [CLS] pooling, and its `mlp="auto"` resolved for
    that pooling (`"train"`).

    Args:
        student: `SentenceEncoder`. The trained target-language encoder.
        teacher: `SentenceEncoder` or None. The source-language encoder;
            required unless `mode="shared"` (where it must be None).
        config: `ParallelConfig` (or a dict of its options). The method's
            options the trainer uses: `mode` (`"frozen_teacher"`, `"dual"`
            or `"shared"`), `queue_size` (rows of the memory queue; `0`:
            in-batch negatives only), `temperature` (`"learnable"` or a
            float), `init_temperature`, `max_logit_scale` (upper clamp of the
            learnable scale) and `mlp` (`"auto"` resolved for `pooling`,
            `"train"` or `"none"`). Defaults to the method's.
        pooling: str. The trained side's pooling. Defaults to the paper's
            [CLS].
        mini_batch_size: int or None. GradCache chunk size (see
            `BaseTrainer`). Defaults to `None` (off).
        **kwargs: single options overriding `config`'s (`mode="dual"`), and
            Keras `Model` arguments.

    Examples:

    ```python
    teacher = SentenceEncoder.from_preset("default")
    trainer = ParallelContrastive(teacher.clone("student"), teacher)
    trainer.compile(optimizer=keras.optimizers.AdamW(2e-5))
    trainer.fit(dataset, steps_per_epoch=100)  # {"source", "target"} batches
    student = trainer.encoder
    ```

    References:
        - [Learning Monolingual Sentence Embeddings with Large-scale Parallel
          Translation Datasets (ACL ARR 2022)](https://openreview.net/forum?id=_vXqKfxoJfN)
        - [He et al., 2020. MoCo](https://arxiv.org/abs/1911.05722)
        - [Radford et al., 2021. CLIP](https://arxiv.org/abs/2103.00020)
    """

    encoder_arguments = ("encoder", "teacher")

    config_class = ParallelConfig

    def __init__(self, encoder, teacher=None, config=None, pooling=PAPER_POOLING, **kwargs):
        super().__init__(encoder, config=config, **kwargs)
        config = self.config
        student = encoder
        mode = self.mode = config.mode
        self.pooling = parse_pooling(pooling, student.num_layers)
        mlp = resolve_training_mlp(config.mlp, self.pooling)
        self.queue_size = config.queue_size
        fixed = resolve_temperature(config.temperature)
        self.init_temperature = config.init_temperature
        if self.init_temperature > 1:
            raise ValueError("`init_temperature` must be in (0, 1], received "
                             f"{config.init_temperature!r}.")
        max_logit_scale = self.max_logit_scale = validation.positive_float(
            config.max_logit_scale, "max_logit_scale")
        teacher = _check_teacher(mode, teacher, student)
        self._teacher = teacher
        if mode == "frozen_teacher":
            # Excludes the teacher's weights from `trainable_variables`.
            set_trainable(teacher, False)
        self.embedding_dim = _embedding_dim(mode, mlp, teacher, student)
        self.target_mlp = (
            _identity_head("target_mlp", student.output_dim, self.embedding_dim)
            if mlp == "train" else None
        )
        self.source_mlp = (
            _identity_head("source_mlp", teacher.output_dim, self.embedding_dim)
            if mlp == "train" and mode == "dual" else None
        )
        self.logit_scale = self._make_logit_scale(fixed, max_logit_scale)
        self.queue = (
            MemoryQueue(self.queue_size, self.embedding_dim, name="memory_queue")
            if self.queue_size > 0
            else None
        )
        self.temperature_tracker = keras.metrics.Mean(name="temperature")
        self.positive_tracker = keras.metrics.Mean(name="positive_cosine")
        self.queue_tracker = keras.metrics.Mean(name="queue_fill")

    def _make_logit_scale(self, fixed, max_logit_scale):
        """The `LogitScale`: learnable when `fixed` (a temperature) is None."""
        if fixed is None:
            if not self.max_logit_scale >= 1.0 / self.init_temperature:
                raise ValueError(
                    "`max_logit_scale` must be >= 1 / init_temperature, received "
                    f"{max_logit_scale!r}."
                )
            return LogitScale(
                1.0 / self.init_temperature, self.max_logit_scale, name="logit_scale"
            )
        scale = 1.0 / fixed
        return LogitScale(
            scale, max(scale, self.max_logit_scale), learnable=False, name="logit_scale"
        )

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

    def candidates(self):
        return {"student": self.encoder}

    def no_decay_variables(self):
        return [self.logit_scale.log_scale] if self.logit_scale.learnable else []

    # ------------------------------------------------------------- encoding
    def _embed(self, encoder, inputs, training, mlp):
        x = encoder.sentence_vectors(inputs, self.pooling, training=training)
        if mlp is not None and training:
            x = mlp(x)
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
    def embed_batch(self, data, training=True):
        """Teacher keys of the source side, student queries of the target side."""
        return {
            "keys": self.embed_source(data["source"], training=training),
            "queries": self.embed_target(data["target"], training=training),
        }

    def loss_from_embeddings(self, embeddings, data, training=True):
        keys, queries = embeddings["keys"], embeddings["queries"]
        # Gathered once here: the same keys are enqueued after the update
        # (no second, unordered collective).
        all_keys, offset = gather_with_offset(keys, tf.shape(queries)[0])
        scale = self.logit_scale()
        loss = info_nce_loss(
            queries, all_keys, temperature=1.0 / scale, gather=False, label_offset=offset,
            # (cut to the keys' width when a Matryoshka loss passes a prefix)
            extra_candidates=(None if self.queue is None
                              else self.queue.contents()[:, : keys.shape[-1]]),
        )
        extras = {
            "temperature": 1.0 / scale,
            "positive_cosine": tf.reduce_mean(tf.reduce_sum(queries * keys, axis=-1)),
            "queue_fill": (
                tf.cast(tf.convert_to_tensor(self.queue.count), tf.float32)
                if self.queue is not None
                else tf.constant(0.0)
            ),
        }
        return LossOutput(loss, extras, tf.stop_gradient(all_keys))

    def after_update(self, aux, finite):
        if self.queue is not None and aux is not None:
            self.queue.enqueue(aux, gather=False)

    # --------------------------------------------------------------- config
    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "teacher": (
                    None if self._teacher is None
                    else keras.saving.serialize_keras_object(self._teacher)
                ),
                "pooling": self.pooling,
            }
        )
        return config
