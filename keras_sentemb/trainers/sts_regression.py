"""Supervised STS regression with model-specific labels (CT paper, section 5.2)."""

import logging

import keras
import numpy as np
import tensorflow as tf

from keras_sentemb.losses.similarity import l2_normalize
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.trainers import _fit
from keras_sentemb.trainers.base_trainer import BaseTrainer

logger = logging.getLogger(__name__)

LABEL_MODES = ("model_specific", "unit")
STS_SCORE_RANGE = (0.0, 5.0)


def lowest_bucket_mean(cosines, scores, num_buckets=20, score_range=STS_SCORE_RANGE):
    """M: mean cosine similarity of the lowest non-empty gold-score bucket.

    The gold scores are split into `num_buckets` equal-width buckets over
    `score_range` (for STS-B and 20 buckets: [0, 0.25), [0.25, 0.5), ...,
    [4.75, 5]); M is the mean of `cosines` over the pairs of the lowest
    bucket that holds any pair.

    Args:
        cosines: array-like [n]. The starting model's cosine of each pair.
        scores: array-like [n]. Gold scores.
        num_buckets: int. Defaults to `20`.
        score_range: pair of floats. Defaults to `(0.0, 5.0)`.

    Returns:
        A tuple `(M, bucket, count)`: the mean, the bucket's index and its
        number of pairs.
    """
    from keras_sentemb.evaluation.sts_spread import score_buckets

    cosines = np.asarray(cosines, dtype=np.float64).reshape(-1)
    index = score_buckets(scores, num_buckets, score_range)
    if cosines.shape != index.shape or cosines.size == 0:
        raise ValueError(
            "`cosines` and `scores` must be non-empty and of the same length. "
            f"Received {cosines.size} cosines and {index.size} scores."
        )
    lowest = int(index.min())
    chosen = cosines[index == lowest]
    return float(chosen.mean()), lowest, int(chosen.size)


def map_scores(scores, lower=0.0, score_range=STS_SCORE_RANGE):
    """Maps gold scores linearly from `score_range` onto `[lower, 1]`.

    `target = lower + (1 - lower) * (score - low) / (high - low)`: the lowest
    gold score goes to `lower`, the highest to 1. `lower=0` is the plain
    [0, 1] mapping of sentence-transformers' STS-B training; `lower=M` the
    model-specific mapping of Contrastive Tension.

    Args:
        scores: array-like of gold scores.
        lower: float. The target of the lowest score; must be < 1.
            Defaults to `0.0`.
        score_range: pair of floats. Defaults to `(0.0, 5.0)`.

    Returns:
        float32 numpy array of targets.
    """
    low, high = (float(v) for v in score_range)
    if not high > low:
        raise ValueError(f"`score_range` must have low < high. Received: {score_range!r}.")
    lower = float(lower)
    if not lower < 1.0:
        raise ValueError(
            f"The lower end of the label range must be < 1 (cosine 1 is the top "
            f"label). Received: {lower!r}."
        )
    scores = np.asarray(scores, dtype=np.float64)
    return (lower + (1.0 - lower) * (scores - low) / (high - low)).astype(np.float32)


def model_specific_lower_bound(
    encoder,
    pairs,
    num_buckets=20,
    score_range=STS_SCORE_RANGE,
    batch_size=128,
    max_length=None,
):
    """M of `encoder` on `pairs`: its mean cosine on the lowest score bucket.

    Only the pairs of the lowest non-empty bucket are encoded (with the
    encoder's own pooling).

    Returns:
        A dict with `lower_bound` (M), `bucket`, `count`, `num_buckets`.
    """
    from keras_sentemb.evaluation.sts_spread import pair_cosines
    from keras_sentemb.evaluation.sts_spread import score_buckets

    index = score_buckets([p[2] for p in pairs], num_buckets, score_range)
    lowest = int(index.min())
    chosen = [p for p, i in zip(pairs, index) if i == lowest]
    cosines = pair_cosines(encoder, chosen, batch_size=batch_size, max_length=max_length)
    m, bucket, count = lowest_bucket_mean(
        cosines, [p[2] for p in chosen], num_buckets, score_range
    )
    return {"lower_bound": m, "bucket": bucket, "count": count, "num_buckets": int(num_buckets)}


def cosine_mse_loss(u, v, targets):
    """Mean squared error between cosine(u_i, v_i) and `targets`.

    Args:
        u: float tensor [B, D].
        v: float tensor [B, D].
        targets: float tensor [B].

    Returns:
        float32 scalar: `mean_i (cos(u_i, v_i) - targets_i) ** 2`.
    """
    u = l2_normalize(tf.cast(u, "float32"))
    v = l2_normalize(tf.cast(v, "float32"))
    cos = tf.reduce_sum(u * v, axis=-1)
    return tf.reduce_mean(tf.square(cos - tf.cast(targets, "float32")))


class STSRegression(BaseTrainer):
    """Regresses the cosine similarity of sentence pairs onto target labels.

    The objective of sentence-transformers' `CosineSimilarityLoss`: both
    sentences are encoded by the same encoder (dropout on in training),
    pooled with the encoder's pooling (or `pooling`), and the loss is the
    mean squared error between their cosine similarity and the pair's
    target. Contrastive Tension (section 5.2) uses it with model-specific
    targets: gold scores mapped linearly onto `[M, 1]`, M being the starting
    model's mean cosine on the least similar STS-B training pairs, so the
    model is not pushed to make unrelated sentences orthogonal (see
    `fit_sts_regression`).

    Batches are dicts `{"sentence1": packed, "sentence2": packed, "label":
    float [B]}` (packed = `encoder.preprocess` output).

    Args:
        encoder: `SentenceEncoder`. The encoder to fine-tune.
        pooling: str or None. Pooling in training (and kept on the encoder).
            Defaults to `None` (the encoder's).

    Examples:

    ```python
    trainer = STSRegression(SentenceEncoder.from_preset("default"))
    trainer.compile(optimizer=keras.optimizers.AdamW(2e-5), jit_compile=False)
    trainer.fit(dataset, steps_per_epoch=200)
    ```

    References:
        - [Carlsson et al., 2021. Semantic Re-tuning with Contrastive
          Tension](https://openreview.net/forum?id=Ov_sMNau-PF), section 5.2.
        - [Reimers & Gurevych, 2019](https://arxiv.org/abs/1908.10084)
    """

    def __init__(self, encoder, pooling=None, **kwargs):
        super().__init__(encoder, **kwargs)
        if pooling is not None:
            encoder.pooling = parse_pooling(pooling, encoder.num_layers)
        self.pooling = encoder.pooling

    def get_config(self):
        return {"pooling": self.pooling}

    def embed(self, inputs, training):
        states = self.encoder.hidden_states(inputs, training=training)
        pooled = self.encoder.pool(states, inputs["padding_mask"], self.pooling)
        return self.encoder.head(pooled, normalize=False)

    def compute_contrastive_loss(self, data, training=True):
        u = self.embed(data["sentence1"], training)
        v = self.embed(data["sentence2"], training)
        return cosine_mse_loss(u, v, data["label"])


def fit_sts_regression(
    data="stsb",
    model="default",
    labels="model_specific",
    steps=None,
    epochs=4,
    batch_size=16,
    learning_rate=2e-5,
    max_length=75,
    output=None,
    dev="stsb",
    num_buckets=20,
    pooling=None,
    warmup_ratio=0.1,
    weight_decay=0.01,
    eval_every=100,
    seed=0,
    strategy=None,
    callbacks=None,
    verbose="auto",
):
    """Fine-tunes an encoder on STS-B by cosine regression; returns it.

    Contrastive Tension, section 5.2: split the STS-B training pairs into
    `num_buckets` (20) equal-width buckets by gold score, let M be the
    starting model's mean cosine similarity (with its own pooling) over the
    lowest bucket, map the gold scores linearly from [0, 5] onto [M, 1]
    (`labels="model_specific"`) — or onto [0, 1] (`labels="unit"`, the usual
    sentence-transformers setting) — and regress the cosine similarity of
    each pair on its target with MSE (`STSRegression`). The optimizer is
    AdamW with linear warm-up (`warmup_ratio`) and decay, batch 16, learning
    rate 2e-5, 4 epochs (sentence-transformers' STS-B recipe). With `dev`
    (STS-B dev by default) the best checkpoint by dev Spearman, the starting
    weights included, is kept.

    Args:
        data: `"stsb"` (STS-B train from `../shared/data/STS`), a path to an
            STS-B csv file or folder (its train split), or a list of
            `(s1, s2, score)` with scores in [0, 5]. Defaults to `"stsb"`.
        model: str or `SentenceEncoder`. Defaults to `"default"`.
        labels: str. `"model_specific"` ([M, 1]) or `"unit"` ([0, 1]).
            Defaults to `"model_specific"`.
        steps: int or None. Training steps; `None` = `epochs` epochs.
        epochs: int. Epochs when `steps` is None. Defaults to `4`.
        batch_size: int. Defaults to `16`.
        learning_rate: float. Peak learning rate. Defaults to `2e-5`.
        max_length: int. Tokens per sentence (capped at the backbone's
            maximum). Defaults to `75`.
        output: str or None. Folder to save the kept encoder. Defaults to
            `None`.
        dev: `"stsb"`, None, an STS-B file/folder or a list of
            (s1, s2, score). Defaults to `"stsb"`.
        num_buckets: int. Buckets used to find M. Defaults to `20`.
        pooling: str or None. Pooling to train (and compute M) with.
            Defaults to the encoder's.
        warmup_ratio: float. Fraction of steps of linear warm-up. Defaults to
            `0.1`.
        weight_decay: float. AdamW weight decay. Defaults to `0.01`.
        eval_every: int. Steps between dev evaluations. Defaults to `100`.
        seed: int. Defaults to `0`.
        strategy: `tf.distribute.Strategy` or None. Defaults to `None`.
        callbacks: list of Keras callbacks. Defaults to `None`.
        verbose: Keras `fit` verbosity. Defaults to `"auto"`.

    Returns:
        The trained `SentenceEncoder` (the dev-selected checkpoint).

    Examples:

    ```python
    encoder = fit_sts_regression("data/STS/STSBenchmark", model="my_ct_model")
    encoder = fit_sts_regression(pairs, labels="unit", steps=200)
    ```

    References:
        - [Carlsson et al., 2021. Semantic Re-tuning with Contrastive
          Tension](https://openreview.net/forum?id=Ov_sMNau-PF), section 5.2.
    """
    with _fit.scope(strategy):
        if labels not in LABEL_MODES:
            raise ValueError(f"`labels` must be one of {list(LABEL_MODES)}. Received: {labels!r}.")
        batch_size = _fit.check_positive(batch_size, "batch_size", int)
        learning_rate = _fit.check_positive(learning_rate, "learning_rate", float)
        epochs = _fit.check_positive(epochs, "epochs", int)
        num_buckets = _fit.check_positive(num_buckets, "num_buckets", int)
        if steps is not None:
            steps = _fit.check_positive(steps, "steps", int)
        if not 0.0 <= float(warmup_ratio) < 1.0:
            raise ValueError(f"`warmup_ratio` must be in [0, 1). Received: {warmup_ratio!r}.")
        pairs = resolve_train_pairs(data)
        encoder = _fit.resolve_encoder(model)
        if max_length is not None:
            # The paper's 75 tokens, capped at what the backbone can take.
            max_length = min(int(max_length), int(encoder.backbone.max_sequence_length))
            _fit.resolve_encoder(encoder, max_length)
        max_length = encoder.max_length if max_length is None else int(max_length)
        if pooling is not None:
            encoder.pooling = parse_pooling(pooling, encoder.num_layers)
        dev_pairs = _fit.resolve_dev(dev)
        keras.utils.set_random_seed(seed)
        scores = [p[2] for p in pairs]
        if labels == "model_specific":
            info = model_specific_lower_bound(
                encoder, pairs, num_buckets, STS_SCORE_RANGE, max_length=max_length
            )
            lower = info["lower_bound"]
            logger.info(
                "STS regression: M = %.4f (mean cosine of %d pairs in bucket %d of %d)",
                lower, info["count"], info["bucket"], num_buckets,
            )
        else:
            lower = 0.0
        targets = map_scores(scores, lower, STS_SCORE_RANGE)
        steps = steps or epochs * _fit.epoch_steps(len(pairs), batch_size)
        dataset = _fit.columns_dataset(
            encoder,
            {"sentence1": [p[0] for p in pairs], "sentence2": [p[1] for p in pairs]},
            batch_size, max_length, seed=seed, extra={"label": targets},
        )
        trainer = STSRegression(encoder)
        trainer.label_lower_bound = float(lower)
        logger.info(
            "STS regression (%s labels in [%.4f, 1]): %d pairs, %d steps",
            labels, lower, len(pairs), steps,
        )
        _fit.run_fit(
            trainer, dataset, int(steps), learning_rate, dev_pairs, eval_every,
            weight_decay=float(weight_decay), warmup_ratio=float(warmup_ratio),
            callbacks=callbacks, verbose=verbose,
        )
        encoder = trainer.encoder
        if output is not None:
            encoder.save(output)
        return encoder


def resolve_train_pairs(data):
    """`data` argument -> list of (s1, s2, score) (STS-B train split)."""
    from keras_sentemb.evaluation.sts_spread import load_stsb_pairs

    if data is None:
        raise ValueError("fit_sts_regression needs `data`: 'stsb', an STS-B path or pairs.")
    return load_stsb_pairs(data, "train")


