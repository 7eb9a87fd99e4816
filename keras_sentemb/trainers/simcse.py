"""SimCSE: contrastive learning with dropout noise or NLI / paraphrase supervision."""

import logging

import keras
import tensorflow as tf

from keras_sentemb.losses.info_nce import info_nce_loss
from keras_sentemb.losses.similarity import l2_normalize
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.trainers import _fit
from keras_sentemb.trainers._views import view_embeddings
from keras_sentemb.trainers.base_trainer import BaseTrainer

logger = logging.getLogger(__name__)

SIMCSE_MODES = ("unsup", "sup", "paraphrase")
MLP_MODES = ("train", "none")


class SimCSE(BaseTrainer):
    """SimCSE trainer: InfoNCE with in-batch negatives.

    - `"unsup"`: every sentence is encoded twice in one pass over the
      doubled batch; the encoder's own dropout makes the two views differ.
      Each first view must find its second view among the batch (InfoNCE,
      temperature 0.05).
    - `"sup"`: `(premise, entailment, contradiction)` triplets; the
      entailment is the positive, every contradiction of the batch a
      negative (`hard_negative_weight` adds to each anchor's logit of its own
      contradiction).
    - `"paraphrase"`: `(sentence1, sentence2, label)` pairs as in the CS224N
      multitask report: pairs labelled 1 are positives (InfoNCE against all
      second sentences of the batch, so not-paraphrase partners are in-batch
      negatives too), and for pairs labelled 0 the cosine similarity itself
      is pushed down: `negative_weight * mean(relu(cos(u, v) - negative_margin))`.

    With `mlp="train"` (the paper's unsupervised setting) a `Dense(hidden,
    tanh)` head sits on the pooled vector during training only; the kept
    encoder has no head. The trainer sets `encoder.pooling = pooling` so
    evaluation and the saved model use the pooling trained for.

    Inputs of `fit` (see `fit_simcse`): dict batches `{"sentence": packed}`
    (unsup), `{"sent0", "sent1", "hard_neg"}` (sup) or `{"sentence1",
    "sentence2": packed, "label": int [B]}` (paraphrase).

    Args:
        encoder: `SentenceEncoder`. Trained in place; kept as `.encoder`.
        mode: str. `"unsup"`, `"sup"` or `"paraphrase"`. Defaults to
            `"unsup"`.
        temperature: float. Defaults to `0.05`.
        pooling: str. Defaults to `"cls"` (the paper's).
        mlp: str. `"train"` (MLP head in training only) or `"none"`.
            Defaults to `"train"`.
        hard_negative_weight: float. Defaults to `0.0`.
        negative_weight: float. Weight of the push-down term of
            `"paraphrase"`. Defaults to `1.0`.
        negative_margin: float. Cosine below which a not-paraphrase pair is
            no longer pushed. Defaults to `0.0`.

    Examples:

    ```python
    encoder = SentenceEncoder.from_preset("default")
    trainer = SimCSE(encoder, pooling="mean", mlp="none")
    trainer.compile(optimizer=keras.optimizers.Adam(3e-5), jit_compile=False)
    trainer.fit(dataset, steps_per_epoch=1000)   # {"sentence": packed} batches
    ```

    References:
        - [Gao et al., 2021. SimCSE: Simple Contrastive Learning of Sentence
          Embeddings](https://arxiv.org/abs/2104.08821).
    """

    def __init__(
        self,
        encoder,
        mode="unsup",
        temperature=0.05,
        pooling="cls",
        mlp="train",
        hard_negative_weight=0.0,
        negative_weight=1.0,
        negative_margin=0.0,
        **kwargs,
    ):
        super().__init__(encoder, **kwargs)
        if mode not in SIMCSE_MODES:
            raise ValueError(f"`mode` must be one of {list(SIMCSE_MODES)}. Received: mode={mode!r}.")
        if mlp not in MLP_MODES:
            raise ValueError(f"`mlp` must be one of {list(MLP_MODES)}. Received: mlp={mlp!r}.")
        self.mode = mode
        self.temperature = _fit.check_positive(temperature, "temperature", float)
        self.pooling = parse_pooling(pooling, encoder.num_layers)
        encoder.pooling = self.pooling
        self.mlp_mode = mlp
        self.hard_negative_weight = float(hard_negative_weight)
        self.negative_weight = float(negative_weight)
        self.negative_margin = float(negative_margin)
        self.mlp = None
        if mlp == "train":
            self.mlp = keras.layers.Dense(
                encoder.output_dim,
                activation="tanh",
                kernel_initializer=keras.initializers.RandomNormal(stddev=0.02),
                name="simcse_mlp",
            )
            self.mlp.build((None, encoder.output_dim))
        self.positive_tracker = keras.metrics.Mean(name="positive_loss")
        self.negative_tracker = keras.metrics.Mean(name="negative_loss")

    def extra_metrics(self):
        if self.mode != "paraphrase":
            return []
        return [self.positive_tracker, self.negative_tracker]

    def get_config(self):
        return {
            "mode": self.mode,
            "temperature": self.temperature,
            "pooling": self.pooling,
            "mlp": self.mlp_mode,
            "hard_negative_weight": self.hard_negative_weight,
            "negative_weight": self.negative_weight,
            "negative_margin": self.negative_margin,
        }

    def _embed(self, inputs, training):
        x = view_embeddings(
            self.encoder, inputs, None, pooling=self.pooling,
            training=training, encoder_dropout=True,
        )
        if self.mlp is not None:
            x = tf.cast(self.mlp(x), "float32")
        return x

    def compute_contrastive_loss(self, data, training=True):
        if self.mode == "unsup":
            x = data["sentence"]
            batch = tf.shape(x["token_ids"])[0]
            doubled = {k: tf.concat([v, v], axis=0) for k, v in x.items()}
            z = self._embed(doubled, training)
            return info_nce_loss(z[:batch], z[batch:], temperature=self.temperature)
        if self.mode == "sup":
            anchors = self._embed(data["sent0"], training)
            positives = self._embed(data["sent1"], training)
            negatives = self._embed(data["hard_neg"], training)
            return info_nce_loss(
                anchors, positives, hard_negatives=negatives,
                temperature=self.temperature,
                hard_negative_weight=self.hard_negative_weight,
            )
        u = self._embed(data["sentence1"], training)
        v = self._embed(data["sentence2"], training)
        return paraphrase_loss(
            u, v, data["label"], self.temperature,
            self.negative_weight, self.negative_margin,
        )


def paraphrase_loss(u, v, labels, temperature=0.05, negative_weight=1.0, negative_margin=0.0):
    """Loss of labelled paraphrase pairs (CS224N multitask report style).

    `positive = mean over pairs with label 1 of InfoNCE(u_i -> v_i among all
    v of the batch)`; `negative = mean over pairs with label 0 of
    relu(cos(u_i, v_i) - negative_margin)`; returns `(positive +
    negative_weight * negative, {"positive_loss", "negative_loss"})`. A term
    with no pair in the batch is 0.
    """
    labels = tf.cast(tf.reshape(labels, [-1]), "float32")
    per_example = info_nce_loss(u, v, temperature=temperature, reduction="none")
    positives = tf.cast(labels > 0.5, "float32")
    negatives = 1.0 - positives
    positive = tf.math.divide_no_nan(
        tf.reduce_sum(per_example * positives), tf.reduce_sum(positives)
    )
    cos = tf.reduce_sum(l2_normalize(u) * l2_normalize(v), axis=-1)
    negative = tf.math.divide_no_nan(
        tf.reduce_sum(tf.nn.relu(cos - negative_margin) * negatives), tf.reduce_sum(negatives)
    )
    loss = positive + negative_weight * negative
    return loss, {"positive_loss": positive, "negative_loss": negative}


def fit_simcse(
    corpus=None,
    model="default",
    output=None,
    steps=None,
    batch_size=64,
    learning_rate=3e-5,
    max_length=32,
    mode="unsup",
    supervised=None,
    temperature=0.05,
    pooling="cls",
    mlp="train",
    hard_negative_weight=0.0,
    negative_weight=1.0,
    negative_margin=0.0,
    dev="stsb",
    eval_every=125,
    seed=42,
    strategy=None,
    callbacks=None,
    verbose="auto",
):
    """Trains a sentence encoder with SimCSE and returns it.

    Unsupervised (default, the paper's main setting): the sentences of
    `corpus` (e.g. Wikipedia), dropout noise as the only augmentation,
    InfoNCE at temperature 0.05, [CLS] pooling with an MLP head in training
    only, batch 64, learning rate 3e-5, max length 32, one epoch. `mode="sup"`
    trains on `(premise, entailment, contradiction)` triplets (a
    `sent0,sent1,hard_neg` CSV; the paper uses batch 512, lr 5e-5, max
    length 32); `mode="paraphrase"` on `(sentence1, sentence2, label)` pairs
    such as `quora-dev.csv`. In the supervised modes the data comes from
    `supervised`, or, when that is None, from `corpus` (so `keras-sentemb
    train simcse --train-file nli.csv --mode sup` works). With `dev` (STS-B
    dev by default) the best checkpoint (the starting weights included) is
    kept.

    For encoders trained with mean pooling (such as the default
    all-MiniLM-L6-v2) pass `pooling="mean", mlp="none"`.

    Args:
        corpus: list of str, text file, `tf.data.Dataset` or TFDS name (or
            the supervised file, see above).
        model: str or `SentenceEncoder`. Defaults to `"default"`.
        output: str or None. Folder to save the kept encoder. Defaults to
            `None`.
        steps: int or None. Defaults to one epoch.
        batch_size: int. Defaults to `64`.
        learning_rate: float. Defaults to `3e-5`.
        max_length: int. Defaults to `32`.
        mode: str. `"unsup"`, `"sup"` or `"paraphrase"`. Defaults to
            `"unsup"`.
        supervised: path or list. Triplets (sup) or labelled pairs
            (paraphrase). Defaults to `None`.
        temperature: float. Defaults to `0.05`.
        pooling: str. Defaults to `"cls"`.
        mlp: str. `"train"` or `"none"`. Defaults to `"train"`.
        hard_negative_weight: float. Defaults to `0.0`.
        negative_weight: float. Paraphrase mode. Defaults to `1.0`.
        negative_margin: float. Paraphrase mode. Defaults to `0.0`.
        dev: `"stsb"`, None, an STS-B file/folder or a list of
            (s1, s2, score). Defaults to `"stsb"`.
        eval_every: int. Defaults to `125`.
        seed: int. Defaults to `42`.
        strategy: `tf.distribute.Strategy` or None. Trains under its scope
            (candidates are gathered across replicas). Defaults to `None`.
        callbacks: list of Keras callbacks. Defaults to `None`.
        verbose: Keras `fit` verbosity. Defaults to `"auto"`.

    Returns:
        The trained `SentenceEncoder` (the dev-selected checkpoint).

    Examples:

    ```python
    encoder = fit_simcse("wiki100k.txt", steps=300, pooling="mean", mlp="none")
    encoder = fit_simcse(supervised="nli.csv", mode="sup", batch_size=128)
    ```

    References:
        - [Gao et al., 2021. SimCSE: Simple Contrastive Learning of Sentence
          Embeddings](https://arxiv.org/abs/2104.08821).
    """
    with _fit.scope(strategy):
        from keras_sentemb.data.corpus import load_corpus
        from keras_sentemb.data.nli import load_supervised

        if mode not in SIMCSE_MODES:
            raise ValueError(f"`mode` must be one of {list(SIMCSE_MODES)}. Received: {mode!r}.")
        batch_size = _fit.check_positive(batch_size, "batch_size", int)
        learning_rate = _fit.check_positive(learning_rate, "learning_rate", float)
        encoder = _fit.resolve_encoder(model, max_length)
        max_length = encoder.max_length if max_length is None else int(max_length)
        dev_pairs = _fit.resolve_dev(dev)
        keras.utils.set_random_seed(seed)
        if mode == "unsup":
            if corpus is None:
                raise ValueError("mode='unsup' needs a `corpus` of sentences.")
            sentences = load_corpus(corpus)
            columns, extra, n = {"sentence": sentences}, None, len(sentences)
        else:
            source = supervised if supervised is not None else corpus
            if source is None:
                raise ValueError(f"mode={mode!r} needs `supervised` data (or `corpus` as its path).")
            kind, rows = load_supervised(source)
            wanted = "triplets" if mode == "sup" else "labeled_pairs"
            if kind != wanted:
                raise ValueError(
                    f"mode={mode!r} expects {wanted} (sent0,sent1,hard_neg for 'sup'; "
                    f"sentence1,sentence2,label for 'paraphrase'). Received {kind}."
                )
            if mode == "sup":
                columns = {k: [r[i] for r in rows] for i, k in enumerate(("sent0", "sent1", "hard_neg"))}
                extra = None
            else:
                columns = {"sentence1": [r[0] for r in rows], "sentence2": [r[1] for r in rows]}
                extra = {"label": [int(r[2]) for r in rows]}
            n = len(rows)
        steps = steps or _fit.epoch_steps(n, batch_size)
        dataset = _fit.columns_dataset(encoder, columns, batch_size, max_length, seed=seed, extra=extra)
        trainer = SimCSE(
            encoder, mode=mode, temperature=temperature, pooling=pooling, mlp=mlp,
            hard_negative_weight=hard_negative_weight, negative_weight=negative_weight,
            negative_margin=negative_margin,
        )
        logger.info("SimCSE %s: %d examples, %d steps", mode, n, steps)
        _fit.run_fit(trainer, dataset, int(steps), learning_rate, dev_pairs, eval_every,
                     callbacks=callbacks, verbose=verbose)
        encoder = trainer.encoder
        if output is not None:
            encoder.save(output)
        return encoder


