"""`MultitaskContrastivePretrainer`: contrastive pre-training before the heads."""

import random

import keras
import tensorflow as tf

from keras_sentemb.data.batching import tokenize_columns
from keras_sentemb.losses import info_nce_loss
from keras_sentemb.trainers.base_trainer import BaseTrainer

PRETRAIN_MODES = ("none", "unsup", "paraphrase", "nli")


@keras.saving.register_keras_serializable(package="keras_sentemb")
class MultitaskContrastivePretrainer(BaseTrainer):
    """SimCSE-style contrastive pre-training of the shared encoder.

    One of three objectives, all the shared `info_nce_loss` (nothing is
    re-implemented here):

    - `"unsup"`: the batch's sentences go through the encoder twice with
      dropout on (`training=True`); each sentence's second view is its
      positive, the other sentences of the batch are negatives (unsupervised
      SimCSE). Used on the sentences of all three multitask train sets.
    - `"paraphrase"`: anchors and positives are the two questions of Quora
      paraphrase pairs; the hard negative of each anchor is a question it
      was labelled *not* a paraphrase of (when the anchor occurs in a
      non-paraphrase pair, else a random question from one), so
      non-paraphrases are pushed down.
    - `"nli"`: (premise, entailment, contradiction) triplets, the
      contradiction as hard negative (supervised SimCSE).

    The dataset elements are dicts of packed inputs: `anchor` and optionally
    `positive` and `negative` (see `make_pretraining_dataset`).

    Args:
        encoder: `SentenceEncoder`. Trained in place.
        temperature: float. InfoNCE temperature. Defaults to `0.05`.
        hard_negative_weight: float. SimCSE's weight on each anchor's own
            hard negative. Defaults to `0.0`.

    Examples:

    ```python
    pretrainer = MultitaskContrastivePretrainer(encoder)
    pretrainer.compile(optimizer=keras.optimizers.AdamW(3e-5), jit_compile=False)
    pretrainer.fit(make_pretraining_dataset(encoder, examples, 16), steps_per_epoch=100)
    ```

    References:
        - [Gao et al., 2021. SimCSE](https://arxiv.org/abs/2104.08821)
        - Contrastive Learning for Generalizable Sentence Embeddings
          (Stanford CS224N default-project report: multitask minBERT with
          contrastive pre-training).
    """

    def __init__(
        self, encoder, temperature=0.05, hard_negative_weight=0.0, **kwargs
    ):
        super().__init__(encoder, **kwargs)
        if not float(temperature) > 0:
            raise ValueError(f"`temperature` must be > 0; received {temperature!r}")
        self.temperature = float(temperature)
        self.hard_negative_weight = float(hard_negative_weight)

    def compute_contrastive_loss(self, data, training=True):
        anchors = self.encoder(data["anchor"], training=training)
        if "positive" in data:
            positives = self.encoder(data["positive"], training=training)
        else:
            positives = self.encoder(data["anchor"], training=training)
        negatives = None
        if "negative" in data:
            negatives = self.encoder(data["negative"], training=training)
        return info_nce_loss(
            anchors,
            positives,
            hard_negatives=negatives,
            temperature=self.temperature,
            hard_negative_weight=(
                self.hard_negative_weight if negatives is not None else 0.0
            ),
        )

    def get_config(self):
        return {
            "temperature": self.temperature,
            "hard_negative_weight": self.hard_negative_weight,
            "name": self.name,
        }


def pretraining_examples(mode, train, nli_triplets=None, seed=0):
    """Columns of raw strings for a pre-training mode.

    Args:
        mode: str. `"unsup"`, `"paraphrase"` or `"nli"`.
        train: dict `{task: examples}` as returned in
            `load_multitask_data(...)["train"]`.
        nli_triplets: list of `(anchor, positive, negative)` (for `"nli"`).
        seed: int. Seed of the random hard negatives. Defaults to `0`.

    Returns:
        dict of equally long lists: `anchor` (+ `positive`, `negative`).
    """
    if mode == "unsup":
        seen, sentences = set(), []
        for s, _ in train["sentiment"]:
            if s not in seen:
                seen.add(s)
                sentences.append(s)
        for task in ("paraphrase", "similarity"):
            for a, b, _ in train[task]:
                for s in (a, b):
                    if s not in seen:
                        seen.add(s)
                        sentences.append(s)
        return {"anchor": sentences}
    if mode == "paraphrase":
        rng = random.Random(seed)
        pairs = train["paraphrase"]
        negative_partner = {}
        negative_pool = []
        for a, b, y in pairs:
            if y < 0.5:
                negative_partner.setdefault(a, b)
                negative_partner.setdefault(b, a)
                negative_pool.append(b)
        if not negative_pool:
            raise ValueError("Paraphrase pre-training needs non-paraphrase pairs.")
        columns = {"anchor": [], "positive": [], "negative": []}
        for a, b, y in pairs:
            if y >= 0.5:
                columns["anchor"].append(a)
                columns["positive"].append(b)
                columns["negative"].append(
                    negative_partner.get(a) or rng.choice(negative_pool)
                )
        if not columns["anchor"]:
            raise ValueError("Paraphrase pre-training needs paraphrase pairs.")
        return columns
    if mode == "nli":
        if not nli_triplets:
            raise ValueError("NLI pre-training needs `nli_triplets`.")
        return {
            "anchor": [t[0] for t in nli_triplets],
            "positive": [t[1] for t in nli_triplets],
            "negative": [t[2] for t in nli_triplets],
        }
    raise ValueError(
        f"`mode` must be one of {PRETRAIN_MODES[1:]}; received {mode!r}"
    )


def make_pretraining_dataset(encoder, columns, batch_size, max_length=None, seed=0):
    """Shuffled, repeated, tokenized batches of `columns` (drop remainder)."""
    size = len(columns["anchor"])
    if size < batch_size:
        raise ValueError(
            f"Pre-training needs at least batch_size={batch_size} examples; "
            f"received {size}."
        )
    ds = tf.data.Dataset.from_tensor_slices(
        {k: tf.constant(v, tf.string) for k, v in columns.items()}
    )
    ds = ds.shuffle(min(size, 100_000), seed=seed).repeat()
    ds = ds.batch(batch_size, drop_remainder=True)
    return tokenize_columns(encoder, ds, list(columns), max_length)
