"""BERT-whitening fitted on a corpus, saved with the encoder: `fit_whitening`."""

import logging
import math

from keras_sentemb.methods.method import DEV_RETRIEVAL
from keras_sentemb.methods.method import STREAMED
from keras_sentemb.methods.method import Method
from keras_sentemb.methods.registry import register_method
from keras_sentemb.methods.runner import fit_function
from keras_sentemb.methods.whitening.config import WhiteningConfig
from keras_sentemb.methods.whitening.config import parse_dims
from keras_sentemb.models.whitening import Whitening as WhiteningLayer
from keras_sentemb.pipelines._frozen_encoder import DevRetrievalVectors
from keras_sentemb.pipelines._frozen_encoder import DevVectors
from keras_sentemb.pipelines._frozen_encoder import FittingData
from keras_sentemb.pipelines._frozen_encoder import load_frozen_encoder

logger = logging.getLogger(__name__)


@register_method("whitening")
class WhiteningMethod(Method):
    """Fits BERT-whitening on a corpus's sentence vectors and attaches it to the encoder.

    The frozen encoder encodes the sentences of `data` with the run's
    pooling; the mean and the whitening kernel `U diag(1/sqrt(s))` of their
    covariance (Su et al., 2021) become a `Whitening` layer, saved with the
    encoder and run inside `encode`, evaluation and the exported SavedModel
    (output size `dim`). Nothing is trained: the fit is closed-form.

    Pooling (`"auto"`): the model's own when it declares one, else the
    paper's first-last average (`"first_last"`). With several candidate
    sizes (`dim=[128, 256, None]` or `"128,256,all"`) the one with the best
    STS-B dev Spearman is kept; every candidate's dev score, and the score
    without whitening, are in the training report.

    The common arguments of every `fit_*` mean here:

    Examples:

    ```python
    encoder = keras_sentemb.fit_whitening("wiki100k.txt", model="default", dim=256)
    encoder.encode(["A man is playing a guitar."]).shape   # (1, 256)
    ```

    References:
        - [Su et al., 2021. Whitening Sentence Representations for Better
          Semantics and Faster Retrieval](https://arxiv.org/abs/2103.15316)
    """

    config_class = WhiteningConfig
    paper_pooling = "first_last"
    run_defaults = {"batch_size": 128, "eval_every": 1, "seed": None}
    optional = DEV_RETRIEVAL + STREAMED
    run_docs = {
        "model": (
            "The encoder (see the shared `model`); a model that already has a "
            "post-processing layer has it replaced."
        ),
        "steps": (
            "Encoding batches of `batch_size` sentences to fit on "
            "(the first `steps * batch_size` sentences or vectors); `None` = "
            "all."
        ),
        "batch_size": "Sentences per encoding batch.",
        "learning_rate": "Nothing is trained; any value but None is an error.",
        "eval_every": "Not used (no training steps).",
        "callbacks": (
            "Not used (nothing to resume; the command line passes"
            " its backup callback)."
        ),
        "seed": "Not used (the fit is deterministic).",
        "verbose": (
            'Progress bar of the encoding: `"auto"` (for 5,000 sentences or '
            "more), 0 or 1."
        ),
        "strategy": (
            "`tf.distribute.Strategy` or None. The scope the encoder is loaded "
            "in; encoding is not distributed."
        ),
    }
    data_doc = ("list of str, a text file (one sentence per line), a glob or list of files, "
                "`keras_sentemb.streamed(...)`, a `tf.data.Dataset` of strings or a TFDS name "
                "(streams are read once, in constant memory: the mean and covariance are "
                "accumulated batch by batch); or the sentences' precomputed vectors (a float "
                "array `[n, d]` or a `.npy` file, e.g. from `keras-sentemb encode` with the same "
                "model and pooling).")

    def train(self, run, data, config):
        if run.config.learning_rate is not None:
            raise ValueError(
                "fit_whitening trains nothing and takes no learning rate; received "
                f"{run.config.learning_rate!r}."
            )
        dims = parse_dims(config.dim)
        if len(dims) > 1 and run.dev_pairs is None and run.dev_retrieval_data is None:
            raise ValueError(f"Choosing `dim` among {dims} needs a dev set; `dev` is None.")
        steps = run.config.steps
        source = FittingData(data, None if steps is None else steps * run.batch_size)
        with run.scope():
            # No training steps: one pass over the data (a stream of unknown size too); the
            # plan's step count is replaced below by the batches read.
            encoder, plan = load_frozen_encoder(
                run, examples=run.batch_size if source.count is None else source.count)
        # One pass over the vectors: their mean and covariance, batch by batch.
        moments = source.moments(run, plan, encoder, run.batch_size, run.verbose)
        run.record_data(**source.describe())
        # Whitening reads each vector batch once, the last one partial.
        run.report.resolved["steps"] = math.ceil(moments.count / run.batch_size)
        candidates = {d: WhiteningLayer.from_moments(moments, d, pooling=plan.pooling)
                      for d in dims}
        extras = {"fitted_on": {"vectors": moments.count, "input_dim": int(moments.mean.shape[0])}}
        kept = dims[0]
        if run.dev_pairs is not None or run.dev_retrieval_data is not None:
            kept = _select_on_dev(run, plan, encoder, candidates, extras)
        run.report.resolved["dim"] = candidates[kept].output_dim
        encoder.postprocess = candidates[kept]
        return run.finish(encoder, plan, extras=extras)


def _select_on_dev(run, plan, encoder, candidates, extras):
    """The candidate size with the best dev score; records every candidate's score.

    With both dev sets (`dev`, `dev_retrieval`) each candidate gets both
    scores and `dev_select` names the one that chooses.
    """
    dims = list(candidates)
    label = lambda d: f"dim={d or candidates[d].output_dim}"  # noqa: E731
    summaries = {}
    if run.dev_pairs is not None:
        dev_set = DevVectors(run, plan, encoder, run.batch_size)
        scores = {d: dev_set.spearman(layer) for d, layer in candidates.items()}
        extras["dev_spearman_without_whitening"] = round(dev_set.spearman(), 4)
        summaries["dev"] = ("sts_dev_spearman", scores)
    if run.dev_retrieval_data is not None:
        retrieval_set = DevRetrievalVectors(run, plan, encoder, run.batch_size)
        scores = {d: retrieval_set.ndcg(layer) for d, layer in candidates.items()}
        extras["dev_retrieval_ndcg_at_10_without_whitening"] = round(retrieval_set.ndcg(), 4)
        summaries["retrieval"] = ("retrieval_dev_ndcg_at_10", scores)
    chooser = run.dev_select if run.dev_select in summaries else next(iter(summaries))

    def summary(monitor, scores, kept):
        return {"monitor": monitor, "every": None, "kept": label(kept), "kept_step": 0,
                "kept_score": round(scores[kept], 4),
                "history": [(0, {label(d): round(v, 4) for d, v in scores.items()})]}

    monitor, scores = summaries[chooser]
    kept = max(dims, key=lambda d: scores[d])
    selection = summary(monitor, scores, kept)
    for other, (other_monitor, other_scores) in summaries.items():
        if other != chooser:
            selection["also_scored"] = summary(other_monitor, other_scores,
                                               max(dims, key=lambda d: other_scores[d]))
    run.record_selection(selection)
    logger.info("whitening: %s %s; kept %s", monitor,
                {label(d): round(v, 2) for d, v in scores.items()}, label(kept))
    return kept


# The `fit_*` function: its signature and docstring are the method's.
fit_whitening = fit_function("whitening", "fit_whitening")
