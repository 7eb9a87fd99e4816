"""STS-B cosine regression with model-specific labels (CT, section 5.2): `fit_sts_regression`."""

import logging

import numpy as np
import tensorflow as tf

from keras_sentemb.data.labeled_streams import check_rows
from keras_sentemb.data.labeled_streams import ordered_rows
from keras_sentemb.data.labeled_streams import score_labels
from keras_sentemb.data.stream_batches import as_stream
from keras_sentemb.evaluation.readers import load_stsb_pairs
from keras_sentemb.evaluation.sts_spread import pair_cosines
from keras_sentemb.evaluation.sts_spread import score_buckets
from keras_sentemb.methods.method import DEV_RETRIEVAL
from keras_sentemb.methods.method import STREAMED
from keras_sentemb.methods.method import Method
from keras_sentemb.methods.registry import register_method
from keras_sentemb.methods.runner import fit_function
from keras_sentemb.pipelines.schedules import adamw_linear_decay
from keras_sentemb.methods.sts_regression.config import PRESETS
from keras_sentemb.methods.sts_regression.config import STREAM_COLUMNS
from keras_sentemb.methods.sts_regression.config import STS_SCORE_RANGE
from keras_sentemb.methods.sts_regression.config import STSRegressionConfig
from keras_sentemb.methods.sts_regression.trainer import STSRegression as STSRegressionTrainer

logger = logging.getLogger(__name__)


def lowest_bucket_mean(cosines, scores, num_buckets=20, score_range=STS_SCORE_RANGE,
                       closed="right"):
    """M: mean cosine similarity of the lowest non-empty gold-score bucket.

    The gold scores are split into `num_buckets` equal-width buckets over
    `score_range`, right-closed as the CT paper's section 5.2 counts them
    (for STS-B and 20 buckets: [0, 0.25], (0.25, 0.5], ..., (4.75, 5]); M is
    the mean of `cosines` over the pairs of the lowest bucket that holds any
    pair.

    Args:
        cosines: array-like [n]. The starting model's cosine of each pair.
        scores: array-like [n]. Gold scores.
        num_buckets: int. Defaults to `20`.
        score_range: pair of floats. Defaults to `(0.0, 5.0)`.
        closed: str. `"right"` (the paper's) or `"left"` bucket edges (see
            `score_buckets`). Defaults to `"right"`.

    Returns:
        A tuple `(M, bucket, count)`: the mean, the bucket's index and its
        number of pairs.
    """
    cosines = np.asarray(cosines, dtype=np.float64).reshape(-1)
    index = score_buckets(scores, num_buckets, score_range, closed)
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
    pooling=None,
    closed="right",
):
    """M of `encoder` on `pairs`: its mean cosine on the lowest score bucket.

    Only the pairs of the lowest non-empty bucket (right-closed edges by
    default, as the paper's section 5.2) are encoded (with `pooling`, by
    default the encoder's own).

    Returns:
        A dict with `lower_bound` (M), `bucket`, `count`, `num_buckets`.
    """
    index = score_buckets([p[2] for p in pairs], num_buckets, score_range, closed)
    lowest = int(index.min())
    chosen = [p for p, i in zip(pairs, index) if i == lowest]
    cosines = pair_cosines(
        encoder, chosen, batch_size=batch_size, max_length=max_length, pooling=pooling
    )
    m, bucket, count = lowest_bucket_mean(
        cosines, [p[2] for p in chosen], num_buckets, score_range, closed
    )
    return {"lower_bound": m, "bucket": bucket, "count": count, "num_buckets": int(num_buckets)}


def resolve_train_pairs(data):
    """`data` argument -> list of (s1, s2, score) (STS-B train split)."""

    if data is None:
        raise ValueError("fit_sts_regression needs `data`: 'stsb', an STS-B path or pairs.")
    return load_stsb_pairs(data, "train")


@register_method("sts")
class STSRegressionMethod(Method):
    """Fine-tunes an encoder on STS-B by cosine regression; returns it.

    Contrastive Tension, section 5.2: split the STS-B training pairs into
    `num_buckets` (20) equal-width buckets by gold score, let M be the
    starting model's mean cosine similarity (with its own pooling) over the
    lowest bucket, map the gold scores linearly from [0, 5] onto [M, 1]
    (`labels="model_specific"`) — or onto [0, 1] (`labels="unit"`, the usual
    sentence-transformers setting) — and regress the cosine similarity of
    each pair on its target with MSE (the `STSRegression` trainer). The optimizer is
    AdamW with linear warm-up (`warmup_ratio`) and decay, batch 16, learning
    rate 2e-5, 4 epochs (sentence-transformers' STS-B recipe). With `dev`
    (STS-B dev by default) the best checkpoint by dev Spearman, the starting
    weights included, is kept.

    Examples:

    ```python
    encoder = fit_sts_regression("data/STS/STSBenchmark", model="my_ct_model")
    encoder = fit_sts_regression(pairs, labels="unit", steps=200)
    ```

    References:
        - [Carlsson et al., 2021. Semantic Re-tuning with Contrastive
          Tension](https://openreview.net/forum?id=Ov_sMNau-PF), section 5.2.
    """

    config_class = STSRegressionConfig
    paper_pooling = "mean"
    optional = ("precision", "max_grad_norm") + DEV_RETRIEVAL + STREAMED
    run_defaults = {"batch_size": 16, "learning_rate": 2e-5, "max_length": 75}
    run_docs = {
        "pooling": "`\"auto\"` (the model's own, else mean) or a pooling name; M is "
                   "computed with it too.",
    }
    data_doc = ("`\"stsb\"` (STS-B train, which the package does not ship: pass its path, e.g. "
                "SentEval's `data/downstream/STS/STSBenchmark`), a path to an STS-B csv file or "
                "folder (its train split), or a list of `(s1, s2, score)` with scores in [0, 5]; "
                "or streamed `sentence1`, `sentence2`, `score` rows (a glob of files, "
                "`keras_sentemb.streamed(...)`, a `tf.data.Dataset`; rows whose score is not "
                "in [0, 5] are skipped): M is then computed on the first `steps * batch_size` "
                "rows, read twice in constant memory.")

    presets = PRESETS

    def train(self, run, data, config):
        stream = as_stream(data)
        if stream is not None:
            return _train_streamed(run, stream, config)
        pairs = resolve_train_pairs(data)
        run.record_data(pairs=len(pairs))
        with run.scope():
            encoder, plan = run.start(examples=len(pairs), epochs=config.epochs)
            pooling = plan.pooling
            lower = 0.0
            if config.labels == "model_specific":
                info = model_specific_lower_bound(
                    encoder, pairs, config.num_buckets, STS_SCORE_RANGE,
                    max_length=plan.max_length, pooling=pooling,
                )
                lower = info["lower_bound"]
                logger.info(
                    "STS regression: M = %.4f (mean cosine of %d pairs in bucket %d of %d)",
                    lower, info["count"], info["bucket"], config.num_buckets,
                )
            targets = map_scores([p[2] for p in pairs], lower, STS_SCORE_RANGE)
            trainer = STSRegressionTrainer(encoder, pooling=pooling)
        optimizer = adamw_linear_decay(plan.learning_rate, plan.steps, config.warmup_ratio,
                                       config.weight_decay)
        logger.info(
            "STS regression (%s labels in [%.4f, 1]): %d pairs, %d steps",
            config.labels, lower, len(pairs), plan.steps,
        )
        columns = {"sentence1": [p[0] for p in pairs], "sentence2": [p[1] for p in pairs]}
        make_dataset = run.batches(encoder, columns, plan, extra={"label": targets})
        return run.train(trainer, optimizer, make_dataset, plan,
                         extras={"label_lower_bound": float(lower)})


def streamed_lower_bound(encoder, stream, limit, num_buckets=20, score_range=STS_SCORE_RANGE,
                         batch_size=128, max_length=None, pooling=None, closed="right"):
    """M of `encoder` on a stream of scored pairs, in constant memory.

    The pairs are the stream's first `limit` rows in file order (one pass;
    all of them when it holds fewer): those a run of `limit / batch` steps
    reads. Two passes over them: the scores alone find the lowest
    non-empty bucket, then only that bucket's pairs are encoded, a batch
    at a time, summing their cosines. On the same pairs it is
    `model_specific_lower_bound`.

    Args:
        encoder: `SentenceEncoder`.
        stream: a stream source or `Mixture` of `(sentence1, sentence2,
            score)` rows.
        limit: int or None. Rows read (None: the whole stream).
        batch_size: int. Pairs per encoding batch. Defaults to `128`.
        See `model_specific_lower_bound` for the others.

    Returns:
        A dict with `lower_bound` (M), `bucket`, `count`, `num_buckets`,
        `pairs_read`.
    """
    def batches():
        rows = ordered_rows(stream, STREAM_COLUMNS[:2],
                            {STREAM_COLUMNS[2]: score_labels(*score_range)})
        if limit is not None:
            rows = rows.take(limit)
        return rows.batch(batch_size).as_numpy_iterator()

    lowest, read = None, 0
    for batch in batches():
        index = score_buckets(batch["score"], num_buckets, score_range, closed)
        lowest = int(index.min()) if lowest is None else min(lowest, int(index.min()))
        read += len(index)
    if lowest is None:
        raise ValueError(f"{stream!r} holds no (sentence1, sentence2, score) row with a score "
                         f"in {list(score_range)}.")
    total, count = 0.0, 0
    for batch in batches():
        chosen = score_buckets(batch["score"], num_buckets, score_range, closed) == lowest
        if not chosen.any():
            continue
        pairs = [(a.decode("utf-8"), b.decode("utf-8"), 0.0) for a, b in
                 zip(batch["sentence1"][chosen], batch["sentence2"][chosen])]
        cosines = pair_cosines(encoder, pairs, batch_size=batch_size, max_length=max_length,
                               pooling=pooling)
        total += float(np.sum(cosines))
        count += len(pairs)
    return {"lower_bound": total / count, "bucket": lowest, "count": count,
            "num_buckets": int(num_buckets), "pairs_read": read}


def _train_streamed(run, stream, config):
    """`fit_sts_regression` on streamed `(sentence1, sentence2, score)` rows."""
    names, scores = STREAM_COLUMNS[:2], {STREAM_COLUMNS[2]: score_labels(*STS_SCORE_RANGE)}
    check_rows(stream, names, scores)
    run.record_data(pairs=stream.size, streamed=repr(stream))
    with run.scope():
        encoder = run.load_encoder()
        plan = run.plan(encoder, examples=stream.size, epochs=config.epochs)
        lower, extras = 0.0, {}
        if config.labels == "model_specific":
            info = streamed_lower_bound(
                encoder, stream, plan.steps * run.batch_size, config.num_buckets,
                max_length=plan.max_length, pooling=plan.pooling)
            lower = info["lower_bound"]
            extras["label_lower_bound_pairs_read"] = info["pairs_read"]
            logger.info("STS regression: M = %.4f (mean cosine of %d pairs in bucket %d of %d; "
                        "%d streamed pairs read)", lower, info["count"], info["bucket"],
                        config.num_buckets, info["pairs_read"])
        trainer = STSRegressionTrainer(encoder, pooling=plan.pooling)
    run.compile(trainer, adamw_linear_decay(plan.learning_rate, plan.steps,
                                            config.warmup_ratio, config.weight_decay))
    make_batches = run.stream_batches(encoder, stream, names, plan, labels=scores)
    low, high = STS_SCORE_RANGE

    @tf.autograph.experimental.do_not_convert
    def targets(batch):  # map_scores, in the pipeline
        batch = dict(batch)
        score = batch.pop(STREAM_COLUMNS[2])
        batch["label"] = lower + (1.0 - lower) * (score - low) / (high - low)
        return batch

    run.fit(trainer, lambda start_step: make_batches(start_step).map(targets), plan)
    return run.finish(trainer.encoder, plan,
                      extras={"label_lower_bound": float(lower), **extras})


# The `fit_*` function: its signature and docstring are the method's.
fit_sts_regression = fit_function("sts", "fit_sts_regression")
