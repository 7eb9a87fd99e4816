"""ConSERT's unsupervised, supervised and two-stage recipes: `fit_consert`."""

import logging

import tensorflow as tf

from keras_sentemb.data.labeled_streams import PAIR_COLUMNS
from keras_sentemb.data.labeled_streams import as_labeled_pairs
from keras_sentemb.data.labeled_streams import check_rows
from keras_sentemb.data.labeled_streams import class_labels
from keras_sentemb.data.labeled_streams import ordered_rows
from keras_sentemb.data.labeled_streams import supervised_kind
from keras_sentemb.data.nli import load_supervised
from keras_sentemb.data.nli import triplets_to_nli_pairs
from keras_sentemb.data.stream_batches import as_stream
from keras_sentemb.methods.method import ALL_OPTIONAL
from keras_sentemb.methods.method import Method
from keras_sentemb.methods.registry import register_method
from keras_sentemb.methods.runner import fit_function
from keras_sentemb.pipelines.callbacks import STSDevEvaluation
from keras_sentemb.pipelines.schedules import adamw_linear_decay
from keras_sentemb.methods.consert.config import ADVERSARIAL
from keras_sentemb.methods.consert.config import ConSERTConfig
from keras_sentemb.methods.consert.config import LABEL_SAMPLE
from keras_sentemb.methods.consert.config import PAPER_POOLING
from keras_sentemb.methods.consert.config import PRESETS
from keras_sentemb.methods.consert.config import UNSUP_VIEWS
from keras_sentemb.methods.consert.config import parse_views
from keras_sentemb.methods.consert.trainer import ConSERT as ConSERTTrainer

logger = logging.getLogger(__name__)

@register_method("consert")
class ConSERTMethod(Method):
    """Trains a sentence encoder with ConSERT and returns it.

    Unsupervised (default): the sentences of `data` — ideally the unlabeled
    texts of the target domain — seen through two views (token shuffle +
    feature cutoff 0.2), NT-Xent at temperature 0.1, the encoder's dropout
    off, batch 96, learning rate 5e-7 with 10% linear warm-up, 10 epochs with
    the dev set scored every 200 steps and training stopped after 10
    evaluations without improvement (ConSERT's main unsupervised setting,
    `scripts/unsup-consert-base.sh`), mean pooling of the last layer (the
    paper's training pooling; the model's own when it declares one). The
    paper reports its tests with the average of the last two layers
    (`pooling="mean_last2"` when encoding; `recipes/consert.py` reports both). Supervised modes read NLI data (a
    `sent0,sent1,hard_neg` CSV is turned into entailment/contradiction
    pairs; a labelled-pair TSV such as the Quora file is used as is):

    - `"sup"`: SBERT-style cross-entropy on `[u, v, |u - v|]` only, on
      `data`;
    - `"joint"`: cross-entropy + `alpha` x NT-Xent, on `data`;
    - `"sup_unsup"` / `"joint_unsup"`: that supervised stage on
      `supervised` (`supervised_steps`, `supervised_learning_rate`), then the
      unsupervised stage on `data`.

    With `dev` (STS-B dev by default), the encoder is scored every
    `eval_every` steps and the best checkpoint (the starting weights
    included) is kept; `dev_pooling="mean_last2"` scores it as the paper
    evaluates (section 4.1: "averaging the token embeddings at the last two
    layers"; "the best checkpoint on the dev set of STSb is saved").

    The views are named as in `keras_sentemb.augment.views`; the dropout
    view comes in two modes: `"dropout"` (inverted Bernoulli dropout of the
    embedding elements) and `"dropout_exact"` (ConSERT's own code: exactly
    `int(rate * tokens * hidden)` elements of each example zeroed, no
    rescaling), e.g. `views="shuffle,dropout_exact"`.

    Examples:

    ```python
    from keras_sentemb.evaluation.readers import read_stsb
    sentences = [s for a, b, _ in read_stsb("STS/STSBenchmark", "train") for s in (a, b)]
    encoder = fit_consert(sentences, steps=200, max_length=40)
    ```

    References:
        - [Yan et al., 2021. ConSERT: A Contrastive Framework for
          Self-Supervised Sentence Representation Transfer](
          https://arxiv.org/abs/2105.11741).
    """

    config_class = ConSERTConfig
    paper_pooling = PAPER_POOLING
    in_batch = True
    parallel_passes = True
    optional = ALL_OPTIONAL
    run_defaults = {"batch_size": 96, "learning_rate": 5e-7, "max_length": 64,
                    "eval_every": 200, "seed": 42, "max_grad_norm": 1.0}
    run_docs = {
        "steps": (
            "Steps of the unsupervised stage (of the only stage in"
            ' `"sup"` / `"joint"`); None is `epochs` epochs.'
        ),
        "learning_rate": "Peak learning rate (ConSERT's unsupervised setting by default).",
    }
    data_doc = ("list of str, text file, `tf.data.Dataset` or TFDS name (the unlabeled "
                "sentences), or, in modes `\"sup\"` / `\"joint\"`, the supervised file or rows. "
                "Both stream (a glob of files, `keras_sentemb.streamed(...)`, a `.jsonl` file, a "
                "`tf.data.Dataset`): supervised rows are `sent0`, `sent1`, `hard_neg` triplets or "
                "`sentence1`, `sentence2`, `label` pairs (see the large-corpora guide).")

    presets = PRESETS

    def train(self, run, data, config):
        mode = config.mode
        views = parse_views(config.views)
        supervised_only = mode in ("sup", "joint")
        if mode in ("sup_unsup", "joint_unsup") and config.supervised is None:
            raise ValueError(
                f"mode={mode!r} needs `supervised` data (NLI triplets or labelled pairs).")
        common = dict(
            view_rates=_parse_rates(config.view_rates), temperature=config.temperature,
            encoder_dropout=config.encoder_dropout, alpha=config.alpha,
            noise_norm=config.noise_norm, seed=run.seed,
        )
        if run.mini_batch_size is not None and mode != "unsup":
            raise ValueError(
                "mini_batch_size (GradCache) serves ConSERT's unsupervised loss only; "
                f"received mode={mode!r}."
            )
        with run.scope():
            encoder = run.load_encoder()
        supervised = sentences = None
        if mode != "unsup":
            supervised = SupervisedData(data if supervised_only else config.supervised)
            run.record_data(**supervised.describe())
        stream = None
        if not supervised_only:
            sentences, stream, n = run.read_sentences(data)
        # The run's steps and learning rate are the last stage's.
        plan = run.plan(encoder, examples=supervised.count if supervised_only else n,
                           epochs=config.epochs)
        common["pooling"] = plan.pooling
        if mode != "unsup":
            trainer = _supervised_stage(run, plan, config, encoder, views, common, supervised)
            encoder = trainer.encoder
        if not supervised_only:
            if ADVERSARIAL in views:
                views = UNSUP_VIEWS
                logger.info("The unsupervised stage uses shuffle + feature_cutoff "
                            "(no adversarial view).")
            with run.scope():
                trainer = ConSERTTrainer(encoder, views=views, mode="unsup",
                                         mini_batch_size=run.mini_batch_size, **common)
            run.compile(trainer, adamw_linear_decay(plan.learning_rate, plan.steps,
                                                    config.warmup_ratio))
            logger.info("ConSERT unsup stage: %s sentences, %d steps",
                        "streamed" if n is None else n, plan.steps)
            if stream is None:
                make_dataset = run.batches(encoder, {"sentence": sentences}, plan)
            else:
                make_dataset = run.stream_batches(encoder, stream, ("sentence",), plan,
                                                  no_duplicates=True)
            run.fit(trainer, make_dataset, plan,
                    stage="unsup", patience=config.patience,
                    selection=_dev_selection(run, config.dev_pooling, config.patience))
        return run.finish(trainer.encoder, plan)


def _supervised_stage(run, plan, config, encoder, views, common, supervised):
    """Trains the `"sup"` / `"joint"` stage on the labelled pairs; returns its trainer."""
    stage = "joint" if config.mode.startswith("joint") else "sup"
    if config.mode in ("sup", "joint"):
        steps, lr = plan.steps, plan.learning_rate
    else:
        steps = config.supervised_steps
        if steps is None and supervised.count is None:
            raise ValueError("`supervised_steps` is needed: the supervised data is streamed and "
                             "its size is not known in advance (pass supervised_steps=N).")
        steps = steps or max(1, supervised.count // run.batch_size)
        lr = config.supervised_learning_rate
    with run.scope():
        trainer = ConSERTTrainer(encoder, views=views, mode=stage,
                                 num_labels=supervised.num_labels, **common)
    run.compile(trainer, adamw_linear_decay(lr, steps, config.warmup_ratio))
    logger.info("ConSERT %s stage: %s pairs, %d steps", stage,
                "streamed" if supervised.count is None else supervised.count, steps)
    # The joint loss contrasts the batch's premises (and hypotheses) with each other.
    run.fit(trainer, supervised.batches(run, encoder, plan, no_duplicates=stage == "joint"),
            plan, steps=steps, stage=stage, patience=config.patience,
            selection=_dev_selection(run, config.dev_pooling, config.patience))
    return trainer


class SupervisedData:
    """The supervised stage's labelled pairs: rows in memory, or a stream.

    In memory (a list, a small CSV / TSV file): NLI triplets become
    entailment / contradiction pairs, labelled pairs are used as they are.
    Streamed (a glob, `streamed(...)`, a `.jsonl` file, a `tf.data.Dataset`):
    the same, row by row (`TripletPairs`); with labelled pairs the number of
    classes is read from the first `LABEL_SAMPLE` rows (at least 2), and a
    later row with a larger label is skipped.
    """

    def __init__(self, data):
        self.stream = as_stream(data)
        if self.stream is None:
            self.rows, self.num_labels = _nli_rows(data)
            self.count = len(self.rows)
            return
        kind = supervised_kind(self.stream)
        if kind == "triplets":
            _warn_two_classes(data)
            self.stream, self.num_labels = as_labeled_pairs(self.stream), 3
        else:
            check_rows(self.stream, PAIR_COLUMNS[:2], {"label": class_labels()})
            sample = ordered_rows(self.stream, PAIR_COLUMNS[:2], {"label": class_labels()})
            top = max(int(b["label"].max()) for b in sample.take(LABEL_SAMPLE).batch(1024)
                      .as_numpy_iterator())
            self.num_labels = max(2, top + 1)
            logger.info("ConSERT: %d classes (the largest label of the first %d streamed rows); "
                        "a later row with a larger label is skipped", self.num_labels,
                        LABEL_SAMPLE)
        self.count = self.stream.size

    def describe(self):
        if self.stream is None:
            return {"supervised_pairs": self.count}
        return {"supervised_pairs": self.count, "supervised_streamed": repr(self.stream)}

    def batches(self, run, encoder, plan, no_duplicates):
        """`make_dataset(start_step)` of `{"premise", "hypothesis", "label"}` batches."""
        if self.stream is None:
            rows = self.rows
            columns = {"premise": [r[0] for r in rows], "hypothesis": [r[1] for r in rows]}
            return run.batches(encoder, columns, plan, extra={"label": [r[2] for r in rows]})
        first, second = PAIR_COLUMNS[:2]
        make = run.stream_batches(encoder, self.stream, (first, second), plan,
                                  no_duplicates=no_duplicates,
                                  labels={"label": class_labels(self.num_labels)})

        @tf.autograph.experimental.do_not_convert
        def rename(batch):
            return {"premise": batch[first], "hypothesis": batch[second], "label": batch["label"]}

        return lambda start_step: make(start_step).map(rename)


def _parse_rates(view_rates):
    if view_rates is None:
        return (None, None)
    if isinstance(view_rates, str):
        return tuple(
            None if r.strip().lower() == "none" else float(r) for r in view_rates.split(",")
        )
    return tuple(view_rates)


def _warn_two_classes(supervised):
    logger.warning(
        "%s holds (premise, entailment, contradiction) triplets: the classifier "
        "learns 2 of NLI's 3 classes (no neutral pairs). Pass 3-way labelled pairs "
        "(sentence1<TAB>sentence2<TAB>label) to keep neutral.",
        supervised if isinstance(supervised, str) else "the supervised data",
    )


def _nli_rows(supervised):
    kind, rows = load_supervised(supervised)
    if kind == "triplets":
        _warn_two_classes(supervised)
        rows = triplets_to_nli_pairs(rows)
    num_labels = max(3 if kind == "triplets" else 2, max(r[2] for r in rows) + 1)
    return rows, num_labels


def _dev_selection(run, dev_pooling, patience):
    """STS dev selection scored with `dev_pooling`; None leaves it to the scaffold."""
    if dev_pooling is None or not run.dev_pairs:
        return None
    return STSDevEvaluation(run.dev_pairs, pooling=dev_pooling, patience=patience)


# The literal signature, for editors: `fit_function` checks it against the method's
# config and run defaults, and makes the function (its docstring is the method's).
def fit_consert(data, model="default", steps=None, batch_size=96, learning_rate=5e-7,
                max_length=64, pooling="auto", dev="stsb", eval_every=200, output=None,
                strategy=None, callbacks=None, seed=42, verbose="auto", mode="unsup",
                supervised=None, views="shuffle,feature_cutoff", view_rates=None,
                temperature=0.1, encoder_dropout=False, alpha=0.15, noise_norm=1.0,
                supervised_steps=None, supervised_learning_rate=2e-5, epochs=10,
                warmup_ratio=0.1, patience=10, dev_pooling=None, precision="auto",
                mini_batch_size=None, matryoshka_dims=None, max_grad_norm=1.0,
                matryoshka_weights=None,
                dev_retrieval=None, dev_select="auto", max_skipped=0.01, preset=None):
    ...


fit_consert = fit_function("consert", fit_consert)
