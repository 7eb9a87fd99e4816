"""Contrastive Tension from raw text: `fit_ct`."""

from keras_sentemb.data.batching import tokenize_columns
from keras_sentemb.data.ct_sampler import ct_pair_dataset
from keras_sentemb.data.stream_batches import ct_stream_batches
from keras_sentemb.data.stream_batches import worker_shard
from keras_sentemb.methods.method import ALL_OPTIONAL
from keras_sentemb.methods.method import Method
from keras_sentemb.methods.registry import register_method
from keras_sentemb.methods.runner import fit_function
from keras_sentemb.pipelines.callbacks import sts_spearman
from keras_sentemb.pipelines.schedules import ct_learning_rate_schedule
from keras_sentemb.trainers import optimizers
from keras_sentemb.methods.contrastive_tension.config import ContrastiveTensionConfig
from keras_sentemb.methods.contrastive_tension.config import LEARNING_RATES
from keras_sentemb.methods.contrastive_tension.config import PAPER_POOLING
from keras_sentemb.methods.contrastive_tension.config import PRESETS
from keras_sentemb.methods.contrastive_tension.config import parse_negatives
from keras_sentemb.methods.contrastive_tension.trainer import ContrastiveTension as CTTrainer
from keras_sentemb.trainers.torch_adamw import TorchAdamW

@register_method("ct")
class ContrastiveTensionMethod(Method):
    """Train a sentence encoder with Contrastive Tension; return it.

    Two towers start from `model`; batches follow CT's layout (see
    `keras_sentemb.data.ct_sampler`), sampled uniformly from the whole
    corpus. With `keep="best"` (the default) both towers are scored on the
    dev set every `eval_every` steps and the best one at its best step is
    kept — the starting weights included, so the returned encoder is never
    worse on dev than the model you started from. `keep="tower1"` or
    `"tower2"` is the paper's protocol: that tower after exactly `steps`
    steps (the dev scores, if any, are only recorded; pass `dev=None` for no
    validation data at all). `keep="worst"` is the paper's reporting rule
    (section 5: "we strictly perform 50,000 update steps before evaluating,
    and ... report results for the worst-performing of the two models"):
    exactly `steps` steps with no evaluation during training, then both
    towers are scored once (by `tower_score`, else on `dev`) and the
    lower-scoring one is kept.

    The defaults are the paper's (`negatives="k7"`, dot-product logits,
    RMSprop with the step schedule from 1e-5, batch 16, max length 75,
    dropout off, mean pooling), with the model's own pooling when it
    declares one. The returned encoder's `.training_report` holds the dev
    history and the kept tower (with `keep="worst"`, both towers' scores in
    `extras["tower_scores"]`).

    Examples:

    ```python
    encoder = keras_sentemb.fit_ct("sentences.txt", steps=400)
    encoder.encode(["A sentence."])
    ```

    References:
        - [Carlsson et al., 2021](https://openreview.net/forum?id=Ov_sMNau-PF)
    """

    config_class = ContrastiveTensionConfig
    paper_pooling = PAPER_POOLING
    in_batch = True
    parallel_passes = True
    optional = ALL_OPTIONAL
    run_defaults = {"steps": 500, "batch_size": 16, "max_length": 75}
    run_docs = {
        "batch_size": "Rows per batch (a multiple of K + 1 for `kN`).",
        "learning_rate": (
            f"First-stage learning rate. Defaults to `{LEARNING_RATES['kN']}` "
            f"(`kN`, RMSprop, CT's step schedule) or `{LEARNING_RATES['in_batch']}` "
            "(`in_batch`, AdamW)."
        ),
    }
    data_doc = ("list of str, a text file (one sentence per line), a `tf.data.Dataset` of "
                "strings, or a TFDS dataset name; a glob of files, `keras_sentemb.streamed(...)` "
                "or a `Mixture` is streamed (see the large-corpora guide).")

    presets = PRESETS

    def train(self, run, data, config):
        keep, tower_score = config.keep, config.tower_score
        if tower_score is not None and keep != "worst":
            raise ValueError(
                "`tower_score` must be a callable `encoder -> score` and ranks the towers for "
                f"keep='worst' only; received tower_score={tower_score!r}, keep={keep!r}."
            )
        if keep == "worst" and tower_score is None and run.dev_pairs is None:
            raise ValueError(
                "keep='worst' ranks the two towers after training on `dev` (or `tower_score`); "
                "received dev=None."
            )
        mode, k = parse_negatives(config.negatives)
        sentences, stream, n = run.read_sentences(data)
        with run.scope():
            encoder = run.load_encoder()
            plan = run.plan(encoder, examples=n, learning_rate=LEARNING_RATES[
                "in_batch" if mode == "in_batch" else "kN"])
            trainer = CTTrainer(
                encoder, negatives=config.negatives, logits=config.logits,
                dropout=config.dropout, pooling=plan.pooling,
                mini_batch_size=run.mini_batch_size,
            )
            lr = plan.learning_rate
            schedule = lr if mode == "in_batch" else ct_learning_rate_schedule(lr)
            trainer.compile(optimizer=run.clipped(
                _optimizer(config.optimizer, schedule, mode == "in_batch")))

        def make_dataset(start_step):
            if stream is None:
                ds = ct_pair_dataset(sentences, run.batch_size, k, seed=run.seed,
                                     start_step=start_step, layout=config.negatives_layout)
            else:  # each group's sentences from the shuffled stream
                ds = ct_stream_batches(stream, run.batch_size, k, seed=run.seed,
                                       start_step=start_step, layout=config.negatives_layout,
                                       workers=worker_shard(run.strategy))
            return tokenize_columns(encoder, ds, ["left", "right"], plan.max_length)

        extras = {}
        if keep == "worst":
            run.fit(trainer, make_dataset, plan, dev_pairs=None, keep_best=False)
            extras["tower_scores"] = _tower_scores(trainer, run, plan, tower_score)
            trainer.select(min(extras["tower_scores"], key=extras["tower_scores"].get))
        else:
            run.fit(trainer, make_dataset, plan, keep_best=keep == "best")
            if keep != "best":
                trainer.select(keep)
        extras["kept_tower"] = _kept_tower(trainer)
        return run.finish(trainer.encoder, plan, extras=extras)


def _optimizer(name, schedule, in_batch):
    """The optimizer of the run: `name` (a name or an optimizer), else CT's own."""
    if name is None:
        if in_batch:
            return TorchAdamW(learning_rate=schedule, weight_decay=0.01)
        return optimizers.RMSprop(learning_rate=schedule)
    return optimizers.get(name, learning_rate=schedule)


def _tower_scores(trainer, run, plan, scorer):
    """Each tower's score after training: `scorer(tower)`, else STS Spearman on the dev pairs."""
    scores = {}
    for name, tower in trainer.candidates().items():
        tower.pooling = plan.pooling
        if scorer is not None:
            scores[name] = float(scorer(tower))
        else:
            scores[name] = sts_spearman(tower, run.dev_pairs, pooling=plan.pooling)
    return scores


def _kept_tower(trainer):
    return next(name for name, enc in trainer.candidates().items() if enc is trainer.encoder)


# The literal signature, for editors: `fit_function` checks it against the method's
# config and run defaults, and makes the function (its docstring is the method's).
def fit_ct(data, model="default", steps=500, batch_size=16, learning_rate=None, max_length=75,
           pooling="auto", dev="stsb", eval_every=100, output=None, strategy=None,
           callbacks=None, seed=0, verbose="auto", negatives="k7", logits="dot", keep="best",
           dropout=False, optimizer=None, negatives_layout="official", tower_score=None,
           precision="auto", mini_batch_size=None, matryoshka_dims=None, max_grad_norm=None,
           matryoshka_weights=None,
           dev_retrieval=None, dev_select="auto", max_skipped=0.01, preset=None):
    ...


fit_ct = fit_function("ct", fit_ct)
