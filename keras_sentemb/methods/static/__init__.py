"""Static encoders trained with the toolkit's losses: the `static` method and `fit_static`."""

import dataclasses

from keras_sentemb.data.nli import load_positive_pairs
from keras_sentemb.data.stream_batches import as_stream
from keras_sentemb.methods.method import DEV_RETRIEVAL
from keras_sentemb.methods.method import Method
from keras_sentemb.methods.method import STREAMED
from keras_sentemb.methods.registry import register_method
from keras_sentemb.methods.runner import fit_function
from keras_sentemb.methods.static.config import COLUMNS
from keras_sentemb.methods.static.config import StaticConfig
from keras_sentemb.methods.static.distill import distill_static
from keras_sentemb.methods.static.trainer import StaticTrainer
from keras_sentemb.pipelines.schedules import adamw_linear_decay


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
        # The fused AdamW update (pure kernels shared by every run: a second fit
        # in one process reuses them for its own variables): on a 30,522 x 256
        # table one update took 88 ms fused against 242 ms as Keras ops
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


# The `fit_*` function: its signature and docstring are the method's.
fit_static = fit_function("static", "fit_static")
