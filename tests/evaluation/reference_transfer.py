"""An independent implementation of SentEval's transfer protocol, for cross-checks only.

Written separately from `keras_sentemb.evaluation.transfer_protocols` /
`senteval_classifier`, sharing no code with them: multinomial logistic
regression minimised to convergence with scipy's L-BFGS on
`mean cross-entropy + l2 / 2 * ||W, b||^2` (the objective whose gradient is
what SentEval's `weight_decay=l2` adds), no early stopping; folds by sorting
seeded random keys within each class. The L2 value is chosen from the same
grid by the same rules (mean fold accuracy, first best; dev accuracy for
SST2), so both implementations run the *protocol* independently.
"""

import numpy as np
from scipy import optimize
from scipy.special import logsumexp

GRID = (1e-5, 1e-4, 1e-3, 1e-2)


def fit_logreg(x, y, num_classes, l2, start=None):
    """Weights `[dim + 1, C]` (last row the bias) minimising mean CE + l2/2 ||theta||^2.

    The objective is strictly convex, so `start` (a previous solution, e.g. for
    a larger l2) changes only how many iterations reach the same minimum.
    """
    x = np.asarray(x, np.float64)
    n, d = x.shape
    xa = np.hstack([x, np.ones((n, 1))])
    target = np.zeros((n, num_classes))
    target[np.arange(n), y] = 1.0

    def objective(theta):
        w = theta.reshape(d + 1, num_classes)
        z = xa @ w
        lse = logsumexp(z, axis=1, keepdims=True)
        loss = np.mean(lse[:, 0] - np.sum(z * target, axis=1)) + 0.5 * l2 * np.sum(w * w)
        grad = xa.T @ (np.exp(z - lse) - target) / n + l2 * w
        return loss, grad.ravel()

    theta0 = np.zeros((d + 1) * num_classes) if start is None else np.ravel(start)
    res = optimize.minimize(objective, theta0, jac=True, method="L-BFGS-B",
                            options={"maxiter": 1000, "gtol": 1e-6})
    return res.x.reshape(d + 1, num_classes)


def predict(w, x):
    x = np.asarray(x, np.float64)
    return np.argmax(x @ w[:-1] + w[-1], axis=1)


def folds(y, k, seed):
    """Stratified folds from random keys: the i-th member (by key) of a class goes to fold i % k."""
    y = np.asarray(y)
    keys = np.random.RandomState(seed).rand(len(y))
    assignment = np.zeros(len(y), dtype=int)
    for label in sorted(set(y.tolist())):
        members = np.where(y == label)[0]
        ranked = members[np.argsort(keys[members])]
        assignment[ranked] = np.arange(len(ranked)) % k
    return [(np.where(assignment != f)[0], np.where(assignment == f)[0]) for f in range(k)]


def choose_l2(x, y, num_classes, k, seed):
    accs = {l2: [] for l2 in GRID}
    for tr, te in folds(y, k, seed):
        w = None  # a path from the strongest penalty down, each fit warm-started
        for l2 in sorted(GRID, reverse=True):
            w = fit_logreg(x[tr], y[tr], num_classes, l2, start=w)
            accs[l2].append(np.mean(predict(w, x[te]) == y[te]))
    scores = [round(100 * float(np.mean(accs[l2])), 2) for l2 in GRID]
    return GRID[int(np.argmax(scores))], scores


def kfold_then_test(train_x, train_y, test_x, test_y, k=10, seed=1111):
    """TREC / MRPC: L2 by k-fold CV on train, then test accuracy (%) and predictions."""
    c = int(max(train_y.max(), test_y.max())) + 1
    l2, _ = choose_l2(train_x, train_y, c, k, seed)
    pred = predict(fit_logreg(train_x, train_y, c, l2), test_x)
    return round(100 * float(np.mean(pred == test_y)), 2), l2, pred


def split_selection(train_x, train_y, dev_x, dev_y, test_x, test_y):
    """SST2: L2 by dev accuracy, then test accuracy (%)."""
    c = int(max(train_y.max(), dev_y.max(), test_y.max())) + 1
    models = [fit_logreg(train_x, train_y, c, l2) for l2 in GRID]
    dev = [round(100 * float(np.mean(predict(w, dev_x) == dev_y)), 2) for w in models]
    best = int(np.argmax(dev))
    return round(100 * float(np.mean(predict(models[best], test_x) == test_y)), 2), GRID[best]


def inner_kfold(x, y, k=10, seed=1111):
    """MR/CR/SUBJ/MPQA: outer k-fold, L2 by inner k-fold, mean outer accuracy (%)."""
    c = int(y.max()) + 1
    accs = []
    for tr, te in folds(y, k, seed):
        l2, _ = choose_l2(x[tr], y[tr], c, k, seed)
        accs.append(100 * float(np.mean(predict(fit_logreg(x[tr], y[tr], c, l2), x[te]) == y[te])))
    return round(float(np.mean(accs)), 2)
