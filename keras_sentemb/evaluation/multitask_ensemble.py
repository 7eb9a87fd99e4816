"""`MultitaskEnsemble`: the best model per task behind one predict surface."""

from keras_sentemb.data.multitask import TASKS
from keras_sentemb.evaluation.multitask import TASK_METRICS
from keras_sentemb.evaluation.multitask import evaluate_multitask


class MultitaskEnsemble:
    """Combine the best model per task (the report's ensemble).

    Each `predict_*` call is answered by the model chosen for that task, so
    the ensemble scores, on every task, what its best model scores. Models
    are anything with the `MultitaskModel` predict surface.

    Args:
        models: dict `{task: model}` with the three tasks
            (`"sentiment"`, `"paraphrase"`, `"similarity"`).

    Examples:

    ```python
    ensemble = MultitaskEnsemble.from_candidates(
        {"average": m1, "pcgrad": m2, "round_robin": m3}, dev)
    ensemble.predict_similarity(["a"], ["b"])
    ```

    References:
        - Contrastive Learning for Generalizable Sentence Embeddings
          (Stanford CS224N default-project report).
    """

    def __init__(self, models):
        missing = [t for t in TASKS if t not in models]
        if missing or set(models) - set(TASKS):
            raise ValueError(
                f"`models` must map exactly the tasks {TASKS} to models; "
                f"received keys {sorted(models)}"
            )
        self.models = dict(models)
        self.chosen = {}

    @classmethod
    def from_candidates(cls, candidates, dev, limit=None):
        """Pick, per task, the candidate with the best dev metric.

        Args:
            candidates: dict `{name: model}` (or a list of models).
            dev: dict `{task: examples}` (see `load_multitask_data`).
            limit: int or None. See `evaluate_multitask`.

        Returns:
            A `MultitaskEnsemble`; `.chosen` maps each task to the chosen
            candidate's name and `.candidate_metrics` holds every candidate's
            dev metrics.
        """
        if not isinstance(candidates, dict):
            candidates = {str(i): m for i, m in enumerate(candidates)}
        if not candidates:
            raise ValueError("`candidates` is empty; expected at least one model.")
        metrics = {
            name: evaluate_multitask(m, dev, limit=limit)
            for name, m in candidates.items()
        }
        return cls.from_metrics(candidates, metrics)

    @classmethod
    def from_metrics(cls, candidates, metrics):
        """Pick the best candidate per task from precomputed dev metrics."""
        chosen = {
            task: max(metrics, key=lambda n: metrics[n][TASK_METRICS[task]])
            for task in TASKS
        }
        ensemble = cls({t: candidates[n] for t, n in chosen.items()})
        ensemble.chosen = chosen
        ensemble.candidate_metrics = metrics
        return ensemble

    def predict_sentiment(self, sentences, **kwargs):
        return self.models["sentiment"].predict_sentiment(sentences, **kwargs)

    def predict_paraphrase(self, sentences1, sentences2, **kwargs):
        return self.models["paraphrase"].predict_paraphrase(
            sentences1, sentences2, **kwargs
        )

    def predict_similarity(self, sentences1, sentences2, **kwargs):
        return self.models["similarity"].predict_similarity(
            sentences1, sentences2, **kwargs
        )
