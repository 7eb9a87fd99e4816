"""`fit_simcse`: SimCSE, unsupervised (dropout views) or supervised."""

from keras_sentemb import validation
from keras_sentemb.data.corpus import load_corpus
from keras_sentemb.data.nli import load_positive_pairs
from keras_sentemb.data.nli import load_supervised
from keras_sentemb.models.projection_head import with_projection_head
from keras_sentemb.pipelines.arguments import fit_function
from keras_sentemb.pipelines.schedules import adamw_linear_decay
from keras_sentemb.trainers.simcse import SIMCSE_MODES
from keras_sentemb.trainers.simcse import SimCSE


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


@fit_function(
    "simcse", paper_pooling="cls", in_batch=True,
    optional=("precision", "mini_batch_size", "max_grad_norm", "matryoshka_dims",
              "matryoshka_weights"),
    batch_size=64, learning_rate=3e-5, max_length=32, eval_every=125, seed=42, max_grad_norm=1.0,
)
def fit_simcse(
    run,
    data,
    mode="unsup",
    temperature=0.05,
    mlp="auto",
    hard_negative_weight=0.0,
    negative_weight=1.0,
    negative_margin=0.0,
):
    """Trains a sentence encoder with SimCSE and returns it.

    Unsupervised (default, the paper's main setting): the sentences of
    `data` (e.g. Wikipedia), dropout noise as the only augmentation,
    InfoNCE at temperature 0.05, batch 64, learning rate 3e-5 (linear decay),
    max length 32, one epoch. Pooling: the model's own when it declares one
    (the default all-MiniLM-L6-v2: mean), else the paper's [CLS] with an
    MLP head in training only (`mlp="auto"`: the head is on exactly when
    [CLS] pooling is). `mode="sup"` trains on `(anchor, positive, hard
    negative)` triplets (a `sent0,sent1,hard_neg` CSV: NLI premise,
    entailment, contradiction; the paper uses batch 512, lr 5e-5);
    `mode="pairs"` on user-supplied `(sentence, positive)` pairs without
    hard negatives (a `sentence<TAB>positive` file or a `sent0,sent1` CSV),
    e.g. sentences and their back-translations (the SG paper's
    "Contrastive (BT)"); `mode="paraphrase"` on `(sentence1,
    sentence2, label)` pairs such as `quora-dev.csv`. With `dev` (STS-B dev
    by default) the best checkpoint, the starting weights included, is kept.

    Args:
        data: unsup: list of str, text file, `tf.data.Dataset` or TFDS name;
            sup / paraphrase: the CSV/TSV path or a list of 3-tuples;
            pairs: the TSV/CSV path or a list of 2-tuples.
        mode: str. `"unsup"`, `"sup"`, `"pairs"` or `"paraphrase"`.
            Defaults to `"unsup"`.
        temperature: float. Defaults to `0.05`.
        mlp: str. `"auto"`, `"train"`, `"none"` or `"keep"` (a tanh head
            trained and kept as the encoder's own projection, so dev
            selection, evaluation and the saved model use it: SimCSE's
            supervised "[CLS] with MLP"; see `with_projection_head`).
            Defaults to `"auto"`.
        hard_negative_weight: float. Defaults to `0.0`.
        negative_weight: float. Paraphrase mode. Defaults to `1.0`.
        negative_margin: float. Paraphrase mode. Defaults to `0.0`.

    Returns:
        The trained `SentenceEncoder` (the dev-selected checkpoint).

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
    validation.choice(mlp, "mlp", ("auto", "train", "none", "keep"))
    validation.choice(mode, "mode", SIMCSE_MODES)
    if mode == "unsup":
        sentences = load_corpus(data)
        columns, extra, n = {"sentence": sentences}, None, len(sentences)
    else:
        columns, extra, n = supervised_columns(data, mode)
    run.record_data(examples=n, mode=mode)
    run.set_steps(n)
    with run.scope():
        encoder = run.load_encoder()
        pooling = run.pooling_for(encoder)
        if mlp == "keep":  # the head is part of the encoder; the trainer adds none
            if encoder.projection is None:
                encoder = with_projection_head(encoder, seed=run.seed)
            run.report.resolved["mlp"] = "keep"
        trainer = SimCSE(
            encoder, mode=mode, temperature=temperature, pooling=pooling,
            mlp="none" if mlp == "keep" else run.training_mlp(mlp), hard_negative_weight=hard_negative_weight,
            negative_weight=negative_weight, negative_margin=negative_margin,
            mini_batch_size=run.mini_batch_size,
        )
    run.compile(trainer, adamw_linear_decay(run.learning_rate, run.steps))
    run.fit(trainer, run.batches(encoder, columns, extra=extra))
    return run.finish(trainer.encoder)

