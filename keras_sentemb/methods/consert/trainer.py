"""ConSERT: contrastive learning on two augmented views of each sentence."""

import functools

import keras
import tensorflow as tf

from keras_sentemb import validation
from keras_sentemb.methods.consert.config import ADVERSARIAL
from keras_sentemb.methods.consert.config import ConSERTConfig
from keras_sentemb.methods.consert.config import PAPER_POOLING
from keras_sentemb.methods.consert.config import parse_views
from keras_sentemb.augment.adversarial_perturbation import adversarial_perturbation
from keras_sentemb.augment.views import make_view_pair
from keras_sentemb.augment.views import parse_view_rates
from keras_sentemb.losses.classification import pair_features
from keras_sentemb.losses.classification import softmax_classification_loss
from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.losses.nt_xent import nt_xent_loss
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.trainers.base_trainer import BaseTrainer

CONSERT_MODES = ("unsup", "sup", "joint")


@keras.saving.register_keras_serializable(package="keras_sentemb")
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
    - `"joint"`: cross-entropy + `alpha` x (NT-Xent of the premises' views +
      NT-Xent of the hypotheses' views), one contrastive loss per side as in
      the official code.

    The two-stage modes `"sup_unsup"` and `"joint_unsup"` are a supervised
    stage followed by an unsupervised one; `fit_consert` runs them. In the
    supervised modes one of the views may be `"adversarial"`: the embedding
    output plus the fast-gradient-value perturbation of the cross-entropy,
    normalised per token and scaled by `noise_norm`.

    Inputs of `fit` (see `fit_consert`, which builds them): unsupervised
    batches are dicts `{"sentence": packed}`, supervised ones
    `{"premise": packed, "hypothesis": packed, "label": int [B]}` where
    `packed` is `SentenceEncoder.preprocess` output.

    The defaults are the method's (`ConSERTConfig`, in `config.py` beside
    this module), with the paper's mean pooling.

    Args:
        encoder: `SentenceEncoder`. Trained in place; kept as `.encoder`.
        config: `ConSERTConfig` (or a dict of its options). The method's
            options the trainer uses: `views` (the two views, from `"none"`,
            `"shuffle"`, `"token_cutoff"`, `"feature_cutoff"`,
            `"span_cutoff"`, `"dropout"`, and `"adversarial"` in supervised
            modes), `view_rates` (their rates; None: each view's default,
            e.g. 0.2 for feature cutoff), `temperature` (NT-Xent),
            `encoder_dropout` (the backbone's own dropout on in training),
            `alpha` (weight of the contrastive loss in `"joint"` mode) and
            `noise_norm` (per-token norm of the adversarial perturbation).
            Defaults to the method's.
        pooling: str. Pooling used in training. Defaults to the paper's mean.
        mode: str. The stage trained: `"unsup"`, `"sup"` or `"joint"` (the
            two-stage modes of the method run one trainer per stage).
            Defaults to `"unsup"`.
        num_labels: int. Classes of the supervised classifier. Defaults to
            `3` (entailment, neutral, contradiction).
        seed: int or None. Seed of the view layers. Defaults to `None`.
        mini_batch_size: int or None. GradCache chunk size in `"unsup"` mode
            (see `BaseTrainer`). Defaults to `None` (off).
        **kwargs: single options overriding `config`'s (`views=("shuffle",
            "dropout")`), and Keras `Model` arguments.

    Examples:

    ```python
    encoder = SentenceEncoder.from_preset("default")
    trainer = ConSERT(encoder)
    trainer.compile(optimizer=keras.optimizers.Adam(5e-7))
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

    config_class = ConSERTConfig

    def __init__(self, encoder, config=None, pooling=PAPER_POOLING, mode="unsup", num_labels=3,
                 seed=None, **kwargs):
        super().__init__(encoder, config=config, **kwargs)
        if mode not in CONSERT_MODES:
            raise ValueError(
                f"`mode` must be one of {list(CONSERT_MODES)} (the two-stage "
                f"modes are run by fit_consert). Received: mode={mode!r}."
            )
        views = parse_views(self.config.views)
        view_rates = parse_view_rates(self.config.view_rates)
        if ADVERSARIAL in views and mode == "unsup":
            raise ValueError(
                "The 'adversarial' view needs a supervised loss; use mode='sup' "
                f"or 'joint'. Received: views={views}, mode={mode!r}."
            )
        self.views = views  # resolved from the config's text
        self.view_rates = view_rates
        self.temperature = self.config.temperature
        self.pooling = parse_pooling(pooling, encoder.num_layers)
        self.encoder_dropout = self.config.encoder_dropout
        self.mode = mode
        self.alpha = self.config.alpha
        self.num_labels = validation.positive_int(num_labels, "num_labels")
        self.noise_norm = self.config.noise_norm
        self.seed = seed
        self.view_layers = make_view_pair(views, view_rates, seed, extra=(ADVERSARIAL,))
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
        config = super().get_config()
        config.update({
            "pooling": self.pooling,
            "mode": self.mode,
            "num_labels": self.num_labels,
            "seed": self.seed,
        })
        return config

    # ----------------------------------------------------------------- passes
    def _embed(self, inputs, view, training, hook=None):
        return self.encoder.sentence_vectors(
            inputs,
            self.pooling,
            training=training,
            dropout=training and self.encoder_dropout,
            view=view,
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

    def compute_loss_terms(self, data, training=True):
        if self.mode == "unsup":
            return super().compute_loss_terms(data, training)
        return self._supervised_loss(data, training)

    def embed_batch(self, data, training=True):
        """Unsupervised mode: the two views' pooled vectors of the batch."""
        a, b = self._two_views(data["sentence"], training)
        return {"a": a, "b": b}

    def loss_from_embeddings(self, embeddings, data, training=True):
        loss = nt_xent_loss(embeddings["a"], embeddings["b"], temperature=self.temperature)
        return LossOutput(loss)

    def matryoshka_unsupported(self):
        if self.mode != "unsup":
            return (f"ConSERT mode={self.mode!r} trains a classifier on the full vectors; "
                    "use mode='unsup'")
        return super().matryoshka_unsupported()

    def grad_cache_unsupported(self):
        if self.mode != "unsup":
            return (
                f"ConSERT mode={self.mode!r} (the supervised classifier and the "
                "adversarial view need the whole batch in one pass); use mode='unsup'"
            )
        return super().grad_cache_unsupported()

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
            logits = self.classifier(pair_features(u, v))
            ce, accuracy = softmax_classification_loss(logits, labels)
        grads = {}
        if need_adv:
            grads = {
                k: tf.stop_gradient(inner.gradient(ce, captured[k]))
                for k in ("premise", "hypothesis")
            }
        del inner
        extras = {"ce_loss": ce, "accuracy": accuracy}
        if self.mode == "sup":
            extras["contrastive_loss"] = tf.constant(0.0)
            return LossOutput(ce, extras)
        pa, pb = self._two_views(premise, training, grads.get("premise"))
        ha, hb = self._two_views(hypothesis, training, grads.get("hypothesis"))
        # One NT-Xent per side, as the official code: an entailed hypothesis
        # is never a negative of its own premise.
        contrastive = (
            nt_xent_loss(pa, pb, temperature=self.temperature)
            + nt_xent_loss(ha, hb, temperature=self.temperature)
        )
        extras["contrastive_loss"] = contrastive
        return LossOutput(ce + self.alpha * contrastive, extras)


