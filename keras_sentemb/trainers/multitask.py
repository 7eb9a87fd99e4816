"""`MultitaskModel`: sentiment, paraphrase and similarity heads on one encoder.

Also the training procedures of the report (multitask average loss, batch /
epoch round robin, PCGrad, single-task fine-tuning, fusion training), the
dev metrics, and `fit_multitask`.
"""

import json
import math
import os
import random
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_sentemb.data.multitask import NUM_SENTIMENT_CLASSES
from keras_sentemb.data.multitask import STSB_TEST_LEAKAGE_WARNING
from keras_sentemb.data.multitask import TASKS
from keras_sentemb.losses import info_nce_loss
from keras_sentemb.trainers.base_trainer import apply_if_finite
from keras_sentemb.trainers.pcgrad import flatten_gradients
from keras_sentemb.trainers.pcgrad import pcgrad_project
from keras_sentemb.trainers.pcgrad import unflatten_gradients

HEAD_SHARING = ("first_layer", "none", "full")
PROCEDURES = (
    "average", "batch_round_robin", "epoch_round_robin", "pcgrad", "single"
)
HEADS_FILE = "multitask_heads.npz"
CONFIG_FILE = "multitask_config.json"
LEAKAGE_FILE = "LEAKAGE_WARNING.txt"


def _check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}; received {value!r}")


@keras.saving.register_keras_serializable(package="keras_sentemb")
class MultitaskModel(keras.Model):
    """Three task heads on the pooled embedding of one `SentenceEncoder`.

    - Sentiment (5-class SST): an MLP with dropout on the sentence vector,
      `dropout -> Dense(hidden, relu) -> dropout -> Dense(5)`.
    - Paraphrase (Quora): both sentences are transformed, `t(x) = x +
      W2 relu(W1 x + b1) + b2`, and scored by a bilinear form
      `t(u)^T B t(v) + c`; trained with binary cross-entropy on the logit.
    - Similarity (STS): the cosine of the two transformed vectors, regressed
      onto `score / 5` with the mean squared error (sentence-transformers'
      `CosineSimilarityLoss`); predictions are `5 * cosine`.

    The transforms are residual and `W2` starts at zero, so an untrained head
    scores with the encoder's own geometry (and `B` starts at the identity).

    `head_sharing` chooses what the paraphrase and similarity heads share:
    `"first_layer"` (the report's best): one `W1` layer object, used by both
    transforms, each with its own `W2`; `"none"`: two separate transforms;
    `"full"`: one transform (`W1` and `W2`) used by both (the paraphrase head
    keeps its bilinear form). A shared layer is a single set of weights.

    Args:
        encoder: `SentenceEncoder`. The shared encoder (trained with the heads).
        head_sharing: str. `"first_layer"`, `"none"` or `"full"`. Defaults to
            `"first_layer"`.
        hidden_dim: int or None. Width of the heads' hidden layers. Defaults to
            the encoder's output size.
        dropout: float. Dropout of the sentiment MLP and of the pair heads'
            hidden layer. Defaults to `0.1`.
        num_classes: int. Sentiment classes. Defaults to `5`.

    Examples:

    ```python
    encoder = SentenceEncoder.from_preset("default")
    model = MultitaskModel(encoder)
    model.predict_sentiment(["A lovely film."])          # class ids 0..4
    model.predict_paraphrase(["How do I cook rice?"], ["How to cook rice?"])
    model.predict_similarity(["A man plays."], ["A man is playing."])  # 0..5
    ```

    References:
        - Contrastive Learning for Generalizable Sentence Embeddings
          (Stanford CS224N default-project report).
        - [Reimers & Gurevych, 2019. Sentence-BERT](https://arxiv.org/abs/1908.10084)
        - [Yu et al., 2020. Gradient Surgery for Multi-Task
          Learning](https://arxiv.org/abs/2001.06782)
    """

    def __init__(
        self,
        encoder,
        head_sharing="first_layer",
        hidden_dim=None,
        dropout=0.1,
        num_classes=NUM_SENTIMENT_CLASSES,
        **kwargs,
    ):
        super().__init__(**kwargs)
        _check_choice("head_sharing", head_sharing, HEAD_SHARING)
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1); received {dropout!r}")
        if int(num_classes) < 2:
            raise ValueError(f"`num_classes` must be >= 2; received {num_classes!r}")
        self.encoder = encoder
        self.head_sharing = head_sharing
        dim = int(encoder.output_dim)
        self.embedding_dim = dim
        self.hidden_dim = int(hidden_dim or dim)
        self.dropout_rate = float(dropout)
        self.num_classes = int(num_classes)
        d, h = dim, self.hidden_dim

        def dense(units, name, activation=None, initializer="glorot_uniform"):
            layer = keras.layers.Dense(
                units, activation=activation, kernel_initializer=initializer,
                name=name,
            )
            return layer

        # Sentiment MLP.
        self.sentiment_dropout = keras.layers.Dropout(self.dropout_rate)
        self.sentiment_hidden = dense(h, "sentiment_hidden", "relu")
        self.sentiment_output = dense(self.num_classes, "sentiment_output")
        self.sentiment_hidden.build((None, d))
        self.sentiment_output.build((None, h))
        # Pair transforms.
        self.pair_dropout = keras.layers.Dropout(self.dropout_rate)
        if head_sharing == "none":
            self.paraphrase_first = dense(h, "paraphrase_first", "relu")
            self.similarity_first = dense(h, "similarity_first", "relu")
        else:
            shared = dense(h, "pair_first", "relu")
            self.paraphrase_first = shared
            self.similarity_first = shared
        self.paraphrase_second = dense(d, "paraphrase_second", initializer="zeros")
        if head_sharing == "full":
            self.similarity_second = self.paraphrase_second
        else:
            self.similarity_second = dense(
                d, "similarity_second", initializer="zeros"
            )
        for layer in {id(x): x for x in (
            self.paraphrase_first, self.similarity_first
        )}.values():
            layer.build((None, d))
        for layer in {id(x): x for x in (
            self.paraphrase_second, self.similarity_second
        )}.values():
            layer.build((None, h))
        # Paraphrase bilinear form.
        self.bilinear = self.add_weight(
            shape=(d, d), initializer="identity", name="paraphrase_bilinear"
        )
        self.bilinear_bias = self.add_weight(
            shape=(), initializer="zeros", name="paraphrase_bias"
        )
        self._step_fns = {}
        self._contrastive_fn = None
        self._optimizers = None
        self.built = True

    # ----------------------------------------------------------------- heads
    def head_variables(self):
        """Trainable variables of the heads (not the encoder), deduplicated."""
        seen = {id(v) for v in self.encoder.trainable_variables}
        out = []
        for v in self.trainable_variables:
            if id(v) not in seen:
                seen.add(id(v))
                out.append(v)
        return out

    def _variables(self):
        return list(self.encoder.trainable_variables) + self.head_variables()

    def call(self, inputs, training=False):
        """Sentence vectors of packed inputs (the shared encoder's output)."""
        return self.encoder(inputs, training=training)

    def sentiment_logits(self, embeddings, training=False):
        x = self.sentiment_dropout(embeddings, training=training)
        x = self.sentiment_hidden(x)
        x = self.sentiment_dropout(x, training=training)
        return tf.cast(self.sentiment_output(x), "float32")

    def _transform(self, x, task, training):
        first = self.paraphrase_first if task == "paraphrase" else self.similarity_first
        second = (
            self.paraphrase_second if task == "paraphrase" else self.similarity_second
        )
        hidden = self.pair_dropout(first(x), training=training)
        return x + second(hidden)

    def paraphrase_logits(self, u, v, training=False):
        tu = tf.cast(self._transform(u, "paraphrase", training), "float32")
        tv = tf.cast(self._transform(v, "paraphrase", training), "float32")
        return (
            tf.reduce_sum(tf.matmul(tu, self.bilinear) * tv, axis=-1)
            + self.bilinear_bias
        )

    def similarity_cosine(self, u, v, training=False):
        tu = tf.math.l2_normalize(
            tf.cast(self._transform(u, "similarity", training), "float32"), -1, 1e-12
        )
        tv = tf.math.l2_normalize(
            tf.cast(self._transform(v, "similarity", training), "float32"), -1, 1e-12
        )
        return tf.reduce_sum(tu * tv, axis=-1)

    def task_loss(self, task, batch, training=True):
        """Loss of one task on one packed batch (see `make_batch`)."""
        emb = self.encoder(batch["inputs"], training=training)
        return self.loss_from_embeddings(task, emb, batch["labels"], training)

    def embed_batches(self, batches, tasks, training=True):
        """Encode several tasks' packed inputs in one forward pass.

        The inputs are padded to a common length, concatenated, encoded once
        and split back per task (padding is masked, so each sentence's vector
        is the one it gets alone).
        """
        if len(tasks) == 1:
            return [self.encoder(batches[tasks[0]]["inputs"], training=training)]
        keys = ("token_ids", "padding_mask", "segment_ids")
        length = tf.reduce_max(
            [tf.shape(batches[t]["inputs"]["token_ids"])[1] for t in tasks]
        )
        joined = {}
        for key in keys:
            parts = []
            for t in tasks:
                x = batches[t]["inputs"][key]
                parts.append(tf.pad(x, [[0, 0], [0, length - tf.shape(x)[1]]]))
            joined[key] = tf.concat(parts, axis=0)
        emb = self.encoder(joined, training=training)
        sizes = [tf.shape(batches[t]["inputs"]["token_ids"])[0] for t in tasks]
        return tf.split(emb, tf.stack(sizes), num=len(tasks), axis=0)

    def loss_from_embeddings(self, task, emb, labels, training=True):
        """Loss of one task from its sentence vectors (pairs: `[u; v]`)."""
        if task == "sentiment":
            logits = self.sentiment_logits(emb, training)
            return tf.reduce_mean(
                tf.keras.losses.sparse_categorical_crossentropy(
                    labels, logits, from_logits=True
                )
            )
        u, v = tf.split(emb, 2, axis=0)
        if task == "paraphrase":
            logits = self.paraphrase_logits(u, v, training)
            return tf.reduce_mean(
                tf.nn.sigmoid_cross_entropy_with_logits(labels, logits)
            )
        if task == "similarity":
            cos = self.similarity_cosine(u, v, training)
            return tf.reduce_mean(tf.square(cos - labels / 5.0))
        raise ValueError(f"Unknown task {task!r}; expected one of {TASKS}")

    # ----------------------------------------------------------- prediction
    def _embed(self, sentences, batch_size, max_length):
        return self.encoder.encode(
            list(sentences), batch_size=batch_size, max_length=max_length,
            show_progress=False,
        )

    def predict_sentiment(
        self, sentences, batch_size=128, max_length=None, return_probabilities=False
    ):
        """Sentiment class ids (0 = very negative .. 4 = very positive).

        Args:
            sentences: list of str.
            batch_size: int. Defaults to `128`.
            max_length: int or None. Defaults to the encoder's.
            return_probabilities: bool. Return `[n, num_classes]` softmax
                probabilities instead. Defaults to `False`.
        """
        emb = self._embed(sentences, batch_size, max_length)
        probs = tf.nn.softmax(self.sentiment_logits(emb)).numpy()
        return probs if return_probabilities else probs.argmax(-1)

    def _pair_embeddings(self, sentences1, sentences2, batch_size, max_length):
        if len(sentences1) != len(sentences2):
            raise ValueError(
                "`sentences1` and `sentences2` must have the same length; "
                f"received {len(sentences1)} and {len(sentences2)}"
            )
        emb = self._embed(list(sentences1) + list(sentences2), batch_size, max_length)
        return emb[: len(sentences1)], emb[len(sentences1):]

    def predict_paraphrase(self, sentences1, sentences2, batch_size=128, max_length=None):
        """Probability that each pair is a paraphrase, float32 `[n]`."""
        u, v = self._pair_embeddings(sentences1, sentences2, batch_size, max_length)
        return tf.sigmoid(self.paraphrase_logits(u, v)).numpy()

    def predict_similarity(self, sentences1, sentences2, batch_size=128, max_length=None):
        """Similarity scores on the STS 0-5 scale (`5 * cosine`), float32 `[n]`."""
        u, v = self._pair_embeddings(sentences1, sentences2, batch_size, max_length)
        return 5.0 * self.similarity_cosine(u, v).numpy()

    # --------------------------------------------------------------- config
    def get_config(self):
        return {
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "head_sharing": self.head_sharing,
            "hidden_dim": self.hidden_dim,
            "dropout": self.dropout_rate,
            "num_classes": self.num_classes,
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)

    def save_to_folder(self, folder):
        """Save the encoder (`SentenceEncoder.save`) and the heads to `folder`.

        The folder loads as a plain encoder with `SentenceEncoder.from_preset`
        and as the full model with `MultitaskModel.load_from_folder`.
        """
        folder = Path(os.fspath(folder))
        self.encoder.save(folder)
        np.savez(
            folder / HEADS_FILE,
            **{f"w{i}": np.asarray(v) for i, v in enumerate(self.head_variables())},
        )
        with open(folder / CONFIG_FILE, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "head_sharing": self.head_sharing,
                    "hidden_dim": self.hidden_dim,
                    "dropout": self.dropout_rate,
                    "num_classes": self.num_classes,
                },
                f,
                indent=2,
            )
        with open(folder / LEAKAGE_FILE, "w", encoding="utf-8") as f:
            f.write(STSB_TEST_LEAKAGE_WARNING + "\n")
        return str(folder)

    @classmethod
    def load_from_folder(cls, folder):
        """Load a model written by `save_to_folder`."""
        from keras_sentemb.models import SentenceEncoder

        folder = Path(os.fspath(folder))
        with open(folder / CONFIG_FILE, encoding="utf-8") as f:
            config = json.load(f)
        model = cls(SentenceEncoder.from_preset(str(folder)), **config)
        weights = np.load(folder / HEADS_FILE)
        for i, v in enumerate(model.head_variables()):
            v.assign(weights[f"w{i}"])
        return model

    # ------------------------------------------------------------- training
    def configure_training(
        self, learning_rate=2e-5, head_learning_rate=1e-3, weight_decay=0.01
    ):
        """Create the optimizers: one for the encoder, one for the heads."""
        encoder_opt = keras.optimizers.AdamW(
            learning_rate, weight_decay=weight_decay, name="encoder_adamw"
        )
        head_opt = keras.optimizers.AdamW(
            head_learning_rate, weight_decay=weight_decay, name="head_adamw"
        )
        encoder_opt.build(self.encoder.trainable_variables)
        head_opt.build(self.head_variables())
        self._optimizers = (encoder_opt, head_opt)
        self._step_fns = {}
        self._contrastive_fn = None

    def _apply(self, grads, variables):
        encoder_ids = {id(v) for v in self.encoder.trainable_variables}
        finite = tf.constant(True)
        for g in grads:
            if g is not None:
                finite = tf.logical_and(finite, tf.reduce_all(tf.math.is_finite(g)))
        enc, head = [], []
        for g, v in zip(grads, variables):
            if g is not None:
                (enc if id(v) in encoder_ids else head).append((g, v))
        for optimizer, pairs in zip(self._optimizers, (enc, head)):
            if pairs:
                apply_if_finite(optimizer, pairs, finite)
        return finite

    def train_tasks_step(self, batches, pcgrad=False):
        """One optimizer update on `{task: batch}` (mean loss or PCGrad).

        With several tasks the update uses the gradient of the mean of the
        task losses, or, with `pcgrad=True`, the mean of the PCGrad-projected
        task gradients (the sum of Yu et al. divided by the number of tasks,
        so that without conflicts it equals the mean-loss gradient).

        Returns:
            dict of float losses per task (and `nonfinite`).
        """
        if self._optimizers is None:
            self.configure_training()
        tasks = tuple(sorted(batches, key=TASKS.index))
        key = (tasks, bool(pcgrad) and len(tasks) > 1)
        fn = self._step_fns.get(key)
        batches = {t: batches[t] for t in tasks}
        if fn is None:
            # Dynamic batch and sequence dims: one trace per task set.
            fn = tf.function(
                lambda b: self._train_step_impl(b, tasks, key[1]),
                input_signature=[_dynamic_signature(batches)],
                autograph=False,
            )
            self._step_fns[key] = fn
        out = fn(batches)
        return {k: float(v) for k, v in out.items()}

    def _train_step_impl(self, batches, tasks, pcgrad):
        variables = self._variables()
        with tf.GradientTape(persistent=pcgrad) as tape:
            embeddings = self.embed_batches(batches, tasks, training=True)
            losses = {
                t: self.loss_from_embeddings(t, e, batches[t]["labels"], True)
                for t, e in zip(tasks, embeddings)
            }
            total = tf.add_n(list(losses.values())) / float(len(tasks))
        if pcgrad:
            flat = tf.stack([
                flatten_gradients(tape.gradient(losses[t], variables), variables)
                for t in tasks
            ])
            del tape
            combined = tf.reduce_mean(pcgrad_project(flat, shuffle=True), axis=0)
            grads = unflatten_gradients(combined, variables)
        else:
            grads = tape.gradient(total, variables)
        finite = self._apply(grads, variables)
        out = {t: losses[t] for t in tasks}
        out["nonfinite"] = 1.0 - tf.cast(finite, "float32")
        return out

    def contrastive_step(self, inputs, temperature=0.05):
        """One unsupervised SimCSE update (two dropout views) on packed inputs.

        Used by fusion training after each supervised similarity update.
        """
        if self._optimizers is None:
            self.configure_training()
        if self._contrastive_fn is None:

            def impl(packed):
                variables = self.encoder.trainable_variables
                with tf.GradientTape() as tape:
                    a = self.encoder(packed, training=True)
                    b = self.encoder(packed, training=True)
                    loss = info_nce_loss(a, b, temperature=temperature)
                grads = tape.gradient(loss, variables)
                self._apply(grads, variables)
                return loss

            self._contrastive_fn = tf.function(
                impl, input_signature=[_dynamic_signature(inputs)], autograph=False
            )
        return float(self._contrastive_fn(inputs))


# ------------------------------------------------------------------ batching
def _dynamic_signature(structure):
    return tf.nest.map_structure(
        lambda t: tf.TensorSpec([None] * t.shape.rank, t.dtype), structure
    )


def make_batch(encoder, task, examples, max_length=None):
    """Pack raw examples of one task into model inputs.

    Sentiment examples `(sentence, label)` give `{"inputs", "labels"}`; pair
    examples `(s1, s2, label)` give the `2B` sentences `[s1...; s2...]` packed
    together (one forward pass) and the `B` labels.
    """
    if task == "sentiment":
        sentences = [e[0] for e in examples]
        labels = tf.constant([int(e[1]) for e in examples], tf.int32)
    else:
        sentences = [e[0] for e in examples] + [e[1] for e in examples]
        labels = tf.constant([float(e[2]) for e in examples], tf.float32)
    inputs = encoder.preprocess(tf.constant(sentences, tf.string), max_length)
    return {"inputs": inputs, "labels": labels}


class _DownsampledStream:
    """Batches of a task; each epoch is a fresh random subset of `epoch_size`."""

    def __init__(self, examples, batch_size, epoch_size, rng):
        self.examples = examples
        self.batch_size = batch_size
        self.epoch_size = min(epoch_size, len(examples))
        self.rng = rng
        self._queue = []
        self.epochs = 0

    def next(self):
        if len(self._queue) < self.batch_size:
            order = self.rng.sample(range(len(self.examples)), self.epoch_size)
            self._queue = order
            self.epochs += 1
        chosen, self._queue = self._queue[: self.batch_size], self._queue[self.batch_size:]
        return [self.examples[i] for i in chosen]


def task_schedule(procedure, steps, tasks=TASKS, steps_per_epoch=None, task=None):
    """The tasks trained at each step of a procedure.

    Args:
        procedure: str. `"average"` / `"pcgrad"`: every task every step;
            `"batch_round_robin"`: one task per step, in order;
            `"epoch_round_robin"`: `steps_per_epoch` steps of one task, then
            the next, in order; `"single"`: `task` only.
        steps: int. Number of optimizer steps.
        tasks: sequence of task names. Defaults to all three.
        steps_per_epoch: int. For `"epoch_round_robin"`.
        task: str. For `"single"`.

    Returns:
        list of `steps` tuples of task names.
    """
    _check_choice("procedure", procedure, PROCEDURES)
    tasks = tuple(tasks)
    if procedure in ("average", "pcgrad"):
        return [tasks] * steps
    if procedure == "batch_round_robin":
        return [(tasks[i % len(tasks)],) for i in range(steps)]
    if procedure == "epoch_round_robin":
        if not steps_per_epoch or steps_per_epoch < 1:
            raise ValueError(
                "`steps_per_epoch` must be a positive int for epoch round robin; "
                f"received {steps_per_epoch!r}"
            )
        return [
            (tasks[(i // steps_per_epoch) % len(tasks)],) for i in range(steps)
        ]
    _check_choice("task", task, TASKS)
    return [(task,)] * steps


def train_multitask(
    model,
    train,
    procedure="average",
    steps=300,
    batch_size=16,
    max_length=None,
    single_task="similarity",
    fusion=False,
    fusion_temperature=0.05,
    dev=None,
    eval_every=0,
    dev_limit=None,
    seed=0,
    verbose=True,
):
    """Train the heads and the encoder with one of the report's procedures.

    One step is one optimizer update. `"average"` and `"pcgrad"` take one
    batch of every task per step; the round-robin procedures and `"single"`
    one batch of one task. Each task's data are down-sampled to the smallest
    train set: every (per-task) epoch is a fresh random subset of that size.
    With `fusion=True`, every similarity batch is trained twice: first with
    the supervised similarity loss (as part of the step), then with the
    unsupervised contrastive loss (dropout views of its sentences).

    With `dev` and `eval_every > 0` the model is evaluated on dev every
    `eval_every` steps and at the end, and the weights with the best overall
    dev mean are restored.

    Returns:
        dict with `history` (per-step losses), `dev` (evaluations) and
        `seconds`.
    """
    _check_choice("procedure", procedure, PROCEDURES)
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"`steps` must be a positive int; received {steps!r}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive int; received {batch_size!r}")
    rng = random.Random(seed)
    tasks = (single_task,) if procedure == "single" else TASKS
    smallest = min(len(train[t]) for t in tasks)
    streams = {
        t: _DownsampledStream(train[t], batch_size, smallest, rng) for t in tasks
    }
    schedule = task_schedule(
        procedure,
        steps,
        tasks,
        steps_per_epoch=max(1, smallest // batch_size),
        task=single_task,
    )
    history, evaluations = [], []
    best = (-math.inf, None, None)
    encoder = model.encoder
    start = time.time()

    def evaluate(step):
        nonlocal best
        metrics = evaluate_multitask(model, dev, limit=dev_limit)
        metrics["step"] = step
        evaluations.append(metrics)
        if verbose:
            print(f"[multitask] step {step} dev {json.dumps(metrics)}", flush=True)
        if metrics["overall"] > best[0]:
            best = (metrics["overall"], step, [np.array(v) for v in model.weights])

    for step, step_tasks in enumerate(schedule, start=1):
        batches = {
            t: make_batch(encoder, t, streams[t].next(), max_length)
            for t in step_tasks
        }
        out = model.train_tasks_step(batches, pcgrad=procedure == "pcgrad")
        if fusion and "similarity" in batches:
            out["fusion_contrastive"] = model.contrastive_step(
                batches["similarity"]["inputs"], fusion_temperature
            )
        history.append(out)
        if out.get("nonfinite"):
            raise FloatingPointError(f"Non-finite loss or gradients at step {step}.")
        if verbose and (step % 25 == 0 or step == steps):
            print(
                f"[multitask] {procedure} step {step}/{steps} "
                + " ".join(f"{k}={v:.4f}" for k, v in out.items())
                + f" ({time.time() - start:.0f}s)",
                flush=True,
            )
        if dev is not None and eval_every and step % eval_every == 0 and step != steps:
            evaluate(step)
    if dev is not None and eval_every:
        evaluate(steps)
        if best[2] is not None and best[1] != steps:
            for v, w in zip(model.weights, best[2]):
                v.assign(w)
            if verbose:
                print(f"[multitask] restored the best dev weights (step {best[1]})")
    return {"history": history, "dev": evaluations, "seconds": time.time() - start}


# ------------------------------------------------------------------- metrics
def evaluate_multitask(model, dev, limit=None, batch_size=128):
    """Dev metrics: sentiment accuracy, paraphrase accuracy, similarity Pearson.

    `overall` is the plain mean of the three. `model` is a `MultitaskModel`
    or anything with the `predict_*` surface (e.g. `MultitaskEnsemble`).

    Args:
        model: the model.
        dev: dict `{task: examples}` (see `load_multitask_data`).
        limit: int or None. Use only the first `limit` examples of each task
            (for quick checks; say so when reporting). Defaults to `None`.
        batch_size: int. Defaults to `128`.
    """
    from scipy.stats import pearsonr

    def take(task):
        rows = dev[task]
        return rows[:limit] if limit else rows

    out = {}
    rows = take("sentiment")
    pred = model.predict_sentiment([r[0] for r in rows], batch_size=batch_size)
    out["sentiment_acc"] = float(np.mean(pred == np.array([r[1] for r in rows])))
    rows = take("paraphrase")
    prob = model.predict_paraphrase(
        [r[0] for r in rows], [r[1] for r in rows], batch_size=batch_size
    )
    out["paraphrase_acc"] = float(
        np.mean((prob >= 0.5) == (np.array([r[2] for r in rows]) >= 0.5))
    )
    rows = take("similarity")
    scores = model.predict_similarity(
        [r[0] for r in rows], [r[1] for r in rows], batch_size=batch_size
    )
    out["similarity_pearson"] = float(pearsonr(scores, [r[2] for r in rows])[0])
    out["overall"] = float(
        np.mean([out["sentiment_acc"], out["paraphrase_acc"], out["similarity_pearson"]])
    )
    return out


# ----------------------------------------------------------------------- fit
def fit_multitask(
    data_dir,
    model="default",
    output=None,
    steps=300,
    batch_size=16,
    learning_rate=2e-5,
    max_length=128,
    procedure="average",
    head_sharing="first_layer",
    single_task="similarity",
    fusion=False,
    pretrain="unsup",
    pretrain_steps=None,
    pretrain_learning_rate=3e-5,
    pretrain_temperature=0.05,
    nli_file=None,
    head_learning_rate=1e-3,
    hidden_dim=None,
    dropout=0.1,
    quora_dev_fraction=0.1,
    eval_every=0,
    dev_limit=None,
    evaluate_stsb_test=False,
    seed=0,
    verbose=True,
):
    """Contrastive pre-training, then the three task heads on one encoder.

    Reads a folder laid out like `shared/data/multitask` (Quora's dev file is
    split into train/dev by a hash of the pair id, see
    `keras_sentemb.data.multitask`), optionally pre-trains the encoder with a
    contrastive objective (`pretrain`), then trains `MultitaskModel` with
    `procedure`, evaluates on the dev sets, and saves the encoder plus heads
    to `output`.

    `multitask/sts-train.csv` contains STS-B *test* pairs: a model trained
    here must never be reported on STS-B test. `evaluate_stsb_test=True`
    raises `ValueError`.

    Args:
        data_dir: str. The multitask folder.
        model: str. Encoder to start from (`"default"`, a preset or a
            folder). Defaults to `"default"`.
        output: str or None. Folder to save the encoder (loadable with
            `SentenceEncoder.from_preset`) and the heads. Defaults to `None`.
        steps: int. Optimizer steps of the multitask stage. Defaults to `300`.
        batch_size: int. Examples per task batch. Defaults to `16`.
        learning_rate: float. Encoder learning rate (AdamW). Defaults to
            `2e-5`.
        max_length: int. Token limit per sentence. Defaults to `128`.
        procedure: str. `"average"` (one batch per task per step, mean loss;
            the default), `"batch_round_robin"`, `"epoch_round_robin"`,
            `"pcgrad"` or `"single"`.
        head_sharing: str. `"first_layer"` (default, the report's best),
            `"none"` or `"full"`.
        single_task: str. The task of `procedure="single"`. Defaults to
            `"similarity"`.
        fusion: bool. Fusion training (each similarity batch also gets an
            unsupervised contrastive update). Defaults to `False`.
        pretrain: str. `"unsup"` (dropout views on the sentences of all three
            train sets; default), `"paraphrase"` (Quora paraphrases as
            positives, non-paraphrases as hard negatives), `"nli"`
            (triplets from `nli_file`) or `"none"`.
        pretrain_steps: int or None. Pre-training steps; `None` = `steps`.
        pretrain_learning_rate: float. Defaults to `3e-5`.
        pretrain_temperature: float. InfoNCE temperature. Defaults to `0.05`.
        nli_file: str or None. `sent0,sent1,hard_neg` CSV for
            `pretrain="nli"`; defaults to `shared/data/nli/
            snli_devtest_triplets.csv` next to `data_dir`.
        head_learning_rate: float. Learning rate of the heads. Defaults to
            `1e-3`.
        hidden_dim: int or None. Head width; defaults to the embedding size.
        dropout: float. Head dropout. Defaults to `0.1`.
        quora_dev_fraction: float. Share of quora-dev.csv held out as dev.
            Defaults to `0.1`.
        eval_every: int. Evaluate on dev every this many steps and keep the
            best (0: only evaluate at the end). Defaults to `0`.
        dev_limit: int or None. Evaluate on the first `dev_limit` dev
            examples of each task only. Defaults to `None` (all).
        evaluate_stsb_test: bool. Refused (raises): see the leakage note.
            Defaults to `False`.
        seed: int. Defaults to `0`.
        verbose: bool. Defaults to `True`.

    Returns:
        The trained `MultitaskModel` (its `.encoder` is the kept
        `SentenceEncoder`); `.dev_metrics` holds the final dev metrics and
        `.training` the training log.
    """
    from keras_sentemb.data.multitask import load_multitask_data
    from keras_sentemb.data.multitask import read_nli_triplets
    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.trainers.multitask_pretrainer import PRETRAIN_MODES
    from keras_sentemb.trainers.multitask_pretrainer import MultitaskContrastivePretrainer
    from keras_sentemb.trainers.multitask_pretrainer import make_pretraining_dataset
    from keras_sentemb.trainers.multitask_pretrainer import pretraining_examples

    if evaluate_stsb_test:
        raise ValueError(
            "Refusing evaluate_stsb_test=True: " + STSB_TEST_LEAKAGE_WARNING
        )
    _check_choice("procedure", procedure, PROCEDURES)
    _check_choice("head_sharing", head_sharing, HEAD_SHARING)
    _check_choice("pretrain", pretrain, PRETRAIN_MODES)
    _check_choice("single_task", single_task, TASKS)
    for name, value in (("steps", steps), ("batch_size", batch_size)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive int; received {value!r}")
    if pretrain_steps is None:
        pretrain_steps = steps
    keras.utils.set_random_seed(seed)
    data = load_multitask_data(data_dir, quora_dev_fraction, verbose=verbose)
    if verbose:
        print("[multitask] WARNING: " + STSB_TEST_LEAKAGE_WARNING, flush=True)
    encoder = SentenceEncoder.from_preset(model, max_length=max_length)

    if pretrain != "none" and pretrain_steps > 0:
        triplets = None
        if pretrain == "nli":
            nli_file = nli_file or (
                Path(os.fspath(data_dir)).parent / "nli" / "snli_devtest_triplets.csv"
            )
            triplets, bad = read_nli_triplets(nli_file)
            if verbose and bad:
                print(f"[multitask] {nli_file}: skipped {bad} malformed row(s)")
        columns = pretraining_examples(pretrain, data["train"], triplets, seed)
        dataset = make_pretraining_dataset(
            encoder, columns, batch_size, max_length, seed
        )
        pretrainer = MultitaskContrastivePretrainer(
            encoder, temperature=pretrain_temperature
        )
        pretrainer.compile(
            optimizer=keras.optimizers.AdamW(pretrain_learning_rate),
            jit_compile=False,
        )
        if verbose:
            print(
                f"[multitask] contrastive pre-training ({pretrain}, "
                f"{len(columns['anchor'])} examples, {pretrain_steps} steps)",
                flush=True,
            )
        pretrainer.fit(
            dataset, steps_per_epoch=pretrain_steps, epochs=1,
            verbose=2 if verbose else 0,
        )

    mt = MultitaskModel(
        encoder, head_sharing=head_sharing, hidden_dim=hidden_dim, dropout=dropout
    )
    mt.configure_training(learning_rate, head_learning_rate)
    log = train_multitask(
        mt,
        data["train"],
        procedure=procedure,
        steps=steps,
        batch_size=batch_size,
        max_length=max_length,
        single_task=single_task,
        fusion=fusion,
        dev=data["dev"],
        eval_every=eval_every,
        dev_limit=dev_limit,
        seed=seed,
        verbose=verbose,
    )
    if log["dev"]:
        best = max(log["dev"], key=lambda m: m["overall"])
        mt.dev_metrics = {k: v for k, v in best.items()}
    else:
        mt.dev_metrics = evaluate_multitask(mt, data["dev"], limit=dev_limit)
    mt.training = log
    mt.skipped_rows = data["skipped"]
    if verbose:
        print(f"[multitask] dev {json.dumps(mt.dev_metrics)}", flush=True)
    if output is not None:
        mt.save_to_folder(output)
    return mt
