"""Dev metrics of the three multitask heads (sentiment, paraphrase, similarity)."""

import numpy as np
from scipy.stats import pearsonr

TASK_METRICS = {
    "sentiment": "sentiment_acc",
    "paraphrase": "paraphrase_acc",
    "similarity": "similarity_pearson",
}


def evaluate_multitask(model, dev, limit=None, batch_size=128, max_length=None):
    """Dev metrics: sentiment accuracy, paraphrase accuracy, similarity Pearson.

    `overall` is the plain mean of the three. `model` is a `MultitaskModel`
    or anything with the `predict_*` surface (e.g. `MultitaskEnsemble`).

    Args:
        model: the model.
        dev: dict `{task: examples}` (see `load_multitask_data`).
        limit: int or None. Use only the first `limit` examples of each task
            (for quick checks; say so when reporting). Defaults to `None`.
        batch_size: int. Defaults to `128`.
        max_length: int or None. Token limit; defaults to the encoder's own.

    Returns:
        dict with `sentiment_acc`, `paraphrase_acc`, `similarity_pearson`
        and `overall`.
    """
    def take(task):
        rows = dev[task]
        return rows[:limit] if limit else rows

    kwargs = {"batch_size": batch_size}
    if max_length is not None:
        kwargs["max_length"] = max_length
    out = {}
    rows = take("sentiment")
    pred = model.predict_sentiment([r[0] for r in rows], **kwargs)
    out["sentiment_acc"] = float(np.mean(pred == np.array([r[1] for r in rows])))
    rows = take("paraphrase")
    prob = model.predict_paraphrase([r[0] for r in rows], [r[1] for r in rows], **kwargs)
    out["paraphrase_acc"] = float(
        np.mean((prob >= 0.5) == (np.array([r[2] for r in rows]) >= 0.5))
    )
    rows = take("similarity")
    scores = model.predict_similarity([r[0] for r in rows], [r[1] for r in rows], **kwargs)
    out["similarity_pearson"] = float(pearsonr(scores, [r[2] for r in rows])[0])
    out["overall"] = float(np.mean([out[m] for m in TASK_METRICS.values()]))
    return out
