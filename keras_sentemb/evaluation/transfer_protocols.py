"""SentEval's three validation protocols for transfer tasks, on precomputed features.

- `inner_kfold` (MR, CR, SUBJ, MPQA: one labelled set): `kfold` outer
  stratified folds; inside each outer training part, the L2 value is chosen
  by a `kfold` inner stratified cross-validation (mean inner-fold accuracy,
  rounded to 2 decimals, first best on ties); a model with that value is
  trained on the whole outer training part (5% held out for early stopping)
  and scored on the outer test fold. Reported: mean outer test accuracy.
- `kfold_then_test` (TREC, MRPC: train and test sets): the L2 value is
  chosen by a `kfold` stratified cross-validation on train (each fold is the
  early-stopping set of the model scored on it); a model with that value is
  trained on all of train (5% held out for early stopping) and scored on test.
- `split_selection` (SST2: train, dev and test): every L2 value is trained
  on train with early stopping on dev; the best on dev is scored on test.

Every classifier is a `SentEvalClassifier`; `config` holds its settings
(`TRANSFER_CONFIGS`). Accuracies are percentages rounded to 2 decimals, as
SentEval reports them.

References:
    - [Conneau & Kiela, 2018](https://arxiv.org/abs/1803.05449): SentEval,
      `senteval/tools/validation.py`.
"""

import numpy as np

from keras_sentemb.evaluation.senteval_classifier import SentEvalClassifier

# SentEval's PyTorch grid of L2 values: 10**t for t in -5..-2.
L2_GRID = (1e-5, 1e-4, 1e-3, 1e-2)
# "paper": the configuration SentEval's README recommends and the papers use
# (SimCSE's `--mode test`); "fast": SentEval's prototyping setting (SimCSE's
# `--mode dev/fasttest`).
TRANSFER_CONFIGS = {
    "paper": {"kfold": 10, "optimizer": "adam", "batch_size": 64, "tenacity": 5,
              "epoch_size": 4, "max_epoch": 200, "l2_regs": L2_GRID},
    "fast": {"kfold": 5, "optimizer": "rmsprop", "batch_size": 128, "tenacity": 3,
             "epoch_size": 2, "max_epoch": 200, "l2_regs": L2_GRID},
}
# Fraction held out for early stopping in the final fits (SentEval's).
FINAL_VALIDATION_SPLIT = 0.05


def resolve_config(config):
    """A full classifier configuration from a name (`"paper"`, `"fast"`) or a dict.

    A dict overrides the `"paper"` values it names.
    """
    if isinstance(config, str):
        if config not in TRANSFER_CONFIGS:
            raise ValueError(
                f"Unknown transfer config {config!r}. Valid: {sorted(TRANSFER_CONFIGS)} or a dict."
            )
        return dict(TRANSFER_CONFIGS[config], name=config)
    if isinstance(config, dict):
        unknown = set(config) - set(TRANSFER_CONFIGS["paper"]) - {"name"}
        if unknown:
            raise ValueError(
                f"Unknown transfer config keys {sorted(unknown)}; valid keys: "
                f"{sorted(TRANSFER_CONFIGS['paper'])}."
            )
        return dict(TRANSFER_CONFIGS["paper"], name="custom", **config)
    raise ValueError(f"`config` must be 'paper', 'fast' or a dict. Received: {config!r}.")


def stratified_folds(labels, k, seed):
    """`k` stratified folds: a list of `(train_indices, test_indices)`.

    Each class's indices are shuffled (seeded) and dealt round-robin over
    the folds, each class continuing where the previous one stopped, so the
    fold sizes differ by at most one and each fold keeps the class ratios.

    Args:
        labels: int array `[n]`.
        k: int >= 2, at most `n`.
        seed: int.

    Examples:

    >>> folds = stratified_folds([0, 0, 0, 0, 1, 1], k=2, seed=0)
    >>> [sorted(np.asarray([0, 0, 0, 0, 1, 1])[test].tolist()) for _, test in folds]
    [[0, 0, 1], [0, 0, 1]]
    """
    labels = np.asarray(labels)
    n = len(labels)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 2 <= k <= n:
        raise ValueError(f"`k` must be an int in [2, {n}] for {n} examples. Received: {k!r}.")
    rng = np.random.default_rng(seed)
    fold_of = np.empty(n, dtype=np.int64)
    start = 0
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        members = members[rng.permutation(len(members))]
        fold_of[members] = (start + np.arange(len(members))) % k
        start = (start + len(members)) % k
    return [(np.flatnonzero(fold_of != f), np.flatnonzero(fold_of == f)) for f in range(k)]


def _classifier(config, num_classes, seed, l2_regs=None):
    return SentEvalClassifier(
        num_classes,
        l2_regs=config["l2_regs"] if l2_regs is None else l2_regs,
        optimizer=config["optimizer"],
        batch_size=config["batch_size"],
        tenacity=config["tenacity"],
        epoch_size=config["epoch_size"],
        max_epoch=config["max_epoch"],
        seed=seed,
    )


def _percent(value):
    return round(100.0 * float(value), 2)


def _cross_validate(x, y, config, num_classes, seed):
    """Mean fold accuracy (%, rounded) of every L2 value; SentEval's scan."""
    folds = stratified_folds(y, config["kfold"], seed)
    scores = np.zeros(len(config["l2_regs"]))
    for train, test in folds:
        clf = _classifier(config, num_classes, seed)
        clf.fit(x[train], y[train], validation_data=(x[test], y[test]))
        scores += clf.score(x[test], y[test])
    return [_percent(s / len(folds)) for s in scores]


def _final_fit(x, y, reg, config, num_classes, seed):
    clf = _classifier(config, num_classes, seed, l2_regs=(reg,))
    clf.fit(x, y, validation_split=FINAL_VALIDATION_SPLIT)
    return clf


def _num_classes(*label_sets):
    return int(max(int(np.max(y)) for y in label_sets)) + 1


def inner_kfold(x, y, config, seed=1111):
    """SentEval's `InnerKFoldClassifier` (MR, CR, SUBJ, MPQA).

    Returns:
        dict: `devacc` (mean of the best inner scores), `acc` (mean outer
        test accuracy), `fold_acc` (per outer fold), `l2` (chosen per outer
        fold), `ndev`, `ntest`.
    """
    x, y = np.asarray(x, np.float64), np.asarray(y, np.int64)
    num_classes = _num_classes(y)
    regs = list(config["l2_regs"])
    dev, test, chosen = [], [], []
    for train, held in stratified_folds(y, config["kfold"], seed):
        scores = _cross_validate(x[train], y[train], config, num_classes, seed)
        best = int(np.argmax(scores))
        chosen.append(regs[best])
        dev.append(scores[best])
        clf = _final_fit(x[train], y[train], regs[best], config, num_classes, seed)
        test.append(_percent(clf.score(x[held], y[held])[0]))
    return {
        "devacc": round(float(np.mean(dev)), 2),
        "acc": round(float(np.mean(test)), 2),
        "fold_acc": test,
        "l2": chosen,
        "ndev": len(y),
        "ntest": len(y),
    }


def kfold_then_test(train_x, train_y, test_x, test_y, config, seed=1111):
    """SentEval's `KFoldClassifier` (TREC, MRPC): choose L2 by CV on train, score on test.

    Returns:
        dict: `devacc` (best cross-validation accuracy), `acc` (test),
        `l2`, `cv` (`{l2: accuracy}`), `predictions` (test labels predicted,
        a numpy array), `ndev`, `ntest`.
    """
    train_x, train_y = np.asarray(train_x, np.float64), np.asarray(train_y, np.int64)
    test_x, test_y = np.asarray(test_x, np.float64), np.asarray(test_y, np.int64)
    num_classes = _num_classes(train_y, test_y)
    regs = list(config["l2_regs"])
    scores = _cross_validate(train_x, train_y, config, num_classes, seed)
    best = int(np.argmax(scores))
    clf = _final_fit(train_x, train_y, regs[best], config, num_classes, seed)
    predictions = clf.predict(test_x)[0]
    return {
        "devacc": scores[best],
        "acc": _percent(np.mean(predictions == test_y)),
        "l2": regs[best],
        "cv": {str(r): s for r, s in zip(regs, scores)},
        "predictions": predictions,
        "ndev": len(train_y),
        "ntest": len(test_y),
    }


def split_selection(train_x, train_y, dev_x, dev_y, test_x, test_y, config, seed=1111):
    """SentEval's `SplitClassifier` (SST2): choose L2 on dev, score on test.

    Every candidate is trained on train with early stopping on dev; the
    final model is retrained the same way with the chosen value (identical
    to the candidate, as the seed is the same).

    Returns:
        dict: `devacc`, `acc`, `l2`, `dev` (`{l2: accuracy}`), `ndev`, `ntest`.
    """
    arrays = [np.asarray(a, np.float64) for a in (train_x, dev_x, test_x)]
    labels = [np.asarray(a, np.int64) for a in (train_y, dev_y, test_y)]
    num_classes = _num_classes(*labels)
    regs = list(config["l2_regs"])
    clf = _classifier(config, num_classes, seed)
    clf.fit(arrays[0], labels[0], validation_data=(arrays[1], labels[1]))
    scores = [_percent(s) for s in clf.score(arrays[1], labels[1])]
    best = int(np.argmax(scores))
    test = clf.score(arrays[2], labels[2])[best]
    return {
        "devacc": scores[best],
        "acc": _percent(test),
        "l2": regs[best],
        "dev": {str(r): s for r, s in zip(regs, scores)},
        "ndev": len(labels[1]),
        "ntest": len(labels[2]),
    }
