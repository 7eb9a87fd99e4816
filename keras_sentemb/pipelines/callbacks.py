"""Callbacks of the shared fit scaffold: dev selection, step limit, NaN guard, loss log."""

import json
import logging
import math
import os

from scipy.stats import spearmanr
import keras
import numpy as np

from keras_sentemb import validation
from keras_sentemb.evaluation.sts import cosine_scores
from keras_sentemb.kernels.precision import reproducible
from keras_sentemb.models.folder_inspection import check_npz

logger = logging.getLogger(__name__)

SELECTION_NAME = "sentemb_dev_selection"
SELECTION_STATE = f"{SELECTION_NAME}.json"
SELECTION_WEIGHTS = f"{SELECTION_NAME}_best.npz"
RETRIEVAL_SELECTION_NAME = "sentemb_retrieval_dev_selection"
LOSS_STATE = "sentemb_loss_history.json"


def pair_sentences(pairs):
    """The distinct sentences of (s1, s2, score) pairs, sorted."""
    return sorted({s for a, b, _ in pairs for s in (a, b)})


def sts_spearman(encoder, pairs, batch_size=128, pooling=None):
    """Spearman x100 of cosine similarity on (s1, s2, score) pairs."""
    sentences = pair_sentences(pairs)
    vectors = encoder.encode(sentences, **reproducible(encoder.encode, dict(
        batch_size=batch_size, pooling=pooling, show_progress=False)))
    return vectors_spearman(vectors, sentences, pairs)


def vectors_spearman(vectors, sentences, pairs):
    """Spearman x100 of cosine similarity on pairs, from the vectors of `sentences`.

    Args:
        vectors: array `[len(sentences), dim]`, row i for `sentences[i]`.
        sentences: list of str (e.g. `pair_sentences(pairs)`).
        pairs: list of (s1, s2, score).
    """
    index = {s: i for i, s in enumerate(sentences)}
    vectors = np.asarray(vectors)
    a = vectors[[index[p[0]] for p in pairs]]
    b = vectors[[index[p[1]] for p in pairs]]
    gold = np.array([p[2] for p in pairs], dtype=np.float64)
    return float(spearmanr(cosine_scores(a, b), gold).correlation * 100)


def _step(model):
    return int(model.optimizer.iterations.numpy()) if model.optimizer is not None else 0


def _atomic_write(path, write):
    tmp = f"{path}.tmp"
    write(tmp)
    os.replace(tmp, path)


class DevSelection(keras.callbacks.Callback):
    """Scores the trainer's candidates on a dev set during training; keeps the best.

    Every `every` optimizer steps, before training and at its end, each
    candidate of `trainer.candidates()` (an encoder, CT's two towers, or a
    whole multitask model) is scored by `evaluate(name, candidate)`. The
    best score is written to the logs as `monitor` (so `EarlyStopping`,
    `TensorBoard` and `ModelCheckpoint` can use it) and every candidate's as
    `{monitor}_{name}`. With `restore_best=True` the weights of the best
    candidate at its best evaluation (the starting weights included) are put
    back at the end and `trainer.select(name)` makes it the kept one; like
    `EarlyStopping(restore_best_weights=True)` with the start counted.

    With `state_dir` (the fit scaffold passes the folder of a
    `BackupAndRestore` callback) the history and the best weights are saved
    there at each evaluation, so a resumed run continues the selection
    instead of forgetting the best checkpoint of its first attempt.

    Args:
        evaluate: callable `(name, candidate) -> float`, higher is better.
        every: int. Evaluate every this many steps. Defaults to `100`.
        monitor: str. The log key. Defaults to `"dev_score"`.
        restore_best: bool. Restore and select the best candidate at the
            end; `False` only records the scores. Defaults to `True`.
        patience: int or None. Stop after this many evaluations without
            improvement. Defaults to `None` (never).
        min_delta: float. Improvement needed to count. Defaults to `0.0`.
        evaluate_at_start: bool. Score the starting weights too. Defaults to
            `True`.
        state_dir: str or None. Where to keep the selection state for a
            resumed run. Defaults to `None`.
        state_name: str. The state files' name in `state_dir` (two
            selections of one run keep theirs apart). Defaults to
            `"sentemb_dev_selection"`.
    """
    def __init__(
        self,
        evaluate,
        every=100,
        monitor="dev_score",
        restore_best=True,
        patience=None,
        min_delta=0.0,
        evaluate_at_start=True,
        state_dir=None,
        state_name=SELECTION_NAME,
    ):
        super().__init__()

        self.evaluate_fn = evaluate
        self.every = validation.positive_int(every, "every")
        self.monitor = monitor
        self.restore_best = bool(restore_best)
        self.patience = validation.optional_positive_int(patience, "patience")
        self.min_delta = validation.non_negative_float(min_delta, "min_delta")
        self.evaluate_at_start = bool(evaluate_at_start)
        self.state_dir = state_dir
        self.state_name = state_name
        self.resume_step = 0
        self.history = []  # (step, {name: score})
        self.best_score = -math.inf
        self.best_name = None
        self.best_step = None
        self._best_weights = None
        self._wait = 0

    # ---------------------------------------------------------------- state
    def _state_paths(self):
        return (
            os.path.join(self.state_dir, f"{self.state_name}.json"),
            os.path.join(self.state_dir, f"{self.state_name}_best.npz"),
        )

    def _save_state(self):
        if not self.state_dir:
            return
        os.makedirs(self.state_dir, exist_ok=True)
        state_path, weights_path = self._state_paths()
        if self._best_weights is not None:

            def write_weights(p):
                with open(p, "wb") as f:
                    np.savez(f, *self._best_weights)

            _atomic_write(weights_path, write_weights)
        state = {
            "history": self.history,
            "best_score": self.best_score if self.best_name else None,
            "best_name": self.best_name,
            "best_step": self.best_step,
            "wait": self._wait,
        }

        def write(p):
            with open(p, "w", encoding="utf-8") as f:
                json.dump(state, f)

        _atomic_write(state_path, write)

    def _load_state(self):
        """Reload the selection of an interrupted run (steps <= resume_step)."""
        state_path, weights_path = self._state_paths()
        if not os.path.isfile(state_path):
            return False
        with open(state_path, encoding="utf-8") as f:
            state = json.load(f)
        self.history = [
            (int(step), dict(scores))
            for step, scores in state["history"]
            if int(step) <= self.resume_step
        ]
        if state["best_name"] is not None and state["best_step"] <= self.resume_step:
            self.best_name = state["best_name"]
            self.best_step = int(state["best_step"])
            self.best_score = float(state["best_score"])
            self._wait = int(state.get("wait", 0))
            if self.restore_best and os.path.isfile(weights_path):
                check_npz(weights_path)  # arrays only, never a pickle
                with np.load(weights_path) as data:
                    self._best_weights = [data[f"arr_{i}"] for i in range(len(data.files))]
        logger.info(
            "resumed the dev selection at step %d (best so far: %s at step %s)",
            self.resume_step, self.best_name, self.best_step,
        )
        return True

    # ----------------------------------------------------------- evaluating
    def _evaluate(self, logs=None):
        step = _step(self.model)
        if self.history and self.history[-1][0] == step:
            return
        candidates = self.model.candidates()
        scores = {name: float(self.evaluate_fn(name, c)) for name, c in candidates.items()}
        self.history.append((step, scores))
        name = max(scores, key=scores.get)
        logger.info("step %d: %s %s", step, self.monitor,
                    {k: round(v, 2) for k, v in scores.items()})
        if scores[name] > self.best_score + self.min_delta:
            self.best_score, self.best_name, self.best_step = scores[name], name, step
            if self.restore_best:
                self._best_weights = [np.array(w) for w in candidates[name].get_weights()]
            self._wait = 0
        else:
            self._wait += 1
            if self.patience is not None and self._wait >= self.patience:
                logger.info("no dev improvement in %d evaluations: stopping", self._wait)
                self.model.stop_training = True
        if logs is not None:
            logs[self.monitor] = scores[name]
            for n, s in scores.items():
                logs[f"{self.monitor}_{n}"] = s
        self._save_state()

    def on_train_begin(self, logs=None):
        resumed = self.resume_step > 0 and self.state_dir and self._load_state()
        if self.evaluate_at_start and not resumed:
            self._evaluate()

    def on_train_batch_end(self, batch, logs=None):
        if _step(self.model) % self.every == 0:
            self._evaluate(logs)

    def on_epoch_end(self, epoch, logs=None):
        if self.history and logs is not None:
            logs[self.monitor] = max(self.history[-1][1].values())

    def on_train_end(self, logs=None):
        self._evaluate()
        if not self.restore_best:
            return
        if self._best_weights is not None:
            self.model.candidates()[self.best_name].set_weights(self._best_weights)
        if self.best_name is not None:
            self.model.select(self.best_name)
            logger.info(
                "kept %s from step %d (%s %.2f)",
                self.best_name, self.best_step, self.monitor, self.best_score,
            )

    def summary(self):
        """The selection as a dict (for the training report)."""
        return {
            "monitor": self.monitor,
            "every": self.every,
            "kept": self.best_name,
            "kept_step": self.best_step,
            "kept_score": None if self.best_name is None else round(self.best_score, 4),
            "history": [(s, {k: round(v, 4) for k, v in d.items()}) for s, d in self.history],
        }


class STSDevEvaluation(DevSelection):
    """`DevSelection` by Spearman x100 of cosine similarity on STS dev pairs.

    Each candidate encoder encodes the dev sentences with `pooling` (the
    pooling the kept encoder will encode with).

    Args:
        pairs: list of (sentence1, sentence2, score). The dev set.
        every: int. Evaluate every this many steps. Defaults to `100`.
        pooling: str or None. Defaults to each encoder's own.
        monitor: str. Defaults to `"sts_dev_spearman"`.
        **kwargs: see `DevSelection`.
    """
    def __init__(self, pairs, every=100, pooling=None, monitor="sts_dev_spearman",
                 batch_size=128, **kwargs):
        if not pairs:
            raise ValueError("STSDevEvaluation needs a non-empty list of dev pairs.")
        self.pairs = list(pairs)
        self.pooling = pooling
        super().__init__(
            lambda name, encoder: sts_spearman(encoder, self.pairs, batch_size, pooling),
            every=every, monitor=monitor, **kwargs,
        )


class PooledEncoder:
    """An encoder seen through one pooling: `encode(texts, ...)` with `pooling` fixed.

    During training the trainer's encoder may still hold its starting
    pooling (the plan's is set on the kept encoder at the end); the dev
    evaluations encode with the pooling the kept encoder will have.
    """

    def __init__(self, encoder, pooling=None):
        self.encoder = encoder
        self.pooling = pooling

    def encode(self, sentences, **kwargs):
        if self.pooling is not None:
            kwargs.setdefault("pooling", self.pooling)
        return self.encoder.encode(sentences, **kwargs)


def retrieval_ndcg(candidate, data, batch_size=128, pooling=None):
    """nDCG@10 x100 of `candidate` on a `BeirData`, exactly as `evaluate_retrieval` scores it.

    Args:
        candidate: a `SentenceEncoder` (encoded with `pooling`), anything
            with `encode(sentences, batch_size=..., show_progress=...)`, or
            a callable on a list of strings (see `evaluate_retrieval`).
        data: `BeirData` (see `keras_sentemb.pipelines.plan.resolve_dev_retrieval`).
        batch_size: int. Encoding batch size. Defaults to `128`.
        pooling: str or None. Pooling of a `SentenceEncoder` candidate.
            Defaults to its own.
    """
    from keras_sentemb.evaluation.beir import evaluate_retrieval
    from keras_sentemb.models import SentenceEncoder

    if isinstance(candidate, SentenceEncoder):
        candidate = PooledEncoder(candidate, pooling)
    result = evaluate_retrieval(candidate, data, batch_size=batch_size, show_progress=False)
    return float(result["ndcg@10"])


class BeirDevEvaluation(DevSelection):
    """`DevSelection` by nDCG@10 (x100) on a BEIR-layout retrieval dev set.

    Every `every` optimizer steps (and before and at the end of training)
    each candidate encodes the dev queries and documents and is scored as
    `keras_sentemb.evaluate_retrieval` scores it (exact cosine search,
    trec_eval's nDCG@10 through pytrec_eval, a document whose id is the
    query's not counted). The score is logged as `monitor`; with
    `restore_best=True` the best weights are kept, as `STSDevEvaluation`
    keeps them.

    Args:
        data: `BeirData` or a BEIR folder (read as `dev_retrieval` reads
            one: `qrels/dev.tsv`, else `qrels/test.tsv`).
        every: int. Evaluate every this many steps. Defaults to `100`.
        pooling: str or None. Pooling of encoder candidates. Defaults to
            each encoder's own.
        monitor: str. Defaults to `"retrieval_dev_ndcg_at_10"`.
        batch_size: int. Encoding batch size. Defaults to `128`.
        score: callable `(name, candidate) -> float` or None. Scores a
            candidate that is not an encoder (e.g. a post-processing layer
            over precomputed vectors). Defaults to `retrieval_ndcg`.
        **kwargs: see `DevSelection`.

    Examples:

    ```python
    from keras_sentemb.pipelines.callbacks import BeirDevEvaluation

    dev = BeirDevEvaluation("quora-dev-small", every=50)
    trainer.fit(dataset, epochs=4, steps_per_epoch=50, callbacks=[dev])
    dev.summary()["kept_score"]  # the best nDCG@10 (x100)
    ```
    """
    def __init__(self, data, every=100, pooling=None, monitor="retrieval_dev_ndcg_at_10",
                 batch_size=128, score=None, **kwargs):
        from keras_sentemb.evaluation.beir import BeirData
        from keras_sentemb.pipelines.plan import resolve_dev_retrieval

        if not isinstance(data, BeirData):
            data = resolve_dev_retrieval(data)
            if data is None:
                raise ValueError("BeirDevEvaluation needs a BEIR folder or BeirData.")
        self.data = data
        self.pooling = pooling
        if score is None:
            def score(name, candidate):
                return retrieval_ndcg(candidate, self.data, batch_size, self.pooling)
        kwargs.setdefault("state_name", RETRIEVAL_SELECTION_NAME)
        super().__init__(score, every=every, monitor=monitor, **kwargs)


class StopAtStep(keras.callbacks.Callback):
    """Ends `fit` once the optimizer has made `steps` updates.

    The scaffold trains in epochs of `eval_every` steps (the granularity of
    `BackupAndRestore`); this callback makes the last epoch short, so `steps`
    means exactly that many optimizer steps.
    """
    def __init__(self, steps):
        super().__init__()
        self.steps = int(steps)

    def on_train_batch_end(self, batch, logs=None):
        if _step(self.model) >= self.steps:
            self.model.stop_training = True


class SkippedRowsCheck(keras.callbacks.Callback):
    """Stops training with one line once a streamed source skips more than its share of rows.

    Every epoch (`eval_every` steps) it reads the run's row counters (see
    `keras_sentemb.data.row_accounting`) and raises the `DataError` of
    `Accounting.check` for a source that has read `MIN_ROWS_TO_JUDGE` rows
    and skipped more than `max_skipped` of them; the run's end checks every
    source whatever it read. It runs before the dev evaluation and backups
    of that epoch.

    Args:
        accounting: `Accounting`. The counters of the run's streams.
    """
    def __init__(self, accounting):
        super().__init__()
        self.accounting = accounting

    def on_epoch_end(self, epoch, logs=None):
        self.accounting.check(final=False)


class NonFiniteGuard(keras.callbacks.Callback):
    """Stops training at the first step whose loss or gradients were not finite.

    The trainers skip such a step (`apply_if_finite`: weights and optimizer
    state untouched, on every replica), so the weights are the last finite
    ones; this callback ends `fit` and records the step.
    """
    def __init__(self):
        super().__init__()
        self.stopped_at = None

    def on_train_batch_end(self, batch, logs=None):
        if logs and float(logs.get("nonfinite", 0.0)) > 0:
            self.stopped_at = _step(self.model)
            logger.warning(
                "Non-finite loss or gradients at step %d: training stopped, "
                "weights kept from the last finite step.", self.stopped_at,
            )
            self.model.stop_training = True


class LossHistory(keras.callbacks.Callback):
    """Records the training loss at the end of every epoch, by optimizer step.

    The fit scaffold trains in epochs of `eval_every` steps, so each entry is
    the mean loss Keras reports over those steps (the last, short epoch of a
    stopped run included): `history` is a list of `[step, loss]`, the data
    of the loss curve in the training report.

    With `state_dir` (the fit scaffold passes the folder of a
    `BackupAndRestore` callback) the history is saved there at each epoch
    end, and a run resumed at `resume_step` keeps the entries of its first
    attempt up to that step.

    Args:
        state_dir: str or None. Where to keep the history for a resumed
            run. Defaults to `None` (kept in memory only).
        resume_step: int. The step a resumed run starts from. Defaults to
            `0`.

    Examples:

    ```python
    losses = LossHistory()
    trainer.fit(dataset, epochs=3, steps_per_epoch=50, callbacks=[losses])
    losses.history  # [[50, 2.31], [100, 1.87], [150, 1.52]]
    ```
    """
    def __init__(self, state_dir=None, resume_step=0):
        super().__init__()
        self.state_dir = state_dir
        self.resume_step = int(resume_step)
        self.history = []

    def _state_path(self):
        return os.path.join(self.state_dir, LOSS_STATE) if self.state_dir else None

    def on_train_begin(self, logs=None):
        path = self._state_path()
        if self.resume_step > 0 and path and os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                saved = json.load(f)
            self.history = [entry for entry in saved if entry[0] <= self.resume_step]

    def on_epoch_end(self, epoch, logs=None):
        if not logs or "loss" not in logs:
            return
        loss = float(logs["loss"])
        self.history.append([_step(self.model), round(loss, 6) if math.isfinite(loss) else None])
        path = self._state_path()
        if path:
            os.makedirs(self.state_dir, exist_ok=True)

            def write(p):
                with open(p, "w", encoding="utf-8") as f:
                    json.dump(self.history, f)

            _atomic_write(path, write)
