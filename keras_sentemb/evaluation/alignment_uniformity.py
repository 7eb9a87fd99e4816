"""Alignment and uniformity of embeddings (Wang & Isola, 2020), tracked in training."""

import logging

import keras
import numpy as np


from keras_sentemb.evaluation import _plotting
from keras_sentemb.evaluation.readers import load_stsb_pairs
from keras_sentemb.evaluation.sts_spread import encode_pairs
from keras_sentemb.kernels.precision import reproducible

logger = logging.getLogger(__name__)


def _normalize(x, name):
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"`{name}` must be a non-empty 2-D array [n, dim], received shape {x.shape}.")
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def alignment(x, y, alpha=2, normalize=True):
    """Alignment loss: mean `||f(x_i) - f(y_i)||^alpha` over positive pairs.

    Lower is better (positives close). Inputs are L2-normalised first unless
    `normalize=False`.

    Args:
        x: array `[n, dim]`. Row i is one side of positive pair i.
        y: array `[n, dim]`. The other side.
        alpha: float. Exponent. Defaults to `2`.
        normalize: bool. L2-normalise rows first. Defaults to `True`.

    Returns:
        float in `[0, 2**alpha]` for normalised inputs.

    Examples:

    >>> round(alignment([[1.0, 0.0]], [[0.0, 1.0]]), 6)  # squared distance 2
    2.0

    References:
        - [Wang & Isola, 2020. Understanding Contrastive Representation
          Learning through Alignment and Uniformity on the
          Hypersphere](https://arxiv.org/abs/2005.10242)
    """
    x = _normalize(x, "x") if normalize else np.asarray(x, np.float64)
    y = _normalize(y, "y") if normalize else np.asarray(y, np.float64)
    if x.shape != y.shape:
        raise ValueError(f"`x` and `y` must have the same shape, received {x.shape} and {y.shape}.")
    return float(np.mean(np.linalg.norm(x - y, axis=1) ** alpha))


def uniformity(x, t=2, normalize=True):
    """Uniformity loss: `log mean_{i != j} exp(-t ||f(x_i) - f(x_j)||^2)`.

    Lower is better (embeddings spread over the sphere). Needs at least two
    rows. Computed with a log-sum-exp for stability.

    Args:
        x: array `[n, dim]`, n >= 2.
        t: float. Defaults to `2`.
        normalize: bool. L2-normalise rows first. Defaults to `True`.

    Returns:
        float in `[-4t, 0]` for normalised inputs (two antipodal unit
        vectors give `-4t`).

    Examples:

    >>> uniformity([[1.0, 0.0], [-1.0, 0.0]])  # squared distance 4, t = 2
    -8.0

    References:
        - [Wang & Isola, 2020](https://arxiv.org/abs/2005.10242)
    """
    x = _normalize(x, "x") if normalize else np.asarray(x, np.float64)
    n = x.shape[0]
    if n < 2:
        raise ValueError(f"Uniformity needs at least 2 embeddings, received {n}.")
    sq = np.sum(x * x, axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2 * x @ x.T, 0.0)
    values = -t * d2[~np.eye(n, dtype=bool)]
    m = values.max()
    return float(m + np.log(np.mean(np.exp(values - m))))


def plot_trajectory(history, path, title="Alignment vs uniformity"):
    """Save the (uniformity, alignment) trajectory as a PNG (matplotlib, Agg).

    Args:
        history: list of dicts with `step`, `alignment`, `uniformity`
            (e.g. `AlignmentUniformityTracker.history`).
        path: str. PNG file to write.
        title: str. Plot title.

    Returns:
        `path`.
    """
    if not history:
        raise ValueError("Nothing to plot: the history is empty.")
    u = [h["uniformity"] for h in history]
    a = [h["alignment"] for h in history]
    fig, ax = _plotting.axes(figsize=(5, 4))
    sc = ax.scatter(u, a, c=[h["step"] for h in history], cmap="viridis", zorder=3)
    ax.plot(u, a, color="gray", alpha=0.6, zorder=2)
    ax.annotate("start", (u[0], a[0]), textcoords="offset points", xytext=(5, 5))
    ax.annotate("end", (u[-1], a[-1]), textcoords="offset points", xytext=(5, 5))
    fig.colorbar(sc, ax=ax, label="step")
    ax.set_xlabel(r"$\ell_{uniform}$ (lower is better)")
    ax.set_ylabel(r"$\ell_{align}$ (lower is better)")
    ax.set_title(title)
    return _plotting.save(fig, path)


class AlignmentUniformityTracker(keras.callbacks.Callback):
    """Logs alignment and uniformity of a parallel trainer's student during fit.

    Every `every` steps (and before and after training) the trainer's
    teacher embeds the source sentences, the student embeds the target
    sentences; alignment is measured on the (teacher source, student target)
    translation pairs and uniformity on the student's target embeddings.
    Values go to the logs as `alignment` / `uniformity` and to `history`;
    `plot(path)` draws the trajectory (the paper's Figure 4 view).

    Args:
        pairs: list of (source, target) str. Held-out translation pairs.
        every: int. Steps between measurements. Defaults to `100`.
        target_pooling: str or None. The student's pooling for measuring.
        max_length: int or None. Token limit.

    References:
        - [Wang & Isola, 2020](https://arxiv.org/abs/2005.10242)
    """
    def __init__(self, pairs, every=100, target_pooling=None, max_length=None):
        super().__init__()
        if len(pairs) < 2:
            raise ValueError(f"Need at least 2 pairs, received {len(pairs)}.")
        if int(every) < 1:
            raise ValueError(f"`every` must be >= 1, received {every!r}.")
        self.pairs = list(pairs)
        self.every = int(every)
        self.target_pooling = target_pooling
        self.max_length = max_length
        self.history = []

    def measure(self):
        trainer = self.model
        step = int(trainer.optimizer.iterations.numpy()) if trainer.optimizer else 0
        if self.history and self.history[-1]["step"] == step:
            return self.history[-1]
        src = trainer.teacher.encode(
            [a for a, _ in self.pairs], max_length=self.max_length, show_progress=False,
            precision="float32",
        )
        tgt = trainer.student.encode(
            [b for _, b in self.pairs], max_length=self.max_length,
            pooling=self.target_pooling, show_progress=False, precision="float32",
        )
        point = {"step": step, "alignment": alignment(src, tgt), "uniformity": uniformity(tgt)}
        self.history.append(point)
        logger.info("step %d: alignment %.4f uniformity %.4f", step, point["alignment"], point["uniformity"])
        return point

    def on_train_begin(self, logs=None):
        self.measure()

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step % self.every == 0:
            point = self.measure()
            if logs is not None:
                logs["alignment"] = point["alignment"]
                logs["uniformity"] = point["uniformity"]

    def on_train_end(self, logs=None):
        self.measure()

    def plot(self, path):
        """Save the trajectory to `path` (PNG)."""
        return plot_trajectory(self.history, path)


def sts_alignment_uniformity(encoder, data="stsb", split="dev", threshold=4.0, pooling=None,
                             batch_size=128, max_length=None):
    """Alignment and uniformity of an encoder on STS-B pairs (SimCSE, Figure 2).

    SimCSE's setting: the positive pairs are the STS-B pairs with a gold
    score of at least 4 (of 5) and alignment is measured on them (alpha 2);
    uniformity (t = 2) on every distinct sentence of the split. Vectors are
    L2-normalised; every distinct sentence is encoded once.

    Args:
        encoder: `SentenceEncoder` (or an object with a compatible `encode`).
        data: `"stsb"`, a path to an STS-B csv/folder, or a list of
            `(s1, s2, score)`. Defaults to `"stsb"`.
        split: str. Defaults to `"dev"`.
        threshold: float. Gold score of the positive pairs. Defaults to `4.0`.
        pooling: str or None. Overrides the encoder's pooling.
        batch_size: int. Defaults to `128`.
        max_length: int or None. Defaults to the encoder's.

    Returns:
        dict: `alignment`, `uniformity`, `num_positive_pairs`,
        `num_sentences`, `protocol` (a description), `split`, `pooling`.

    References:
        - [Gao et al., 2021](https://arxiv.org/abs/2104.08821): SimCSE,
          section 5 and Figure 2.
        - [Wang & Isola, 2020](https://arxiv.org/abs/2005.10242)
    """
    pairs = load_stsb_pairs(data, split)
    if not any(p[2] >= threshold for p in pairs):
        raise ValueError(f"No pair has a gold score >= {threshold}; nothing to align.")
    vectors, first, second = encode_pairs(encoder, pairs, batch_size, max_length, pooling)
    positive = [i for i, p in enumerate(pairs) if p[2] >= threshold]
    a = vectors[[first[i] for i in positive]]
    b = vectors[[second[i] for i in positive]]
    return {
        "alignment": alignment(a, b),
        "uniformity": uniformity(vectors),
        "num_positive_pairs": len(positive),
        "num_sentences": len(vectors),
        "protocol": f"STS-B {split}: alignment (alpha 2) on pairs scored >= {threshold:g}, "
                    "uniformity (t 2) on all sentences, L2-normalised",
        "split": split if not isinstance(data, (list, tuple)) else "custom",
        "pooling": pooling or getattr(encoder, "pooling", None),
    }


def plot_alignment_uniformity(points, path, title="Alignment vs uniformity (STS-B dev)"):
    """One labelled point per model in the (uniformity, alignment) plane (PNG, Agg).

    Args:
        points: `{name: {"alignment": a, "uniformity": u}}` (e.g. results of
            `sts_alignment_uniformity`), or `{name: history}` where a history
            is a list of `{"step", "alignment", "uniformity"}` (drawn as a
            trajectory).
        path: str. The PNG file.
        title: str. Plot title.

    Returns:
        `path`.
    """
    if not points:
        raise ValueError("Nothing to plot: `points` is empty.")
    fig, ax = _plotting.axes(figsize=(5, 4))
    for name, value in points.items():
        if isinstance(value, list):
            u = [h["uniformity"] for h in value]
            a = [h["alignment"] for h in value]
            ax.plot(u, a, "o-", alpha=0.8, label=name)
            ax.annotate(f"step {value[-1]['step']}", (u[-1], a[-1]), textcoords="offset points",
                        xytext=(5, -10), fontsize=8)
        else:
            ax.scatter([value["uniformity"]], [value["alignment"]], s=60, zorder=3, label=name)
    ax.set_xlabel(r"$\ell_{uniform}$ (lower is better)")
    ax.set_ylabel(r"$\ell_{align}$ (lower is better)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return _plotting.save(fig, path, legend=True)
