"""Static encoders trained with the toolkit's losses: the `static` method and `fit_static`."""

import dataclasses
import typing

import keras
import tensorflow as tf

from keras_sentemb.data.nli import load_positive_pairs
from keras_sentemb.data.stream_batches import as_stream
from keras_sentemb.losses.info_nce import info_nce_loss
from keras_sentemb.losses.matryoshka import MatryoshkaLoss
from keras_sentemb.losses.matryoshka import check_matryoshka
from keras_sentemb.methods.method import DEV_RETRIEVAL
from keras_sentemb.methods.method import Method
from keras_sentemb.methods.method import STREAMED
from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.methods.options import option
from keras_sentemb.methods.registry import register_method
from keras_sentemb.methods.runner import fit_function
from keras_sentemb.methods.static.distill import WEIGHTINGS
from keras_sentemb.methods.static.distill import distill_static
from keras_sentemb.models.static_runtime import TABLE_DTYPES
from keras_sentemb.pipelines.schedules import adamw_linear_decay

OBJECTIVES = ("distill", "contrastive", "pairs")
COLUMNS = {"distill": ("sentence",), "contrastive": ("sentence",), "pairs": ("sent0", "sent1")}


def cosine_distance(predicted, target):
    """Mean `1 - cos(predicted_i, target_i)` over the batch (float32)."""
    predicted = tf.math.l2_normalize(tf.cast(predicted, tf.float32), axis=-1)
    target = tf.math.l2_normalize(tf.cast(target, tf.float32), axis=-1)
    return tf.reduce_mean(1.0 - tf.reduce_sum(predicted * target, axis=-1))


class StaticTrainer(keras.Model):
    """Trains a `StaticEncoder`'s table against a frozen teacher, or on pairs.

    The batches are the teacher's packed token ids (the static encoder
    shares its vocabulary and ignores the special tokens). Objectives:

    - `"distill"`: `1 - cos(static(s), P(teacher(s)))`, where `P` maps the
      teacher's vectors into the table's space (the distillation's PCA);
      the teacher's sentence vectors are the targets, as in model2vec's
      tokenlearn.
    - `"contrastive"`: InfoNCE with `P(teacher(s))` as each sentence's
      positive and the batch's other targets as negatives.
    - `"pairs"`: InfoNCE on `(static(a), static(b))` pairs with in-batch
      negatives (sentence-transformers' `MultipleNegativesRankingLoss`).

    Args:
        student: `StaticEncoder`.
        teacher: `SentenceEncoder` or None (`"pairs"` needs none).
        objective: str. One of `OBJECTIVES`.
        temperature: float. InfoNCE's temperature.
    """

    def __init__(self, student, teacher, objective="distill", temperature=0.05, **kwargs):
        super().__init__(**kwargs)
        self.encoder = student
        self.teacher = teacher
        if teacher is not None:
            teacher.trainable = False
        self.objective = objective
        self.temperature = float(temperature)
        self._loss = self.base_loss
        self.built = True  # its encoders are built (a backup saves it before any call)

    def candidates(self):
        """The encoders the dev selection scores."""
        return {"static": self.encoder}

    def select(self, name):
        """Nothing to switch: one candidate."""

    def set_matryoshka(self, dims, weights=None):
        """Sum the loss over the first `d` dimensions for each `d` in `dims`."""
        dims, weights = check_matryoshka(dims, weights, self.encoder.output_dim)
        self._loss = MatryoshkaLoss(self.base_loss, dims, weights,
                                    full_dim=self.encoder.output_dim)

    def targets(self, data):
        """The teacher's vectors of a batch (given, or of its packed inputs), in the table's space."""
        if "target" in data:  # encoded once before training (data held in memory)
            vectors = tf.cast(data["target"], tf.float32)
        else:
            vectors = tf.stop_gradient(tf.cast(self.teacher(data["sentence"], training=False),
                                               tf.float32))
        if self.encoder.pca is not None:
            mean, components = self.encoder.pca
            vectors = tf.matmul(vectors - mean, components)
        return vectors

    def embed(self, data):
        """`{"predicted", "target"}` of a batch."""
        if self.objective == "pairs":
            return {"predicted": self.encoder(data["sent0"]),
                    "target": self.encoder(data["sent1"])}
        return {"predicted": self.encoder(data["sentence"]), "target": self.targets(data)}

    def base_loss(self, embeddings):
        predicted, target = embeddings["predicted"], embeddings["target"]
        if self.objective == "distill":
            return cosine_distance(predicted, target)
        return info_nce_loss(predicted, target, temperature=self.temperature)

    def train_step(self, data):
        variables = self.encoder.trainable_variables
        with tf.GradientTape() as tape:
            loss = tf.cast(self._loss(self.embed(data)), tf.float32)
        gradients = tape.gradient(loss, variables)
        finite = tf.math.is_finite(loss)
        self.optimizer.apply_gradients(zip(gradients, variables))
        return {"loss": loss, "nonfinite": 1.0 - tf.cast(finite, tf.float32)}


@dataclasses.dataclass(frozen=True)
class StaticConfig(MethodConfig):
    """The `static` method's options."""

    dims: typing.Optional[int] = option(
        256, "Size of the static vectors (PCA components of the teacher's token vectors); "
        "None keeps the teacher's size.", minimum=1, source="model2vec's default (pca_dims=256)")
    weighting: str = option(
        "zipf", "Per-token weights of the distillation: `zipf` (SIF on Zipf-estimated "
        "frequencies), `sif` (SIF on frequencies counted on the training sentences; on the "
        "bundled Wikipedia sentences when the data streams) or `none`.",
        choices=WEIGHTINGS, source="model2vec's default (sif_coefficient=1e-4)")
    objective: str = option(
        "distill", "`distill` (cosine to the teacher's sentence vectors), `contrastive` "
        "(InfoNCE, the teacher's vectors as positives) or `pairs` (InfoNCE on (a, b) pairs).",
        choices=OBJECTIVES)
    temperature: float = option(0.05, "InfoNCE temperature (`contrastive`, `pairs`).",
                                above=0.0)
    table_dtype: str = option(
        "float32", "How the table is saved: `float32`, `float16` or `int8` (a scale per row).",
        choices=TABLE_DTYPES)


def _data(run, data, objective):
    """`(columns, stream, count)` of the training data for `objective`."""
    stream = as_stream(data, tfds=objective != "pairs")
    if stream is not None:
        run.record_data(examples=stream.size, streamed=repr(stream), objective=objective)
        return None, stream, stream.size
    if objective == "pairs":
        rows = load_positive_pairs(data)
        columns = {"sent0": [r[0] for r in rows], "sent1": [r[1] for r in rows]}
    else:
        sentences, _, _ = run.read_sentences(data)
        columns = {"sentence": sentences}
    count = len(next(iter(columns.values())))
    run.record_data(examples=count, objective=objective)
    return columns, None, count


def _teacher_targets(teacher, columns, plan):
    """The teacher's vectors of sentences held in memory, encoded once (not at every epoch).

    None for pairs (no teacher) and streams (encoded batch by batch as they are read).
    """
    if "sentence" not in columns:
        return None
    vectors = teacher.encode(columns["sentence"], max_length=plan.training_max_length,
                             precision="float32", show_progress=False)
    return {"target": vectors}


@register_method("static")
class StaticMethod(Method):
    """Distils a static (token-vector) encoder from the model and trains it on sentences.

    The model is the teacher: `distill_static` first makes the static
    encoder from its vocabulary (PCA to `dims`, Zipf or SIF weights), then
    the table is trained on `data` with the objective: by default towards
    the teacher's sentence vectors (cosine; model2vec's tokenlearn step),
    or contrastively (InfoNCE) with the teacher's vectors or a second
    column as positives. The teacher is frozen: it encodes sentences held
    in memory once, before training, and a stream's batches as they are
    read; only the table is trained. The kept encoder is the best on STS-B dev, the
    distilled one included. The result encodes tens of times faster than
    the teacher, with no Transformer (see docs/guides/static.md).

    `pooling` does not apply (a static encoder averages); `max_length` cuts
    the training sentences (the teacher's `max_length` by default).

    The common arguments of every `fit_*` mean here:

    Examples:

    ```python
    static = keras_sentemb.fit_static("wiki10k.txt", model="default", dims=256, steps=200)
    static.encode(["A man is playing a guitar."]).shape   # (1, 256)
    ```

    References:
        - [Tulkens & van Dongen, 2024. Model2Vec](https://github.com/MinishLab/model2vec)
        - [Tom Aarsen, 2025. Train 400x faster Static Embedding Models with
          Sentence Transformers](https://huggingface.co/blog/static-embeddings)
    """

    config_class = StaticConfig
    paper_pooling = "mean"
    in_batch = True
    optional = ("matryoshka_dims", "matryoshka_weights", "max_grad_norm") + DEV_RETRIEVAL + STREAMED
    run_defaults = {"batch_size": 128, "learning_rate": 5e-3, "max_length": 128,
                    "eval_every": 50}
    returns_doc = "The trained `StaticEncoder` (with a dev set: the kept checkpoint)."

    def train(self, run, data, config):
        columns, stream, count = _data(run, data, config.objective)
        with run.scope():
            teacher = run.load_encoder()
            plan = run.resolve(teacher, examples=count)
            plan = dataclasses.replace(plan, pooling="mean",
                                       pooling_reason="a static encoder averages token vectors")
            run.report.pooling, run.report.pooling_reason = plan.pooling, plan.pooling_reason
            corpus = (columns or {}).get("sentence") if config.weighting == "sif" else None
            # The teacher's output space: the training targets are its output vectors.
            student = distill_static(teacher, dims=config.dims, weighting=config.weighting,
                                     corpus=corpus, vectors="output",
                                     table_dtype=config.table_dtype)
            trainable = teacher.trainable  # frozen while it teaches; the caller's flag after
            trainer = StaticTrainer(student, teacher, config.objective, config.temperature)
        # The fused AdamW update (each optimizer owns its kernels, so a second
        # fit in one process traces its own): on a 30,522 x 256 table one update
        # took 88 ms fused against 242 ms as Keras ops
        # (`python benchmarks/static_optimizer_step.py`, a shared 2-core machine).
        run.compile(trainer, adamw_linear_decay(plan.learning_rate, plan.steps))
        names = COLUMNS[config.objective]
        if stream is not None:
            make_dataset = run.stream_batches(teacher, stream, names, plan,
                                              no_duplicates=config.objective != "distill")
        else:
            make_dataset = run.batches(teacher, columns, plan,
                                       extra=_teacher_targets(teacher, columns, plan))
        run.fit(trainer, make_dataset, plan)
        teacher.trainable = trainable
        return run.finish(trainer.encoder, plan, extras={"static": student.static_config()})


def fit_static(data, model="default", steps=None, batch_size=128, learning_rate=5e-3,
               max_length=128, pooling="auto", dev="stsb", eval_every=50, output=None,
               strategy=None, callbacks=None, seed=0, verbose="auto", dims=256,
               weighting="zipf", objective="distill", temperature=0.05, table_dtype="float32",
               matryoshka_dims=None, max_grad_norm=None, matryoshka_weights=None,
               dev_retrieval=None, dev_select="auto", max_skipped=0.01, preset=None):
    ...


fit_static = fit_function("static", fit_static)
