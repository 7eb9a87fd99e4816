"""SG / SG-OPT from raw text: `fit_self_guided`."""

from keras_sentemb.data.corpus import load_corpus
from keras_sentemb.data.stream_batches import as_stream
from keras_sentemb.data.nli import load_positive_pairs
from keras_sentemb.methods.method import DEV_RETRIEVAL
from keras_sentemb.methods.method import STREAMED
from keras_sentemb.methods.method import Method
from keras_sentemb.methods.registry import register_method
from keras_sentemb.methods.runner import fit_function
from keras_sentemb.pipelines.schedules import adamw_linear_decay
from keras_sentemb.methods.self_guided.config import PAPER_POOLING
from keras_sentemb.methods.self_guided.config import PRESETS
from keras_sentemb.methods.self_guided.config import SG_POOLING_REASON
from keras_sentemb.methods.self_guided.config import SelfGuidedConfig
from keras_sentemb.methods.self_guided.trainer import SelfGuided as SelfGuidedTrainer

@register_method("sg")
class SelfGuidedMethod(Method):
    """Train a sentence encoder with self-guided contrastive learning (SG-OPT).

    Clones `model` into a frozen guide BERT_F and a tuned BERT_T, trains
    BERT_T's sentence vector against BERT_F's pooled layer views (see
    `SelfGuided`), evaluates STS-B dev every `eval_every` steps (stopping
    after `patience` evaluations without improvement, best weights kept, the
    starting weights included), and returns BERT_T. The projection head is
    dropped.

    Defaults are the paper's main setting: SG-OPT (`loss="opt3"`), max-pooled
    views of all layers, temperature 0.01, lambda 0.1, AdamW with betas
    (0.9, 0.9), learning rate 5e-5, batch 16, one epoch, 10% linear warmup
    then linear decay, gradient norm clipped at 1 (as in the authors' code),
    and [CLS] pooling for BERT_T. SG is defined on the [CLS] vector (section
    3: "the [CLS] vector from the last layer of BERT_T ... is regarded as the
    final sentence embedding we aim to optimize/utilize"), so
    `pooling="auto"` is [CLS] even for a model that declares another pooling
    (unlike the other `fit_*` functions); pass a pooling name to train
    another sentence vector.

    With `mode="pairs"` the data are `(sentence, positive)` pairs (a
    `sentence<TAB>positive` file, a `sent0,sent1` CSV or a list of 2-tuples),
    e.g. sentences and their back-translations: BERT_T encodes the sentence
    and BERT_F makes its views of the positive (the SG paper's "BT +
    SG-OPT"). The ablations of the paper: `projection=False` (no projection
    head), `view_pooling="mean"`, and the layer range `min_layer` ..
    `max_layer` of the views.

    Examples:

    ```python
    encoder = keras_sentemb.fit_self_guided(sentences, steps=500,
                                            output="sg_opt")
    vectors = encoder.encode(["A man plays a guitar."])
    ```

    References:
        - [Kim, Yoo & Lee, 2021. Self-Guided Contrastive Learning for BERT
          Sentence Representations](https://arxiv.org/abs/2106.07345)
    """

    config_class = SelfGuidedConfig
    paper_pooling = PAPER_POOLING
    in_batch = True
    optional = ("precision", "max_grad_norm") + DEV_RETRIEVAL + STREAMED
    run_defaults = {"batch_size": 16, "learning_rate": 5e-5, "eval_every": 50, "seed": 1,
                    "max_grad_norm": 1.0}
    run_docs = {"max_grad_norm": "Global gradient-norm clip (as in the authors' code); None "
                                 "does not clip."}
    data_doc = ("list of str, a text file (one sentence per line), a `tf.data.Dataset` of "
                "strings or a TFDS name. The paper uses the STS-B sentences without labels. "
                "With `mode=\"pairs\"`: the pair file or a list of `(sentence, positive)`.")

    presets = PRESETS

    def train(self, run, data, config):
        names = ("sentence", "positive") if config.mode == "pairs" else ("sentence",)
        stream = as_stream(data, tfds=config.mode != "pairs")
        if stream is not None:
            n = stream.size
            run.record_data(sentences=n, mode=config.mode, streamed=repr(stream))
        else:
            if config.mode == "pairs":
                pairs = load_positive_pairs(data)
                columns = {"sentence": [p[0] for p in pairs], "positive": [p[1] for p in pairs]}
            else:
                columns = {"sentence": load_corpus(data)}
            n = len(columns["sentence"])
            run.record_data(sentences=n, mode=config.mode)
        with run.scope():
            encoder, plan = run.start(examples=n, epochs=config.epochs,
                                      paper_pooling_only=SG_POOLING_REASON)
            trainer = SelfGuidedTrainer(encoder, config, seed=run.seed, pooling=plan.pooling)
            optimizer = adamw_linear_decay(
                plan.learning_rate, plan.steps, config.warmup_ratio, config.weight_decay,
                beta_1=0.9, beta_2=0.9, global_clipnorm=run.max_grad_norm,
            )
            optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
        if stream is None:
            make_dataset = run.batches(encoder, columns, plan)
        else:
            make_dataset = run.stream_batches(encoder, stream, names, plan, no_duplicates=True)
        return run.train(trainer, optimizer, make_dataset, plan, patience=config.patience)


# The `fit_*` function: its signature and docstring are the method's.
fit_self_guided = fit_function("sg", "fit_self_guided")
