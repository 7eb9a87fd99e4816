"""ConSERT: contrastive learning on two augmented views of each sentence."""

import functools
import logging

import keras
import tensorflow as tf

from keras_sentemb.augment.adversarial_perturbation import adversarial_perturbation
from keras_sentemb.augment.views import VIEW_NAMES
from keras_sentemb.augment.views import make_view
from keras_sentemb.losses.nt_xent import nt_xent_loss
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.trainers import _fit
from keras_sentemb.trainers._views import view_embeddings
from keras_sentemb.trainers.base_trainer import BaseTrainer

logger = logging.getLogger(__name__)

CONSERT_MODES = ("unsup", "sup", "joint")
CONSERT_FIT_MODES = ("unsup", "sup", "joint", "sup_unsup", "joint_unsup")
ADVERSARIAL = "adversarial"


class ConSERT(BaseTrainer):
    """ConSERT trainer: NT-Xent between two augmented views of each sentence.

    Every sentence of the batch is encoded twice, each time through one
    augmentation view (token shuffle acts on the position ids; token /
    feature / span cutoff and dropout act on the embedding output after the
    embedding LayerNorm), mean-pooled, and the NT-Xent loss asks each of the
    `2N` views to find its counterpart among the `2N - 1` others. The
    encoder's own dropout is off by default (the views are the only noise),
    as in ConSERT's best unsupervised setting.

    Supervised modes take NLI data `(premise, hypothesis, label)`:

    - `"sup"`: SBERT's softmax classifier on `[u, v, |u - v|]` (cross-entropy)
      only.
    - `"joint"`: cross-entropy + `alpha` x NT-Xent on the views of all
      premises and hypotheses of the batch.

    The two-stage modes `"sup_unsup"` and `"joint_unsup"` are a supervised
    stage followed by an unsupervised one; `fit_consert` runs them. In the
    supervised modes one of the views may be `"adversarial"`: the embedding
    output plus the fast-gradient-value perturbation of the cross-entropy,
    normalised per token and scaled by `noise_norm`.

    Inputs of `fit` (see `fit_consert`, which builds them): unsupervised
    batches are dicts `{"sentence": packed}`, supervised ones
    `{"premise": packed, "hypothesis": packed, "label": int [B]}` where
    `packed` is `SentenceEncoder.preprocess` output.

    Args:
        encoder: `SentenceEncoder`. Trained in place; kept as `.encoder`.
        views: pair of str. The two views, from `"none"`, `"shuffle"`,
            `"token_cutoff"`, `"feature_cutoff"`, `"span_cutoff"`,
            `"dropout"` (and `"adversarial"` in supervised modes).
            Defaults to `("shuffle", "feature_cutoff")` (the paper's best).
        view_rates: pair of float or None. Rates of the two views (`None`:
            the registry default, e.g. 0.2 for feature cutoff). Defaults to
            `(None, None)`.
        temperature: float. NT-Xent temperature. Defaults to `0.1`.
        pooling: str. Pooling used in training; also set on the encoder, so
            evaluation and the saved model use it. Defaults to `"mean"`.
        encoder_dropout: bool. Keep the backbone's own dropout on in
            training. Defaults to `False`.
        mode: str. `"unsup"`, `"sup"` or `"joint"`. Defaults to `"unsup"`.
        alpha: float. Weight of the contrastive loss in `"joint"` mode.
            Defaults to `0.15`.
        num_labels: int. Classes of the supervised classifier. Defaults to
            `3` (entailment, neutral, contradiction).
        noise_norm: float. Per-token norm of the adversarial perturbation.
            Defaults to `1.0`.
        seed: int or None. Seed of the view layers. Defaults to `None`.

    Examples:

    ```python
    encoder = SentenceEncoder.from_preset("default")
    trainer = ConSERT(encoder)
    trainer.compile(optimizer=keras.optimizers.Adam(5e-7), jit_compile=False)
    trainer.fit(dataset, steps_per_epoch=500)   # {"sentence": packed} batches
    trainer.encoder.encode(["A man plays a guitar."])
    ```

    References:
        - [Yan et al., 2021. ConSERT: A Contrastive Framework for
          Self-Supervised Sentence Representation Transfer](
          https://arxiv.org/abs/2105.11741).
        - [Chen et al., 2020. A Simple Framework for Contrastive Learning of
          Visual Representations](https://arxiv.org/abs/2002.05709) (NT-Xent).
    """

    def __init__(
        self,
        encoder,
        views=("shuffle", "feature_cutoff"),
        view_rates=(None, None),
        temperature=0.1,
        pooling="mean",
        encoder_dropout=False,
        mode="unsup",
        alpha=0.15,
        num_labels=3,
        noise_norm=1.0,
        seed=None,
        **kwargs,
    ):
        super().__init__(encoder, **kwargs)
        if mode not in CONSERT_MODES:
            raise ValueError(
                f"`mode` must be one of {list(CONSERT_MODES)} (the two-stage "
                f"modes are run by fit_consert). Received: mode={mode!r}."
            )
        views = _parse_views(views)
        view_rates = tuple(view_rates) if view_rates is not None else (None, None)
        if len(view_rates) != 2:
            raise ValueError(
                f"`view_rates` must be a pair (rate_a, rate_b). Received: {view_rates!r}."
            )
        if ADVERSARIAL in views and mode == "unsup":
            raise ValueError(
                "The 'adversarial' view needs a supervised loss; use mode='sup' "
                f"or 'joint'. Received: views={views}, mode={mode!r}."
            )
        temperature = _fit.check_positive(temperature, "temperature", float)
        self.views = views
        self.view_rates = view_rates
        self.temperature = temperature
        self.pooling = parse_pooling(pooling, encoder.num_layers)
        encoder.pooling = self.pooling
        self.encoder_dropout = bool(encoder_dropout)
        self.mode = mode
        self.alpha = float(alpha)
        self.num_labels = _fit.check_positive(num_labels, "num_labels", int)
        self.noise_norm = _fit.check_positive(noise_norm, "noise_norm", float)
        self.seed = seed
        self.view_layers = [
            None if name == ADVERSARIAL else make_view(
                name, rate=rate, seed=None if seed is None else seed + i
            ) if name != "none" else make_view("none")
            for i, (name, rate) in enumerate(zip(views, view_rates))
        ]
        self.classifier = None
        if mode != "unsup":
            self.classifier = keras.layers.Dense(
                self.num_labels, name="nli_classifier", dtype="float32"
            )
            self.classifier.build((None, 3 * encoder.output_dim))
        self.ce_tracker = keras.metrics.Mean(name="ce_loss")
        self.contrastive_tracker = keras.metrics.Mean(name="contrastive_loss")
        self.accuracy_tracker = keras.metrics.Mean(name="accuracy")

    def extra_metrics(self):
        if self.mode == "unsup":
            return []
        return [self.ce_tracker, self.contrastive_tracker, self.accuracy_tracker]

    def get_config(self):
        return {
            "views": list(self.views),
            "view_rates": list(self.view_rates),
            "temperature": self.temperature,
            "pooling": self.pooling,
            "encoder_dropout": self.encoder_dropout,
            "mode": self.mode,
            "alpha": self.alpha,
            "num_labels": self.num_labels,
            "noise_norm": self.noise_norm,
            "seed": self.seed,
        }

    # ----------------------------------------------------------------- passes
    def _embed(self, inputs, view, training, hook=None):
        return view_embeddings(
            self.encoder,
            inputs,
            view,
            pooling=self.pooling,
            training=training,
            encoder_dropout=self.encoder_dropout,
            embedding_hook=hook,
        )

    def _two_views(self, inputs, training, adv_grads=None):
        out = []
        for name, layer in zip(self.views, self.view_layers):
            if name == ADVERSARIAL:
                hook = None
                if training and adv_grads is not None:
                    hook = functools.partial(
                        adversarial_perturbation,
                        gradients=adv_grads,
                        noise_norm=self.noise_norm,
                        padding_mask=inputs["padding_mask"],
                    )
                out.append(self._embed(inputs, None, training, hook))
            else:
                out.append(self._embed(inputs, layer, training))
        return out

    def compute_contrastive_loss(self, data, training=True):
        if self.mode == "unsup":
            a, b = self._two_views(data["sentence"], training)
            return nt_xent_loss(a, b, temperature=self.temperature)
        return self._supervised_loss(data, training)

    def _supervised_loss(self, data, training):
        premise, hypothesis = data["premise"], data["hypothesis"]
        labels = tf.cast(data["label"], "int32")
        need_adv = training and ADVERSARIAL in self.views
        captured = {}

        def watch(key, tape):
            def hook(e):
                if tape is not None:
                    tape.watch(e)
                captured[key] = e
                return e

            return hook

        with tf.GradientTape(persistent=True) as inner:
            tape = inner if need_adv else None
            u = self._embed(premise, None, training, watch("premise", tape))
            v = self._embed(hypothesis, None, training, watch("hypothesis", tape))
            features = tf.concat([u, v, tf.abs(u - v)], axis=-1)
            logits = tf.cast(self.classifier(features), "float32")
            ce = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
            )
        grads = {}
        if need_adv:
            grads = {
                k: tf.stop_gradient(inner.gradient(ce, captured[k]))
                for k in ("premise", "hypothesis")
            }
        del inner
        accuracy = tf.reduce_mean(
            tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), "float32")
        )
        extras = {"ce_loss": ce, "accuracy": accuracy}
        if self.mode == "sup":
            extras["contrastive_loss"] = tf.constant(0.0)
            return ce, extras
        pa, pb = self._two_views(premise, training, grads.get("premise"))
        ha, hb = self._two_views(hypothesis, training, grads.get("hypothesis"))
        contrastive = nt_xent_loss(
            tf.concat([pa, ha], 0), tf.concat([pb, hb], 0), temperature=self.temperature
        )
        extras["contrastive_loss"] = contrastive
        return ce + self.alpha * contrastive, extras


def _parse_views(views):
    if isinstance(views, str):
        views = [v.strip() for v in views.split(",")]
    views = tuple(views) if views is not None else ()
    valid = VIEW_NAMES + (ADVERSARIAL,)
    if len(views) != 2 or any(v not in valid for v in views):
        raise ValueError(
            f"`views` must be two view names from {list(valid)} (a pair or "
            f"'a,b'). Received: {views!r}."
        )
    return views


def _stsb_sentences(path, split):
    from keras_sentemb.evaluation.readers import read_stsb

    pairs = read_stsb(path, split)
    return [s for a, b, _ in pairs for s in (a, b)]


def fit_consert(
    corpus=None,
    model="default",
    output=None,
    steps=None,
    batch_size=96,
    learning_rate=5e-7,
    max_length=64,
    mode="unsup",
    supervised=None,
    views="shuffle,feature_cutoff",
    view_rates=None,
    temperature=0.1,
    pooling="mean",
    encoder_dropout=False,
    alpha=0.15,
    noise_norm=1.0,
    supervised_steps=None,
    supervised_learning_rate=2e-5,
    dev="stsb",
    eval_every=125,
    seed=42,
    strategy=None,
    callbacks=None,
    verbose="auto",
):
    """Trains a sentence encoder with ConSERT and returns it.

    Unsupervised (default): the sentences of `corpus` — ideally the
    unlabeled texts of the target domain — seen through two views (token
    shuffle + feature cutoff 0.2), NT-Xent at temperature 0.1, mean pooling,
    the encoder's dropout off, batch 96, learning rate 5e-7, one epoch
    (ConSERT's main unsupervised setting). Supervised modes read NLI data
    from `supervised` (a `sent0,sent1,hard_neg` CSV is turned into
    entailment/contradiction pairs; a labelled-pair TSV such as the Quora
    file is used as is):

    - `"sup"`: SBERT-style cross-entropy on `[u, v, |u - v|]` only;
    - `"joint"`: cross-entropy + `alpha` x NT-Xent;
    - `"sup_unsup"` / `"joint_unsup"`: that supervised stage
      (`supervised_steps`, `supervised_learning_rate`), then the
      unsupervised stage on `corpus`.

    With `dev` (STS-B dev by default), the encoder is scored every
    `eval_every` steps and the best checkpoint (the starting weights
    included) is kept.

    Args:
        corpus: list of str, text file, `tf.data.Dataset` or TFDS name.
            Unlabeled sentences. Required except in modes `"sup"` /
            `"joint"`, where, when `supervised` is None, it is read as the
            supervised file.
        model: str or `SentenceEncoder`. Defaults to `"default"`.
        output: str or None. Folder to save the kept encoder. Defaults to
            `None`.
        steps: int or None. Steps of the unsupervised stage (of the only
            stage in `"sup"` / `"joint"`). Defaults to one epoch.
        batch_size: int. Defaults to `96`.
        learning_rate: float. Defaults to `5e-7` (ConSERT, unsupervised).
        max_length: int. Tokens per sentence. Defaults to `64`.
        mode: str. `"unsup"`, `"sup"`, `"joint"`, `"sup_unsup"` or
            `"joint_unsup"`. Defaults to `"unsup"`.
        supervised: path or list. NLI / labelled-pair data for the
            supervised modes. Defaults to `None`.
        views: str or pair. The two views, e.g. `"shuffle,feature_cutoff"`.
            Defaults to `"shuffle,feature_cutoff"`.
        view_rates: str, pair or None. Rates of the two views, e.g.
            `"0.1,0.2"`. Defaults to `None` (registry defaults).
        temperature: float. Defaults to `0.1`.
        pooling: str. Defaults to `"mean"`.
        encoder_dropout: bool. Defaults to `False`.
        alpha: float. Contrastive weight in joint modes. Defaults to `0.15`.
        noise_norm: float. Adversarial view strength. Defaults to `1.0`.
        supervised_steps: int or None. Steps of the supervised stage.
            Defaults to one epoch of the supervised data.
        supervised_learning_rate: float. Defaults to `2e-5`.
        dev: `"stsb"`, None, an STS-B file/folder or a list of
            (s1, s2, score). Dev set for checkpoint selection. Defaults to
            `"stsb"` (bundled STS-B dev).
        eval_every: int. Dev evaluation period in steps. Defaults to `125`.
        seed: int. Shuffle and view seed. Defaults to `42`.
        strategy: `tf.distribute.Strategy` or None. Trains under its scope
            (candidates are gathered across replicas). Defaults to `None`.
        callbacks: list of Keras callbacks. Defaults to `None`.
        verbose: Keras `fit` verbosity. Defaults to `"auto"`.

    Returns:
        The trained `SentenceEncoder` (the dev-selected checkpoint).

    Examples:

    ```python
    from keras_sentemb.evaluation.readers import read_stsb
    sentences = [s for a, b, _ in read_stsb("STS/STSBenchmark", "train") for s in (a, b)]
    encoder = fit_consert(sentences, steps=200, max_length=40)
    ```

    References:
        - [Yan et al., 2021. ConSERT: A Contrastive Framework for
          Self-Supervised Sentence Representation Transfer](
          https://arxiv.org/abs/2105.11741).
    """
    with _fit.scope(strategy):
        from keras_sentemb.data.corpus import load_corpus
        from keras_sentemb.data.nli import load_supervised
        from keras_sentemb.data.nli import triplets_to_nli_pairs

        if mode not in CONSERT_FIT_MODES:
            raise ValueError(f"`mode` must be one of {list(CONSERT_FIT_MODES)}. Received: {mode!r}.")
        batch_size = _fit.check_positive(batch_size, "batch_size", int)
        learning_rate = _fit.check_positive(learning_rate, "learning_rate", float)
        if isinstance(view_rates, str):
            view_rates = [None if r.strip().lower() == "none" else float(r) for r in view_rates.split(",")]
        if view_rates is None:
            view_rates = (None, None)
        encoder = _fit.resolve_encoder(model, max_length)
        max_length = encoder.max_length if max_length is None else int(max_length)
        dev_pairs = _fit.resolve_dev(dev)
        keras.utils.set_random_seed(seed)
        supervised_only = mode in ("sup", "joint")
        if supervised is None and supervised_only:
            supervised, corpus = corpus, None
        if mode != "unsup" and supervised is None:
            raise ValueError(f"mode={mode!r} needs `supervised` data (NLI triplets or labelled pairs).")
        if not supervised_only and corpus is None:
            raise ValueError(f"mode={mode!r} needs an unlabeled `corpus`.")

        common = dict(
            views=views, view_rates=view_rates, temperature=temperature, pooling=pooling,
            encoder_dropout=encoder_dropout, alpha=alpha, noise_norm=noise_norm, seed=seed,
        )
        trainer = None
        if mode != "unsup":
            kind, rows = load_supervised(supervised)
            if kind == "triplets":
                rows = triplets_to_nli_pairs(rows)
            num_labels = max(3 if kind == "triplets" else 2, max(r[2] for r in rows) + 1)
            stage = "joint" if mode.startswith("joint") else "sup"
            sup_steps = steps if supervised_only else supervised_steps
            sup_steps = sup_steps or _fit.epoch_steps(len(rows), batch_size)
            sup_lr = learning_rate if supervised_only else supervised_learning_rate
            dataset = _fit.columns_dataset(
                encoder,
                {"premise": [r[0] for r in rows], "hypothesis": [r[1] for r in rows]},
                batch_size, max_length, seed=seed, extra={"label": [r[2] for r in rows]},
            )
            sup_views = views
            trainer = ConSERT(encoder, mode=stage, num_labels=num_labels, **{**common, "views": sup_views})
            logger.info("ConSERT %s stage: %d rows, %d steps", stage, len(rows), sup_steps)
            _fit.run_fit(trainer, dataset, int(sup_steps), sup_lr, dev_pairs, eval_every,
                         callbacks=callbacks, verbose=verbose)
            encoder = trainer.encoder
        if not supervised_only:
            sentences = load_corpus(corpus)
            steps = steps or _fit.epoch_steps(len(sentences), batch_size)
            unsup_views = _parse_views(views)
            if ADVERSARIAL in unsup_views:
                unsup_views = ("shuffle", "feature_cutoff")
                logger.info("The unsupervised stage uses shuffle + feature_cutoff (no adversarial view).")
            dataset = _fit.columns_dataset(encoder, {"sentence": sentences}, batch_size, max_length, seed=seed)
            trainer = ConSERT(encoder, mode="unsup", **{**common, "views": unsup_views})
            logger.info("ConSERT unsup stage: %d sentences, %d steps", len(sentences), steps)
            _fit.run_fit(trainer, dataset, int(steps), learning_rate, dev_pairs, eval_every,
                         callbacks=callbacks, verbose=verbose)
            encoder = trainer.encoder
        if output is not None:
            encoder.save(output)
        return encoder


