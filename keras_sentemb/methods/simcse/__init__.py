"""SimCSE, unsupervised (dropout views) or supervised: `fit_simcse`."""

from keras_sentemb.data.corpus import load_corpus
from keras_sentemb.data.labeled_streams import check_rows
from keras_sentemb.data.labeled_streams import class_labels
from keras_sentemb.data.nli import load_positive_pairs
from keras_sentemb.data.nli import load_supervised
from keras_sentemb.data.stream_batches import as_stream
from keras_sentemb.methods.method import ALL_OPTIONAL
from keras_sentemb.methods.method import Method
from keras_sentemb.methods.registry import register_method
from keras_sentemb.methods.runner import fit_function
from keras_sentemb.pipelines.schedules import adamw_linear_decay
from keras_sentemb.methods.simcse.config import PAPER_POOLING
from keras_sentemb.methods.simcse.config import PRESETS
from keras_sentemb.methods.simcse.config import SimCSEConfig
from keras_sentemb.methods.simcse.trainer import SimCSE as SimCSETrainer

# The columns of streamed data in each mode that streams.
STREAM_COLUMNS = {"unsup": ("sentence",), "sup": ("sent0", "sent1", "hard_neg"),
                  "pairs": ("sent0", "sent1"), "paraphrase": ("sentence1", "sentence2")}


def supervised_columns(data, mode):
    """Columns (and labels) of supervised SimCSE data for `mode`."""
    if mode == "pairs":
        rows = load_positive_pairs(data)
        return {k: [r[i] for r in rows] for i, k in enumerate(("sent0", "sent1"))}, None, len(rows)
    kind, rows = load_supervised(data)
    wanted = "triplets" if mode == "sup" else "labeled_pairs"
    if kind != wanted:
        raise ValueError(
            f"mode={mode!r} expects {wanted} (sent0,sent1,hard_neg for 'sup'; "
            f"sentence1,sentence2,label for 'paraphrase'). Received {kind}."
        )
    if mode == "sup":
        names = ("sent0", "sent1", "hard_neg")
        return {k: [r[i] for r in rows] for i, k in enumerate(names)}, None, len(rows)
    columns = {"sentence1": [r[0] for r in rows], "sentence2": [r[1] for r in rows]}
    return columns, {"label": [int(r[2]) for r in rows]}, len(rows)


@register_method("simcse")
class SimCSEMethod(Method):
    """Trains a sentence encoder with SimCSE and returns it.

    Unsupervised (default, the paper's main setting): the sentences of
    `data` (e.g. Wikipedia), dropout noise as the only augmentation,
    InfoNCE at temperature 0.05, batch 64, learning rate 3e-5 (linear decay),
    max length 32, one epoch. Pooling: the model's own when it declares one
    (the default all-MiniLM-L6-v2: mean), else the paper's [CLS] with an
    MLP head in training only (`mlp="auto"`). `mode="sup"` trains on
    `(anchor, positive, hard negative)` triplets (a `sent0,sent1,hard_neg`
    CSV: NLI premise, entailment, contradiction; the paper uses batch 512,
    lr 5e-5); `mode="pairs"` on user-supplied `(sentence, positive)` pairs
    without hard negatives (a `sentence<TAB>positive` file or a `sent0,sent1`
    CSV), e.g. sentences and their back-translations (the SG paper's
    "Contrastive (BT)"); `mode="paraphrase"` on `(sentence1, sentence2,
    label)` pairs such as `quora-dev.csv`. With `dev` (STS-B dev by default)
    the best checkpoint, the starting weights included, is kept.

    Examples:

    ```python
    encoder = fit_simcse("wiki100k.txt", steps=300)
    encoder = fit_simcse("nli.csv", mode="sup", batch_size=128)
    encoder = fit_simcse("back_translations.tsv", mode="pairs")
    ```

    References:
        - [Gao et al., 2021. SimCSE: Simple Contrastive Learning of Sentence
          Embeddings](https://arxiv.org/abs/2104.08821).
    """

    config_class = SimCSEConfig
    paper_pooling = PAPER_POOLING
    in_batch = True
    parallel_passes = True
    optional = ALL_OPTIONAL
    run_defaults = {"batch_size": 64, "learning_rate": 3e-5, "max_length": 32,
                    "eval_every": 125, "seed": 42, "max_grad_norm": 1.0}
    data_doc = ("unsup: list of str, text file, `tf.data.Dataset` or TFDS name; sup / "
                "paraphrase: the CSV/TSV path or a list of 3-tuples; pairs: the TSV/CSV path "
                "or a list of 2-tuples. Every mode also streams: a glob of files, "
                "`keras_sentemb.streamed(...)` or a `Mixture` (see the large-corpora guide); "
                "streamed paraphrase rows are `sentence1`, `sentence2`, `label`.")

    presets = PRESETS

    def train(self, run, data, config):
        stream = as_stream(data, tfds=config.mode == "unsup")
        labels = None
        if stream is not None:
            names = STREAM_COLUMNS[config.mode]
            if config.mode == "paraphrase":  # (sentence1, sentence2, label) rows
                labels = {"label": class_labels()}
                check_rows(stream, names, labels)
            n = stream.size
            run.record_data(examples=n, mode=config.mode, streamed=repr(stream))
        elif config.mode == "unsup":
            sentences = load_corpus(data)
            columns, extra, n = {"sentence": sentences}, None, len(sentences)
            run.record_data(examples=n, mode=config.mode)
        else:
            columns, extra, n = supervised_columns(data, config.mode)
            run.record_data(examples=n, mode=config.mode)
        with run.scope():
            encoder, plan = run.start(examples=n, mlp=config.mlp)
            trainer = SimCSETrainer(encoder, config, pooling=plan.pooling,
                                    mini_batch_size=run.mini_batch_size)
        optimizer = adamw_linear_decay(plan.learning_rate, plan.steps)
        if stream is not None:
            make_dataset = run.stream_batches(encoder, stream, names, plan, no_duplicates=True,
                                              labels=labels)
        else:
            make_dataset = run.batches(encoder, columns, plan, extra=extra)
        return run.train(trainer, optimizer, make_dataset, plan)


# The `fit_*` function: its signature and docstring are the method's.
fit_simcse = fit_function("simcse", "fit_simcse")
