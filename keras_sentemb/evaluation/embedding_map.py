"""2-D maps of sentence vectors (t-SNE or PCA), coloured by STS score bucket or by class.

- `pca(x, dims)`: principal components (numpy SVD).
- `tsne(x, ...)`: exact t-SNE in numpy (van der Maaten & Hinton, 2008):
  Gaussian affinities calibrated to a perplexity by binary search, PCA to 50
  dimensions first, PCA initialisation, early exaggeration 12 for the first
  250 iterations, momentum 0.5 then 0.8, adaptive gains. O(n^2) memory and
  time: meant for up to a few thousand points (PCA for more).
- `embedding_map(encoder, ...)`: the sentences of STS-B pairs (each pair's
  two sentences joined by a line, coloured by the pair's gold-score bucket)
  or of a SentEval classification task (coloured by class), mapped to 2-D.

References:
    - [van der Maaten & Hinton, 2008. Visualizing Data using
      t-SNE](https://www.jmlr.org/papers/v9/vandermaaten08a.html)
"""

import numpy as np

from keras_sentemb import validation
from keras_sentemb.evaluation import _plotting
from keras_sentemb.evaluation import transfer_readers as readers
from keras_sentemb.evaluation.readers import load_stsb_pairs
from keras_sentemb.evaluation.sts_spread import bucket_edges
from keras_sentemb.evaluation.sts_spread import score_buckets
from keras_sentemb.kernels.precision import reproducible

METHODS = ("tsne", "pca")


def pca(x, dims=2):
    """The first `dims` principal-component coordinates of the rows of `x` (float64).

    Examples:

    >>> x = np.array([[0.0, 0.0], [2.0, 0.0], [4.0, 0.1]])
    >>> np.round(np.abs(pca(x, 1)[:, 0]), 2).tolist()
    [2.0, 0.0, 2.0]
    """
    x = np.asarray(x, np.float64)
    x = x - x.mean(axis=0)
    u, s, _ = np.linalg.svd(x, full_matrices=False)
    return u[:, :dims] * s[:dims]


def _affinities(d2, perplexity, tol=1e-5, steps=60):
    """Row-conditional Gaussian affinities P(j|i) whose entropy is log(perplexity)."""
    n = len(d2)
    target = np.log(perplexity)
    p = np.zeros((n, n))
    for i in range(n):
        row = np.delete(d2[i], i)
        beta, lo, hi = 1.0, -np.inf, np.inf
        for _ in range(steps):
            w = np.exp(-(row - row.min()) * beta)
            total = w.sum()
            entropy = np.log(total) + beta * np.sum((row - row.min()) * w) / total
            if abs(entropy - target) < tol:
                break
            if entropy > target:
                lo, beta = beta, beta * 2 if hi == np.inf else (beta + hi) / 2
            else:
                hi, beta = beta, beta / 2 if lo == -np.inf else (beta + lo) / 2
        p[i, np.arange(n) != i] = w / total
    return p


def tsne(x, dims=2, perplexity=30.0, iterations=750, seed=0):
    """Exact t-SNE embedding of the rows of `x` (see the module docstring).

    Args:
        x: array `[n, d]`, n >= 4.
        dims: int. Output dimensions. Defaults to `2`.
        perplexity: float. Effective neighbours; capped at `(n - 1) / 3`.
            Defaults to `30`.
        iterations: int. Gradient steps. Defaults to `750`.
        seed: int. Seeds the jitter added to the PCA start. Defaults to `0`.

    Returns:
        float64 array `[n, dims]`.
    """
    x = np.asarray(x, np.float64)
    n = len(x)
    if n < 4:
        raise ValueError(f"t-SNE needs at least 4 points, received {n}.")
    perplexity = min(float(perplexity), (n - 1) / 3.0)
    if x.shape[1] > 50:
        x = pca(x, 50)
    sq = np.sum(x * x, axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2 * x @ x.T, 0.0)
    p = _affinities(d2, perplexity)
    p = (p + p.T) / (2 * n)
    p = np.maximum(p, 1e-12)
    rng = np.random.default_rng(seed)
    y = pca(x, dims)
    y = y / (y[:, 0].std() + 1e-12) * 1e-4 + rng.normal(0, 1e-6, y.shape)
    velocity = np.zeros_like(y)
    gains = np.ones_like(y)
    learning_rate = max(n / 12.0 / 4.0, 50.0)
    for it in range(iterations):
        exaggeration = 12.0 if it < 250 else 1.0
        momentum = 0.5 if it < 250 else 0.8
        sq = np.sum(y * y, axis=1)
        num = 1.0 / (1.0 + np.maximum(sq[:, None] + sq[None, :] - 2 * y @ y.T, 0.0))
        np.fill_diagonal(num, 0.0)
        q = np.maximum(num / num.sum(), 1e-12)
        pq = (exaggeration * p - q) * num
        grad = 4.0 * (np.diag(pq.sum(axis=1)) - pq) @ y
        same = np.sign(grad) == np.sign(velocity)
        gains = np.maximum(np.where(same, gains * 0.8, gains + 0.2), 0.01)
        velocity = momentum * velocity - learning_rate * gains * grad
        y = y + velocity
        y -= y.mean(axis=0)
    return y


def plot_embedding_map(coords, labels, path, label_names=None, pairs=None, title=None):
    """Scatter of 2-D points coloured by integer label (PNG, Agg).

    Args:
        coords: array `[n, 2]`.
        labels: int array `[n]`.
        path: str. The PNG file.
        label_names: list of str or None. Legend names of the labels.
        pairs: int array `[m, 2]` or None. Rows of `coords` to join by a line.
        title: str or None.
    """
    coords, labels = np.asarray(coords), np.asarray(labels)
    fig, ax = _plotting.axes(figsize=(6, 5))
    if pairs is not None:
        for i, j in pairs:
            ax.plot(coords[[i, j], 0], coords[[i, j], 1], color="gray", alpha=0.15, lw=0.6, zorder=1)
    import matplotlib  # loaded only when a plot is drawn (a slow import)

    cmap = matplotlib.colormaps["viridis" if label_names and len(label_names) > 6 else "tab10"]
    classes = sorted(set(labels.tolist()))
    for c_i, c in enumerate(classes):
        chosen = labels == c
        name = label_names[c] if label_names else str(c)
        color = cmap(c_i / max(len(classes) - 1, 1)) if len(classes) > 6 else cmap(c_i)
        ax.scatter(coords[chosen, 0], coords[chosen, 1], s=8, color=color, label=name, zorder=2)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title or "Sentence vectors")
    return _plotting.save(fig, path, legend=True)


def embedding_map(
    encoder,
    data="stsb",
    split="dev",
    task=None,
    method="tsne",
    max_points=600,
    num_buckets=5,
    pooling=None,
    seed=0,
    path=None,
    title=None,
):
    """2-D map of sentence vectors coloured by STS score bucket or by class.

    Args:
        encoder: `SentenceEncoder` (or an object with a compatible `encode`).
        data: for STS, `"stsb"`, a path to an STS-B csv/folder or a list of
            `(s1, s2, score)`; with `task`, SentEval's `data/downstream`
            folder. Defaults to `"stsb"`.
        split: str. The split drawn (`"dev"`; for TREC/MRPC `"test"`,
            for MR-like tasks `"all"`). Defaults to `"dev"`.
        task: str or None. A SentEval classification task (`"SST2"`,
            `"TREC"`, `"MR"`, ...): colour by class. None: STS pairs coloured by
            gold-score bucket. Defaults to None.
        method: str. `"tsne"` or `"pca"`. Defaults to `"tsne"`.
        max_points: int. Sentences (or pairs, for STS) drawn at most, a
            seeded sample. Defaults to `600`.
        num_buckets: int. STS score buckets. Defaults to `5`.
        pooling: str or None. Overrides the encoder's pooling.
        seed: int. Seeds the sample and t-SNE. Defaults to `0`.
        path: str or None. Write the PNG here. Defaults to None.
        title: str or None.

    Returns:
        A JSON-serialisable dict: `method`, `coloured_by`, `label_names`,
        `points` (`[{"x", "y", "label", "text"}]`), `num_points`, `plot`.
    """
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {list(METHODS)}. Received: {method!r}.")
    max_points = validation.positive_int(max_points, "max_points")
    rng = np.random.default_rng(seed)
    pair_rows = None
    if task is None:

        pairs = load_stsb_pairs(data, split)
        if len(pairs) > max_points // 2:
            pairs = [pairs[i] for i in sorted(rng.choice(len(pairs), max_points // 2, replace=False))]
        texts = [s for p in pairs for s in (p[0], p[1])]
        buckets = score_buckets([p[2] for p in pairs], num_buckets)
        labels = np.repeat(buckets, 2)
        edges = bucket_edges(num_buckets)
        names = [f"score {edges[i]:g}-{edges[i + 1]:g}" for i in range(num_buckets)]
        pair_rows = np.arange(len(texts)).reshape(-1, 2)
        coloured_by = f"STS-B {split} gold-score bucket (lines join the two sentences of a pair)"
    else:

        name = readers.resolve_transfer_task(task)
        if name == "MRPC":
            raise ValueError("MRPC is a pair task; map a sentence task (SST2, TREC, MR, CR, SUBJ, MPQA).")
        splits = readers.read_transfer_task(data, name)
        if split not in splits:
            raise ValueError(f"{name} has the splits {list(splits)}; received split={split!r}.")
        texts, label_list = splits[split]
        if len(texts) > max_points:
            chosen = sorted(rng.choice(len(texts), max_points, replace=False))
            texts, label_list = [texts[i] for i in chosen], [label_list[i] for i in chosen]
        labels = np.asarray(label_list)
        names = list(readers.TREC_CLASSES) if name == "TREC" else ["negative", "positive"]
        if name == "SUBJ":
            names = ["subjective", "objective"]
        coloured_by = f"{name} {split} class"
    kwargs = {"show_progress": False}
    if pooling is not None:
        kwargs["pooling"] = pooling
    vectors = np.asarray(encoder.encode(texts, **reproducible(encoder.encode, kwargs)))
    coords = tsne(vectors, seed=seed) if method == "tsne" else pca(vectors)
    result = {
        "method": method,
        "coloured_by": coloured_by,
        "label_names": names,
        "num_points": len(texts),
        "points": [{"x": float(c[0]), "y": float(c[1]), "label": int(l), "text": t}
                   for c, l, t in zip(coords, labels, texts)],
        "plot": None,
    }
    if path is not None:
        result["plot"] = str(plot_embedding_map(
            coords, labels, path, names, pair_rows,
            title or f"{'t-SNE' if method == 'tsne' else 'PCA'} of sentence vectors: {coloured_by.split(' (')[0]}",
        ))
    return result
