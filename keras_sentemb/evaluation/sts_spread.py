"""STS spread analysis: cosine similarity per gold-score bucket (CT, Figure 3).

Contrastive Tension's Figure 3 shows, for the STS-B test pairs grouped by
their gold score (0-1, 1-2, ..., 4-5), the mean and standard deviation of
the model's cosine similarity. A model whose cosines are squeezed into a
narrow band (e.g. every pair of plain BERT at 0.8-0.9) separates the
buckets poorly; CT spreads them out. This module computes those statistics
as plain, JSON-serialisable data and plots them.

Functions:

- `score_buckets(scores, num_buckets, score_range)`: equal-width bucket
  index of each gold score (shared with the STS regression of section 5.2).
- `spread_statistics(cosines, scores, ...)`: per-bucket count, mean, std.
- `pair_cosines(encoder, pairs, ...)`: cosine of each pair, every distinct
  sentence encoded once.
- `sts_spread(encoder, data="stsb", split="test", ..., path=None)`: the
  whole analysis, optionally saved as a PNG.
- `plot_sts_spread(results, path)`: one or several models on one plot.
- `load_stsb_pairs(data, split)`: `"stsb"`, a path or a list of pairs.

References:
    - [Carlsson et al., 2021. Semantic Re-tuning with Contrastive
      Tension](https://openreview.net/forum?id=Ov_sMNau-PF), Figure 3.
"""

import math

from scipy.stats import spearmanr
import numpy as np

from keras_sentemb.evaluation import _plotting
from keras_sentemb.evaluation.readers import load_stsb_pairs
from keras_sentemb.evaluation.sts import cosine_scores
from keras_sentemb.kernels.precision import reproducible

def _check_range(num_buckets, score_range):
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, (int, np.integer)) or num_buckets < 1:
        raise ValueError(f"`num_buckets` must be a positive int. Received: {num_buckets!r}.")
    try:
        low, high = (float(v) for v in score_range)
    except (TypeError, ValueError):
        raise ValueError(
            f"`score_range` must be a pair (low, high). Received: {score_range!r}."
        ) from None
    if not high > low:
        raise ValueError(f"`score_range` must have low < high. Received: {score_range!r}.")
    return int(num_buckets), low, high


def bucket_edges(num_buckets=5, score_range=(0.0, 5.0)):
    """The `num_buckets + 1` equal-width bucket edges over `score_range`."""
    n, low, high = _check_range(num_buckets, score_range)
    return [low + (high - low) * i / n for i in range(n + 1)]


CLOSED = ("left", "right")


def score_buckets(scores, num_buckets=5, score_range=(0.0, 5.0), closed="left"):
    """Equal-width bucket index of each gold score.

    With `w = (high - low) / num_buckets` and `closed="left"`, bucket `i`
    holds scores in `[low + i * w, low + (i + 1) * w)` and the top score
    `high` belongs to the last bucket. With `closed="right"` (the CT paper's
    section 5.2: "the lowest bucket contains all training samples with labels
    between [0, 0.25] and the next bucket covers the range (0.25, 0.5]"),
    bucket 0 is `[low, low + w]` and bucket `i > 0` is `(low + i * w,
    low + (i + 1) * w]`. With the defaults the buckets are 0-1, 1-2, 2-3, 3-4
    and 4-5.

    Args:
        scores: array-like of gold scores, within `score_range`.
        num_buckets: int. Number of buckets. Defaults to `5`.
        score_range: pair of floats. The gold-score scale. Defaults to
            `(0.0, 5.0)` (STS).
        closed: str. `"left"` or `"right"`: which edge of a bucket belongs to
            it. Defaults to `"left"`.

    Returns:
        int numpy array of bucket indices, same length as `scores`.
    """
    n, low, high = _check_range(num_buckets, score_range)
    if closed not in CLOSED:
        raise ValueError(f"`closed` must be one of {list(CLOSED)}. Received: {closed!r}.")
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    tol = 1e-9 * (high - low)
    bad = (scores < low - tol) | (scores > high + tol) | ~np.isfinite(scores)
    if bad.any():
        raise ValueError(
            f"Gold scores must lie in score_range={tuple(score_range)}; received "
            f"{scores[bad][:5].tolist()} ({int(bad.sum())} out of range)."
        )
    position = (scores - low) * n / (high - low)  # in bucket widths; exact on the edges
    if closed == "right":
        index = np.ceil(position - 1e-9).astype(np.int64) - 1
    else:
        index = np.floor(position + 1e-9).astype(np.int64)
    return np.clip(index, 0, n - 1)


def spread_statistics(cosines, scores, num_buckets=5, score_range=(0.0, 5.0), closed="left"):
    """Per-bucket count, mean and standard deviation of cosine similarity.

    The standard deviation is the population one (`np.std`, ddof 0). Empty
    buckets report `count=0` and `None` for mean and std.

    Args:
        cosines: array-like [n]. The model's cosine similarity of each pair.
        scores: array-like [n]. The gold scores.
        num_buckets: int. Defaults to `5`.
        score_range: pair of floats. Defaults to `(0.0, 5.0)`.
        closed: str. `"left"` or `"right"` bucket edges (see
            `score_buckets`). Defaults to `"left"`.

    Returns:
        A JSON-serialisable dict: `num_pairs`, `num_buckets`, `score_range`,
        `closed`,
        `buckets` (a list of dicts with `bucket`, `low`, `high`, `label`,
        `count`, `mean`, `std`), and `overall` (`mean`, `std` of all cosines).

    Examples:

    >>> stats = spread_statistics([0.1, 0.3, 0.9], [0.5, 0.7, 4.5])
    >>> [(b["label"], b["count"], round(b["mean"], 2)) for b in stats["buckets"] if b["count"]]
    [('0-1', 2, 0.2), ('4-5', 1, 0.9)]
    """
    cosines = np.asarray(cosines, dtype=np.float64).reshape(-1)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if cosines.shape != scores.shape or cosines.size == 0:
        raise ValueError(
            "`cosines` and `scores` must be non-empty and of the same length. "
            f"Received {cosines.size} cosines and {scores.size} scores."
        )
    index = score_buckets(scores, num_buckets, score_range, closed)
    edges = bucket_edges(num_buckets, score_range)
    buckets = []
    for i in range(len(edges) - 1):
        values = cosines[index == i]
        buckets.append(
            {
                "bucket": i,
                "low": edges[i],
                "high": edges[i + 1],
                "label": f"{edges[i]:g}-{edges[i + 1]:g}",
                "count": int(values.size),
                "mean": float(values.mean()) if values.size else None,
                "std": float(values.std()) if values.size else None,
            }
        )
    return {
        "num_pairs": int(cosines.size),
        "num_buckets": len(buckets),
        "score_range": [float(edges[0]), float(edges[-1])],
        "closed": closed,
        "buckets": buckets,
        "overall": {"mean": float(cosines.mean()), "std": float(cosines.std())},
    }


def pair_cosines(encoder, pairs, batch_size=128, max_length=None, pooling=None):
    """Cosine similarity of each `(s1, s2, ...)` pair under `encoder`.

    Every distinct sentence is encoded once (`encoder.encode`, with its own
    pooling unless `pooling` says otherwise).

    Args:
        encoder: `SentenceEncoder` (or any object with a compatible `encode`).
        pairs: list of `(s1, s2, score)` (only the sentences are used).
        batch_size: int. Defaults to `128`.
        max_length: int or None. Defaults to the encoder's.
        pooling: str or None. Defaults to the encoder's.

    Returns:
        float64 numpy array [len(pairs)].
    """
    vectors, first, second = encode_pairs(encoder, pairs, batch_size, max_length, pooling)
    return cosine_scores(vectors[first], vectors[second])


def encode_pairs(encoder, pairs, batch_size=128, max_length=None, pooling=None):
    """Vectors of the distinct sentences of `pairs` (sorted), each encoded once.

    Returns:
        `(vectors [m, dim], first [n], second [n])`: rows of `vectors` holding
        each pair's first and second sentence.
    """
    sentences = sorted({s for p in pairs for s in (p[0], p[1])})
    index = {s: i for i, s in enumerate(sentences)}
    kwargs = {"batch_size": batch_size, "show_progress": False}
    if max_length is not None:
        kwargs["max_length"] = max_length
    if pooling is not None:
        kwargs["pooling"] = pooling
    vectors = np.asarray(encoder.encode(sentences, **reproducible(encoder.encode, kwargs)))
    return vectors, [index[p[0]] for p in pairs], [index[p[1]] for p in pairs]


def sts_spread(
    encoder,
    data="stsb",
    split="test",
    num_buckets=5,
    score_range=(0.0, 5.0),
    path=None,
    pooling=None,
    batch_size=128,
    max_length=None,
    title=None,
    closed="left",
):
    """STS spread analysis of one encoder (CT paper, Figure 3).

    Encodes the STS pairs, buckets them by gold score and returns the mean
    and standard deviation of the cosine similarity in each bucket, with the
    Spearman correlation (x100) over all pairs for reference.

    Args:
        encoder: `SentenceEncoder`.
        data: `"stsb"`, a path to an STS-B csv/folder, or a list of
            `(s1, s2, score)`. Defaults to `"stsb"`.
        split: str. Defaults to `"test"`.
        num_buckets: int. Defaults to `5` (0-1, ..., 4-5).
        score_range: pair of floats. Defaults to `(0.0, 5.0)`.
        path: str or None. Write the plot to this PNG file. Defaults to
            `None`.
        pooling: str or None. Overrides the encoder's pooling.
        batch_size: int. Defaults to `128`.
        max_length: int or None. Defaults to the encoder's.
        title: str or None. Plot title.
        closed: str. `"left"` or `"right"` bucket edges (see
            `score_buckets`; the paper's Figure 3 uses 20 right-closed
            buckets of STS-B train). Defaults to `"left"`.

    Returns:
        The `spread_statistics` dict plus `split`, `pooling`, `spearman`
        (x100) and `plot` (the PNG path or None).

    Examples:

    ```python
    before = sts_spread(SentenceEncoder.from_preset("default"))
    after = sts_spread(trained, path="spread_after.png")
    plot_sts_spread({"before": before, "after": after}, "spread.png")
    ```

    References:
        - [Carlsson et al., 2021](https://openreview.net/forum?id=Ov_sMNau-PF)
    """
    pairs = load_stsb_pairs(data, split)
    cosines = pair_cosines(encoder, pairs, batch_size, max_length, pooling)
    scores = np.array([p[2] for p in pairs], dtype=np.float64)
    result = spread_statistics(cosines, scores, num_buckets, score_range, closed)
    rho = spearmanr(cosines, scores).correlation
    result.update(
        {
            "split": split if not isinstance(data, (list, tuple)) else "custom",
            "pooling": pooling or getattr(encoder, "pooling", None),
            "spearman": None if rho is None or math.isnan(rho) else float(rho * 100),
            "plot": None,
        }
    )
    if path is not None:
        result["plot"] = str(plot_sts_spread(result, path, title=title))
    return result


def plot_sts_spread(results, path, title=None):
    """Plot per-bucket mean +- std of cosine similarity to a PNG (Agg).

    Args:
        results: one `spread_statistics` / `sts_spread` dict, or a dict
            `{name: result}` to compare models (e.g. before / after
            training); all must share the same buckets.
        path: str or path. The PNG file.
        title: str or None. Defaults to "STS spread".

    Returns:
        `path`.
    """
    results = _plotting.named_results(results, "buckets", "spread")
    labels = [b["label"] for b in next(iter(results.values()))["buckets"]]
    fig, ax = _plotting.axes()
    n = len(results)
    width = 0.8 / n
    x = np.arange(len(labels))
    for j, (name, res) in enumerate(results.items()):
        if [b["label"] for b in res["buckets"]] != labels:
            raise ValueError("All results must use the same buckets to share a plot.")
        mean = np.array([np.nan if b["mean"] is None else b["mean"] for b in res["buckets"]])
        std = np.array([np.nan if b["std"] is None else b["std"] for b in res["buckets"]])
        pos = x + (j - (n - 1) / 2) * width
        ax.errorbar(pos, mean, yerr=std, fmt="o-", capsize=4, label=name or None)
    ax.set_xticks(x)
    ax.set_xticklabels(labels)
    ax.set_xlabel("gold score bucket")
    ax.set_ylabel("cosine similarity (mean ± std)")
    ax.set_title(title or "STS spread")
    ax.grid(alpha=0.3)
    return _plotting.save(fig, path, legend=any(results))
