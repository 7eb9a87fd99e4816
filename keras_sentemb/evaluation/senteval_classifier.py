"""SentEval's logistic-regression classifier (its PyTorch MLP with `nhid=0`), in numpy.

SentEval trains the transfer-task classifier as a PyTorch `nn.Linear` with
cross-entropy, minibatches drawn from a seeded permutation every pass, an
optimizer whose `weight_decay` is the L2 regularisation (added to the
gradient, on the weights and the bias), and early stopping on a validation
set: after every `epoch_size` passes over the training data the validation
accuracy is measured, the best model is kept, and training stops after the
validation accuracy has failed to improve more than `tenacity` times (the
count is never reset) or after `max_epoch` passes. The model returned is the
best one on the validation set.

`SentEvalClassifier` is that procedure in numpy, for several L2 values at
once: the weights of every candidate are stacked `[R, dim, classes]` and
trained on the same minibatches. This equals training them one after the
other as SentEval does, since SentEval re-seeds its random generators with
the same seed for every candidate (same initial weights, same permutations).
Each candidate stops on its own rule; a stopped candidate is frozen.

Details that follow the PyTorch code SentEval runs:

- initial weights and bias drawn from U(-1/sqrt(dim), 1/sqrt(dim))
  (`nn.Linear`'s default);
- the loss is the batch mean of the cross-entropy (SentEval sets
  `loss_fn.size_average = False` after construction, which PyTorch >= 0.4
  ignores: the papers since 2019 ran with the mean);
- Adam: lr 1e-3, betas (0.9, 0.999), eps 1e-8, bias-corrected; RMSprop (for
  SentEval's fast configuration): lr 1e-2, alpha 0.99, eps 1e-8;
  `weight_decay` = the L2 value, added to the gradient;
- with `validation_split` the first `int(split * n)` rows of a seeded
  permutation are held out (SentEval's split), then the permutations of the
  passes follow from the same generator.

The random streams are numpy's (`np.random.default_rng(seed)`), not
PyTorch's, so results match SentEval's protocol, not its exact digits.

References:
    - [Conneau & Kiela, 2018](https://arxiv.org/abs/1803.05449): SentEval,
      `senteval/tools/classifier.py`.
"""

import numpy as np
from threadpoolctl import threadpool_limits

OPTIMIZERS = ("adam", "rmsprop")


def _check_int(value, name, minimum=1):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}. Received: {value!r}.")
    return int(value)


class SentEvalClassifier:
    """Logistic regression trained as SentEval trains it, for several L2 values at once.

    Args:
        num_classes: int. Number of classes (labels are `0 .. num_classes-1`).
        l2_regs: sequence of float. The L2 (weight decay) values, one model
            each. Defaults to SentEval's PyTorch grid `(1e-5, 1e-4, 1e-3, 1e-2)`.
        optimizer: str. `"adam"` (SentEval's paper setting) or `"rmsprop"`.
            Defaults to `"adam"`.
        batch_size: int. Defaults to `64`.
        tenacity: int. Validation checks without improvement tolerated.
            Defaults to `5`.
        epoch_size: int. Passes over the data between validation checks.
            Defaults to `4`.
        max_epoch: int. Training stops once more than this many passes were
            made. Defaults to `200`.
        seed: int. Seeds the initial weights, the validation split and the
            permutations. Defaults to `1111` (SentEval's).

    Examples:

    >>> rng = np.random.default_rng(0)
    >>> x = np.concatenate([rng.normal(-2, 1, (40, 3)), rng.normal(2, 1, (40, 3))])
    >>> y = np.array([0] * 40 + [1] * 40)
    >>> clf = SentEvalClassifier(2, l2_regs=(1e-5, 1e-2))
    >>> clf.fit(x, y, validation_data=(x, y)).round(2).tolist()
    [1.0, 1.0]
    >>> clf.predict(x[:2]).tolist()
    [[0, 0], [0, 0]]

    References:
        - [Conneau & Kiela, 2018](https://arxiv.org/abs/1803.05449)
    """

    def __init__(
        self,
        num_classes,
        l2_regs=(1e-5, 1e-4, 1e-3, 1e-2),
        optimizer="adam",
        batch_size=64,
        tenacity=5,
        epoch_size=4,
        max_epoch=200,
        seed=1111,
    ):
        self.num_classes = _check_int(num_classes, "num_classes", 2)
        regs = np.asarray(list(l2_regs), dtype=np.float64).reshape(-1)
        if regs.size == 0 or not np.all(np.isfinite(regs)) or np.any(regs < 0):
            raise ValueError(f"`l2_regs` must be non-negative numbers. Received: {l2_regs!r}.")
        self.l2_regs = regs
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"`optimizer` must be one of {list(OPTIMIZERS)}. Received: {optimizer!r}.")
        self.optimizer = optimizer
        self.batch_size = _check_int(batch_size, "batch_size")
        self.tenacity = _check_int(tenacity, "tenacity", 0)
        self.epoch_size = _check_int(epoch_size, "epoch_size")
        self.max_epoch = _check_int(max_epoch, "max_epoch", 0)
        self.seed = _check_int(seed, "seed", 0)
        self.weights = None
        self.bias = None
        self.epochs = None

    # ------------------------------------------------------------- internals
    def _check_data(self, x, y):
        x = np.asarray(x, dtype=np.float32)
        y = np.asarray(y)
        if x.ndim != 2 or y.ndim != 1 or len(x) != len(y) or len(x) == 0:
            raise ValueError(
                f"Expected features [n, dim] and labels [n] with n > 0. Received shapes "
                f"{x.shape} and {y.shape}."
            )
        if not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= self.num_classes:
            raise ValueError(
                f"Labels must be ints in [0, {self.num_classes}). Received values in "
                f"[{y.min()}, {y.max()}]."
            )
        return x, y.astype(np.int64)

    def _predict(self, x, weights, bias):
        """Labels predicted by every candidate: `[R, n]`."""
        logits = (x @ weights + bias).reshape(len(x), -1, self.num_classes)
        return np.argmax(logits, axis=-1).T

    def _accuracy(self, x, y, weights, bias):
        return np.mean(self._predict(x, weights, bias) == y[None, :], axis=1)

    # ------------------------------------------------------------------- API
    def fit(self, x, y, validation_data=None, validation_split=None):
        """Train every candidate with early stopping on validation accuracy.

        Args:
            x: array `[n, dim]`. Features.
            y: int array `[n]`. Labels.
            validation_data: `(x_dev, y_dev)` or None. The early-stopping set.
            validation_split: float in (0, 1) or None. Hold out this fraction
                of `(x, y)` instead (SentEval uses 0.05 for the final fits).

        Returns:
            float array `[R]`: each candidate's best validation accuracy
            (in [0, 1]).
        """
        # The products are small: BLAS threads only fight over the cores.
        with threadpool_limits(limits=1, user_api="blas"):
            return self._fit(x, y, validation_data, validation_split)

    def _fit(self, x, y, validation_data, validation_split):
        x, y = self._check_data(x, y)
        rng = np.random.default_rng(self.seed)
        if (validation_data is None) == (validation_split is None):
            raise ValueError("Pass exactly one of `validation_data` and `validation_split`.")
        if validation_data is not None:
            dev_x, dev_y = self._check_data(*validation_data)
            train_x, train_y = x, y
        else:
            if not 0 < float(validation_split) < 1:
                raise ValueError(f"`validation_split` must be in (0, 1). Received: {validation_split!r}.")
            order = rng.permutation(len(x))
            cut = int(validation_split * len(x))
            if cut == 0 or cut == len(x):
                raise ValueError(
                    f"validation_split={validation_split} of {len(x)} rows leaves an empty split."
                )
            dev_x, dev_y = x[order[:cut]], y[order[:cut]]
            train_x, train_y = x[order[cut:]], y[order[cut:]]
        if dev_x.shape[1] != x.shape[1]:
            raise ValueError(f"Validation features have {dev_x.shape[1]} dims, training {x.shape[1]}.")

        regs = self.l2_regs
        r, dim, c = len(regs), x.shape[1], self.num_classes
        bound = 1.0 / np.sqrt(dim)
        # nn.Linear's weight is [C, dim]; float32 like PyTorch.
        w0 = rng.uniform(-bound, bound, size=(c, dim)).T.astype(np.float32)
        b0 = rng.uniform(-bound, bound, size=(c,)).astype(np.float32)
        # Candidates side by side in one matrix [dim, R * C], so that one
        # matrix product serves all of them.
        weights = np.tile(w0, (1, r))
        bias = np.tile(b0, r)
        m_w, v_w = np.zeros_like(weights), np.zeros_like(weights)
        m_b, v_b = np.zeros_like(bias), np.zeros_like(bias)
        decay = np.repeat(regs, c).astype(np.float32)
        onehot = np.eye(c, dtype=np.float32)[train_y]

        best = np.full(r, -1.0)
        best_w, best_b = weights.copy(), bias.copy()
        active = np.ones(r, dtype=bool)
        misses = np.zeros(r, dtype=np.int64)
        epochs = np.zeros(r, dtype=np.int64)
        step, nepoch, n = 0, 0, len(train_x)
        while active.any() and nepoch <= self.max_epoch:
            frozen = np.repeat(active, c).astype(np.float32)
            for _ in range(self.epoch_size):
                order = rng.permutation(n)
                for begin in range(0, n, self.batch_size):
                    idx = order[begin : begin + self.batch_size]
                    xb = train_x[idx]
                    logits = (xb @ weights + bias).reshape(len(idx), r, c)
                    logits -= logits.max(axis=-1, keepdims=True)
                    probs = np.exp(logits)
                    probs /= probs.sum(axis=-1, keepdims=True)
                    # d mean-CE / d logits, candidates side by side [B, R * C]
                    delta = ((probs - onehot[idx][:, None, :]) / np.float32(len(idx))).reshape(
                        len(idx), r * c
                    )
                    g_w = xb.T @ delta + decay * weights
                    g_b = delta.sum(axis=0) + decay * bias
                    step += 1
                    upd_w, upd_b = self._update(step, (g_w, m_w, v_w), (g_b, m_b, v_b))
                    weights -= upd_w * frozen
                    bias -= upd_b * frozen
            nepoch += self.epoch_size
            epochs[active] = nepoch
            accuracy = self._accuracy(dev_x, dev_y, weights, bias)
            improved = active & (accuracy > best)
            cols = np.repeat(improved, c)
            best[improved] = accuracy[improved]
            best_w[:, cols] = weights[:, cols]
            best_b[cols] = bias[cols]
            worse = active & ~improved
            active &= ~(worse & (misses >= self.tenacity))
            misses[worse] += 1
        self.weights, self.bias, self.epochs = best_w, best_b, epochs
        return best

    def _update(self, step, w_state, b_state):
        """One optimizer step for weights and bias; moments updated in place."""
        out = []
        for grad, m, v in (w_state, b_state):
            if self.optimizer == "adam":
                m *= np.float32(0.9)
                m += np.float32(0.1) * grad
                v *= np.float32(0.999)
                v += np.float32(0.001) * grad * grad
                denom = np.sqrt(v) / np.float32(np.sqrt(1 - 0.999**step)) + np.float32(1e-8)
                out.append(np.float32(1e-3 / (1 - 0.9**step)) * m / denom)
            else:  # rmsprop
                v *= np.float32(0.99)
                v += np.float32(0.01) * grad * grad
                out.append(np.float32(1e-2) * grad / (np.sqrt(v) + np.float32(1e-8)))
        return out

    def predict(self, x):
        """Predicted labels of every candidate: int array `[R, n]`."""
        if self.weights is None:
            raise ValueError("Call `fit` first.")
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.weights.shape[0]:
            raise ValueError(
                f"Expected features [n, {self.weights.shape[0]}]. Received shape {x.shape}."
            )
        return self._predict(x, self.weights, self.bias)

    def score(self, x, y):
        """Accuracy of every candidate on `(x, y)`: float array `[R]` in [0, 1]."""
        x, y = self._check_data(x, y)
        return np.mean(self.predict(x) == y[None, :], axis=1)
