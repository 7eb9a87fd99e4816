"""Hard-negative mining: for each (anchor, positive) pair, similar texts that are not positives.

`mine_hard_negatives` encodes the anchors and a candidate corpus (the
positives, plus any extra texts), ranks the candidates of each anchor by
similarity (exact search in bounded memory,
`keras_sentemb.evaluation.search.exact_search`), drops the anchor itself and
every positive of that anchor, keeps the ranks in `[range_min, range_max)`,
filters out candidates that are too close to be true negatives (`margin`
below the positive's score, `max_score`), and takes `num_negatives` of
what is left. The rows are `(anchor, positive, negative)` triplets, the
format of supervised SimCSE (`fit_simcse(mode="sup")`; see
`keras_sentemb.data.nli.read_nli_triplets`), or `(anchor, positive,
negative_1, ..., negative_n)` tuples. `write_triplets_csv` writes triplets
as a `sent0,sent1,hard_neg` CSV.
"""

import csv
import logging
import os
import random

import numpy as np

from keras_sentemb.evaluation.beir import _encode
from keras_sentemb.evaluation.search import check_similarity
from keras_sentemb.evaluation.search import exact_search

logger = logging.getLogger(__name__)

OUTPUT_FORMATS = ("triplet", "n-tuple")
SAMPLING = ("top", "random")


def _check_pairs(pairs):
    rows = [tuple(p) for p in pairs] if isinstance(pairs, (list, tuple)) else None
    if not rows:
        raise ValueError(
            "`pairs` must be a non-empty list of (anchor, positive) pairs of str; "
            f"received {type(pairs).__name__}{'' if rows is None else ' (empty)'}."
        )
    for i, row in enumerate(rows):
        if len(row) != 2 or not all(isinstance(x, str) and x.strip() for x in row):
            raise ValueError(f"`pairs` row {i} must be two non-empty str; received {row!r:.100}.")
    return rows


def _check_int(value, name, minimum):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}; received {value!r}.")
    return int(value)


def _check_options(sampling, output_format, similarity, margin, max_score, corpus):
    """Validates `mine_hard_negatives`' choices; returns the extra corpus as a list of str."""
    if sampling not in SAMPLING:
        raise ValueError(f"`sampling` must be one of {SAMPLING}; received {sampling!r}.")
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"`output_format` must be one of {OUTPUT_FORMATS}; received {output_format!r}.")
    check_similarity(similarity)
    for name, value in (("margin", margin), ("max_score", max_score)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"`{name}` must be a number or None; received {value!r}.")
    extra = list(corpus or [])
    if any(not isinstance(t, str) for t in extra):
        raise ValueError("`corpus` must be a list of str.")
    return extra


def mine_hard_negatives(
    encoder,
    pairs,
    num_negatives=1,
    range_min=0,
    range_max=None,
    margin=None,
    max_score=None,
    corpus=None,
    sampling="top",
    output_format="triplet",
    similarity="cosine",
    batch_size=128,
    seed=0,
    show_progress=None,
    return_stats=False,
):
    """Mine hard negatives for (anchor, positive) pairs with an encoder.

    Candidates are the distinct positives and the texts of `corpus`,
    ranked for each anchor by `similarity` of their embeddings. For an
    anchor, the anchor text and all of its positives (an anchor may appear
    in several pairs) are never negatives. Of the remaining candidates, in
    rank order (0 = the most similar), those of rank `range_min` up to (not
    including) `range_max` are considered; one is dropped when its score is
    above `max_score`, or above the positive's score minus `margin`
    (likely a missed positive: Quora, MS MARCO and NLI judgements are
    incomplete). Then `num_negatives` are taken: the most similar
    (`sampling="top"`) or a seeded random choice (`"random"`).

    Args:
        encoder: a `SentenceEncoder` (anything with `encode`) or a callable
            `f(list[str]) -> array [n, dim]`.
        pairs: list of `(anchor, positive)` str pairs.
        num_negatives: int. Negatives per pair. Defaults to `1`.
        range_min: int. First rank considered (skip the `range_min` most
            similar candidates). Defaults to `0`.
        range_max: int or None. Ranks considered stop before this one.
            Defaults to `range_min + max(num_negatives, 10)`.
        margin: float or None. Keep a negative only when its score is below
            the positive's score minus `margin` (e.g. `0.0`: never more
            similar than the positive). Defaults to `None` (no such filter).
        max_score: float or None. Keep a negative only when its score is at
            most this. Defaults to `None`.
        corpus: list of str or None. Extra candidate texts. Defaults to
            `None` (the positives only).
        sampling: str. `"top"` or `"random"`. Defaults to `"top"`.
        output_format: str. `"triplet"`: one `(anchor, positive, negative)`
            row per negative (supervised SimCSE's input); `"n-tuple"`: one
            `(anchor, positive, negative_1, ..., negative_n)` row per pair,
            pairs with fewer than `num_negatives` negatives left out.
            Defaults to `"triplet"`.
        similarity: str. `"cosine"` or `"dot"`. Defaults to `"cosine"`.
        batch_size: int. Encoding batch size. Defaults to `128`.
        seed: int. Seed of `sampling="random"`. Defaults to `0`.
        show_progress: bool or None. Progress bars; `None` shows them for
            5,000 texts or more.
        return_stats: bool. Also return a dict of counts and mean scores.
            Defaults to `False`.

    Returns:
        list of str tuples (and the stats dict with `return_stats`).

    Examples:

    ```python
    import keras_sentemb

    encoder = keras_sentemb.SentenceEncoder.from_preset("default")
    triplets = keras_sentemb.mine_hard_negatives(
        encoder, pairs, num_negatives=1, range_min=10, range_max=50, margin=0.05)
    model = keras_sentemb.fit_simcse(triplets, mode="sup")
    ```

    References:
        - [Karpukhin et al., 2020](https://arxiv.org/abs/2004.04906) (DPR: mined hard negatives)
        - [Gao et al., 2021](https://arxiv.org/abs/2104.08821) (SimCSE with hard negatives)
    """
    rows = _check_pairs(pairs)
    num_negatives, range_min, range_max = _check_ranks(num_negatives, range_min, range_max)
    extra = _check_options(sampling, output_format, similarity, margin, max_score, corpus)

    candidates = list(dict.fromkeys([p for _, p in rows] + [t for t in extra if t.strip()]))
    position = {text: i for i, text in enumerate(candidates)}
    anchors = list(dict.fromkeys(a for a, _ in rows))
    excluded = {a: {position[a]} if a in position else set() for a in anchors}
    for a, p in rows:
        excluded[a].add(position[p])
    if show_progress is None:
        show_progress = len(candidates) >= 5000
    anchor_vectors = _encode(encoder, anchors, batch_size, None, show_progress)
    candidate_vectors = _encode(encoder, candidates, batch_size, None, show_progress)
    ranked = _ranked_candidates(anchor_vectors, candidate_vectors, anchors, excluded,
                                range_min, range_max, similarity, show_progress)
    # The positive's score, as the search computes it.
    anchor_index = {a: i for i, a in enumerate(anchors)}
    positive_scores = _row_scores(anchor_vectors[[anchor_index[a] for a, _ in rows]],
                                  candidate_vectors[[position[p] for _, p in rows]], similarity)

    rng = random.Random(seed)
    out = []
    stats = {"pairs": len(rows), "candidates": len(candidates), "negatives": 0,
             "pairs_without_enough": 0, "filtered_by_margin": 0, "filtered_by_max_score": 0}
    negative_scores = []
    for (anchor, positive), positive_score in zip(rows, positive_scores):
        pool = _negative_pool(ranked[anchor], positive_score, margin, max_score, stats)
        chosen = pool[:num_negatives] if sampling == "top" else rng.sample(
            pool, min(num_negatives, len(pool)))
        if len(chosen) < num_negatives:
            stats["pairs_without_enough"] += 1
            if output_format == "n-tuple" or not chosen:
                continue
        negative_scores += [s for _, s in chosen]
        stats["negatives"] += len(chosen)
        if output_format == "triplet":
            out += [(anchor, positive, candidates[i]) for i, _ in chosen]
        else:
            out.append((anchor, positive, *[candidates[i] for i, _ in chosen]))
    stats["mean_positive_score"] = float(np.mean(positive_scores))
    stats["mean_negative_score"] = float(np.mean(negative_scores)) if negative_scores else None
    stats["rows"] = len(out)
    logger.info("mine_hard_negatives: %s", stats)
    return (out, stats) if return_stats else out


def _check_ranks(num_negatives, range_min, range_max):
    """`mine_hard_negatives`' checked `(num_negatives, range_min, range_max)`.

    `range_max=None` becomes `range_min + max(num_negatives, 10)`; a range
    with fewer ranks than `num_negatives` is a ValueError.
    """
    num_negatives = _check_int(num_negatives, "num_negatives", 1)
    range_min = _check_int(range_min, "range_min", 0)
    if range_max is None:
        range_max = range_min + max(num_negatives, 10)
    range_max = _check_int(range_max, "range_max", range_min + 1)
    if range_max - range_min < num_negatives:
        raise ValueError(
            f"`range_max - range_min` ({range_max - range_min}) is smaller than "
            f"`num_negatives` ({num_negatives})."
        )
    return num_negatives, range_min, range_max


def _ranked_candidates(anchor_vectors, candidate_vectors, anchors, excluded, range_min,
                       range_max, similarity, show_progress):
    """Each anchor's candidates of rank `range_min` to `range_max`, best first.

    Returns a dict anchor -> list of `(candidate index, score)`; the
    candidates in `excluded[anchor]` (the anchor's own texts) take no rank.
    """
    # Enough ranks that dropping each anchor's own texts still leaves range_max.
    depth = range_max + max(len(x) for x in excluded.values())
    scores, indices = exact_search(anchor_vectors, candidate_vectors, top_k=depth,
                                   similarity=similarity, show_progress=show_progress)
    ranked = {}
    for row, anchor in enumerate(anchors):
        keep = [(int(i), float(s)) for i, s in zip(indices[row], scores[row])
                if int(i) not in excluded[anchor]]
        ranked[anchor] = keep[range_min:range_max]
    return ranked


def _row_scores(a_vec, p_vec, similarity):
    """`similarity` of each row of `a_vec` with the same row of `p_vec`."""

    def unit(x):
        return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)

    if similarity == "cosine":
        a_vec, p_vec = unit(a_vec), unit(p_vec)
    return np.sum(a_vec * p_vec, axis=1)


def _negative_pool(ranked, positive_score, margin, max_score, stats):
    """The `(index, score)` candidates of `ranked` that pass `max_score` and `margin`.

    Counts the ones dropped in `stats["filtered_by_max_score"]` and
    `stats["filtered_by_margin"]`.
    """
    pool = []
    for i, s in ranked:
        if max_score is not None and s > max_score:
            stats["filtered_by_max_score"] += 1
            continue
        if margin is not None and s > positive_score - margin:
            stats["filtered_by_margin"] += 1
            continue
        pool.append((i, s))
    return pool


def write_triplets_csv(triplets, path):
    """Write `(anchor, positive, negative)` rows as a `sent0,sent1,hard_neg` CSV.

    The file is what `fit_simcse(mode="sup")` and `keras-sentemb train
    simcse --mode sup` read (`keras_sentemb.data.nli.read_nli_triplets`).

    Args:
        triplets: list of 3-tuples of str.
        path: str or path. The CSV file (written whole, then renamed).

    Returns:
        str. The path.
    """
    rows = [tuple(r) for r in triplets]
    if any(len(r) != 3 for r in rows):
        raise ValueError("`write_triplets_csv` takes 3-tuples; use output_format='triplet'.")
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["sent0", "sent1", "hard_neg"])
        writer.writerows(rows)
    os.replace(tmp, path)
    return path
