"""Closed-form NumPy (float64) versions of the losses, written with explicit loops.

Independent of the TensorFlow code under test: nothing here imports
keras_sentemb. Used by the unit tests and the distributed check script.
"""

import math

import numpy as np


def cosine(u, v):
    u = np.asarray(u, np.float64)
    v = np.asarray(v, np.float64)
    nu = max(math.sqrt(float(np.dot(u, u))), 1e-12)
    nv = max(math.sqrt(float(np.dot(v, v))), 1e-12)
    return float(np.dot(u, v)) / (nu * nv)


def dot(u, v):
    return float(np.dot(np.asarray(u, np.float64), np.asarray(v, np.float64)))


def logsumexp(values):
    values = [float(v) for v in values]
    m = max(values)
    return m + math.log(sum(math.exp(v - m) for v in values))


def info_nce_per_example(
    anchors,
    positives,
    negatives=None,
    temperature=0.05,
    hard_negative_weight=0.0,
    similarity="cosine",
    symmetric=False,
):
    sim = cosine if similarity == "cosine" else dot
    b = len(anchors)
    candidates = list(positives) + (list(negatives) if negatives is not None else [])
    losses = []
    for i in range(b):
        logits = [sim(anchors[i], c) / temperature for c in candidates]
        if negatives is not None:
            logits[b + i] += hard_negative_weight
        row = logsumexp(logits) - logits[i]
        if symmetric:
            col_logits = [sim(positives[i], a) / temperature for a in anchors]
            col = logsumexp(col_logits) - col_logits[i]
            row = 0.5 * (row + col)
        losses.append(row)
    return np.array(losses)


def info_nce(*args, **kwargs):
    return float(np.mean(info_nce_per_example(*args, **kwargs)))


def nt_xent_per_example(view_a, view_b, temperature=0.1):
    z = list(view_a) + list(view_b)
    n = len(view_a)
    losses = []
    for k in range(2 * n):
        positive = (k + n) % (2 * n)
        others = [j for j in range(2 * n) if j != k]
        logits = {j: cosine(z[k], z[j]) / temperature for j in others}
        losses.append(logsumexp(list(logits.values())) - logits[positive])
    return np.array(losses)


def nt_xent(view_a, view_b, temperature=0.1):
    return float(np.mean(nt_xent_per_example(view_a, view_b, temperature)))


def contrastive_tension_per_example(reps_1, reps_2, labels):
    losses = []
    for r1, r2, y in zip(reps_1, reps_2, labels):
        x = dot(r1, r2)
        p = 1.0 / (1.0 + math.exp(-x))
        losses.append(-(y * math.log(p) + (1.0 - y) * math.log(1.0 - p)))
    return np.array(losses)


def contrastive_tension(reps_1, reps_2, labels):
    return float(np.mean(contrastive_tension_per_example(reps_1, reps_2, labels)))


def contrastive_tension_in_batch(reps_1, reps_2, scale=20.0):
    b = len(reps_1)
    scores = [[cosine(reps_1[i], reps_2[j]) * scale for j in range(b)] for i in range(b)]
    rows = [logsumexp(scores[i]) - scores[i][i] for i in range(b)]
    cols = [logsumexp([scores[i][j] for i in range(b)]) - scores[j][j] for j in range(b)]
    return 0.5 * (float(np.mean(rows)) + float(np.mean(cols)))
