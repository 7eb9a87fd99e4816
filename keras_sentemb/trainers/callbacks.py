"""Callbacks shared by the trainers: dev-set selection and non-finite guard."""

import logging
import math

import keras
import numpy as np

logger = logging.getLogger(__name__)


def sts_spearman(encoder, pairs, batch_size=128):
    """Spearman x100 of cosine similarity on (s1, s2, score) pairs."""
    from scipy.stats import spearmanr

    from keras_sentemb.evaluation.sts import cosine_scores

    sentences = sorted({s for a, b, _ in pairs for s in (a, b)})
    index = {s: i for i, s in enumerate(sentences)}
    vectors = encoder.encode(sentences, batch_size=batch_size, show_progress=False)
    a = vectors[[index[p[0]] for p in pairs]]
    b = vectors[[index[p[1]] for p in pairs]]
    gold = np.array([p[2] for p in pairs], dtype=np.float64)
    return float(spearmanr(cosine_scores(a, b), gold).correlation * 100)


class STSDevEvaluation(keras.callbacks.Callback):
    """Evaluates the trainer's candidate encoders on STS dev pairs; keeps the best.

    Every `every` training steps (and before training and at its end) each
    encoder of `trainer.candidate_encoders()` is scored by Spearman x100 of
    cosine similarity on `pairs`. The score of the best candidate is written
    to the logs as `monitor` (so `EarlyStopping`, `TensorBoard` and
    `ModelCheckpoint` can use it), every candidate's as
    `{monitor}_{name}`. With `restore_best=True` the best candidate's weights
    at its best evaluation (the starting weights included) are restored at
    the end of training and that candidate becomes `trainer.encoder`.

    Args:
        pairs: list of (sentence1, sentence2, score). The dev set.
        every: int. Evaluate every this many steps. Defaults to `100`.
        monitor: str. The log key. Defaults to `"sts_dev_spearman"`.
        restore_best: bool. Restore the best weights at the end. Defaults to
            `True`.
        patience: int or None. Stop after this many evaluations without
            improvement. Defaults to `None` (never).
        min_delta: float. Improvement needed to count. Defaults to `0.0`.
        evaluate_at_start: bool. Score the initial weights too, so training
            can never make the kept encoder worse on dev. Defaults to `True`.
    """

    def __init__(
        self,
        pairs,
        every=100,
        monitor="sts_dev_spearman",
        restore_best=True,
        patience=None,
        min_delta=0.0,
        evaluate_at_start=True,
        batch_size=128,
    ):
        super().__init__()
        if not pairs:
            raise ValueError("STSDevEvaluation needs a non-empty list of dev pairs.")
        if int(every) < 1:
            raise ValueError(f"`every` must be >= 1, received {every!r}.")
        self.pairs = list(pairs)
        self.every = int(every)
        self.monitor = monitor
        self.restore_best = restore_best
        self.patience = patience
        self.min_delta = float(min_delta)
        self.evaluate_at_start = evaluate_at_start
        self.batch_size = batch_size
        self.history = []  # (step, {name: score})
        self.best_score = -math.inf
        self.best_name = None
        self.best_step = None
        self._best_weights = None
        self._wait = 0
        self._step = 0
        self._last_eval_step = None

    def _evaluate(self, logs=None):
        step = int(self.model.optimizer.iterations.numpy()) if self.model.optimizer else 0
        if step == self._last_eval_step:
            return
        self._last_eval_step = step
        scores = {
            name: sts_spearman(enc, self.pairs, self.batch_size)
            for name, enc in self.model.candidate_encoders().items()
        }
        self.history.append((step, scores))
        name = max(scores, key=scores.get)
        logger.info("step %d: STS dev spearman %s", step, scores)
        if scores[name] > self.best_score + self.min_delta:
            self.best_score, self.best_name, self.best_step = scores[name], name, step
            if self.restore_best:
                enc = self.model.candidate_encoders()[name]
                self._best_weights = [np.array(w) for w in enc.get_weights()]
            self._wait = 0
        else:
            self._wait += 1
            if self.patience is not None and self._wait >= self.patience:
                self.model.stop_training = True
        if logs is not None:
            logs[self.monitor] = scores[name]
            for n, s in scores.items():
                logs[f"{self.monitor}_{n}"] = s

    def on_train_begin(self, logs=None):
        if self.evaluate_at_start:
            self._evaluate()

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step % self.every == 0:
            self._evaluate(logs)

    def on_epoch_end(self, epoch, logs=None):
        # Put the latest score in the epoch logs for EarlyStopping/TensorBoard.
        if self.history and logs is not None:
            scores = self.history[-1][1]
            logs[self.monitor] = max(scores.values())

    def on_train_end(self, logs=None):
        self._evaluate()
        if self.restore_best and self._best_weights is not None:
            enc = self.model.candidate_encoders()[self.best_name]
            enc.set_weights(self._best_weights)
            self.model.select_encoder(self.best_name)
            logger.info(
                "kept %s from step %d (STS dev spearman %.2f)",
                self.best_name, self.best_step, self.best_score,
            )


class NonFiniteGuard(keras.callbacks.Callback):
    """Stops training at the first step whose loss or gradients were not finite.

    The trainers skip such a step (`base_trainer.apply_if_finite`: weights
    and optimizer state untouched, on every replica), so the weights are the
    last finite ones; this callback ends `fit` and records the step.
    """

    def __init__(self):
        super().__init__()
        self.stopped_at = None

    def on_train_batch_end(self, batch, logs=None):
        if logs and float(logs.get("nonfinite", 0.0)) > 0:
            self.stopped_at = int(self.model.optimizer.iterations.numpy())
            logger.warning(
                "Non-finite loss or gradients at step %d: training stopped, "
                "weights kept from the last finite step.", self.stopped_at,
            )
            self.model.stop_training = True
