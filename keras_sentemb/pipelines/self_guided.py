"""`fit_self_guided`: SG / SG-OPT from raw text."""

from keras_sentemb import validation
from keras_sentemb.data.corpus import load_corpus
from keras_sentemb.data.nli import load_positive_pairs
from keras_sentemb.pipelines.arguments import fit_function
from keras_sentemb.pipelines.schedules import adamw_linear_decay
from keras_sentemb.trainers.self_guided import SelfGuided


@fit_function(
    "self_guided", paper_pooling="cls", in_batch=True, batch_size=16, learning_rate=5e-5,
    eval_every=50, seed=1,
)
def fit_self_guided(
    run,
    data,
    loss="opt3",
    epochs=1,
    temperature=0.01,
    view_pooling="max",
    min_layer=0,
    max_layer=None,
    projection_dim=4096,
    projection=True,
    reg_weight=0.1,
    freeze_embeddings=True,
    warmup_ratio=0.1,
    weight_decay=0.0,
    max_grad_norm=1.0,
    patience=10,
    mode="unsup",
):
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
    and [CLS] pooling for BERT_T — the model's own pooling when it declares
    one (`pooling="auto"`).

    With `mode="pairs"` the data are `(sentence, positive)` pairs (a
    `sentence<TAB>positive` file, a `sent0,sent1` CSV or a list of 2-tuples),
    e.g. sentences and their back-translations: BERT_T encodes the sentence
    and BERT_F makes its views of the positive (the SG paper's "BT +
    SG-OPT"). The ablations of the paper: `projection=False` (no projection
    head), `view_pooling="mean"`, and the layer range `min_layer` ..
    `max_layer` of the views.

    Args:
        data: list of str, a text file (one sentence per line), a
            `tf.data.Dataset` of strings or a TFDS name. The paper uses the
            STS-B sentences without labels. With `mode="pairs"`: the pair
            file or a list of `(sentence, positive)`.
        loss: str. `"opt3"` (SG-OPT), `"base"` (SG), `"opt1"` or `"opt2"`.
            Defaults to `"opt3"`.
        epochs: int. Passes over the corpus when `steps` is None. Defaults
            to `1`.
        temperature: float. Defaults to `0.01`.
        view_pooling: str. `"max"` or `"mean"`. Defaults to `"max"`.
        min_layer: int. Skip views below this layer. Defaults to `0`.
        max_layer: int or None. Skip views above this layer. Defaults to
            `None` (the last layer).
        projection_dim: int or None. Projection head width; `None` trains
            without the head, like `projection=False`. Defaults to `4096`.
        projection: bool. Use the projection head; `False` compares BERT_T's
            vector and BERT_F's views directly. Defaults to `True`.
        reg_weight: float. Lambda of the regulariser. Defaults to `0.1`.
        freeze_embeddings: bool. Freeze BERT_T's embedding block. Defaults
            to `True`.
        warmup_ratio: float. Fraction of steps of linear warmup. Defaults to
            `0.1`.
        weight_decay: float. AdamW weight decay. Defaults to `0.0` (as in the
            authors' code).
        max_grad_norm: float or None. Global gradient-norm clip. Defaults to
            `1.0`.
        patience: int or None. Evaluations without improvement before
            stopping. Defaults to `10`.
        mode: str. `"unsup"` (one sentence feeds both encoders) or
            `"pairs"` (BERT_T reads the sentence, BERT_F the positive).
            Defaults to `"unsup"`.

    Returns:
        The trained `SentenceEncoder` (BERT_T).

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
    validation.choice(mode, "mode", ("unsup", "pairs"))
    if mode == "pairs":
        pairs = load_positive_pairs(data)
        columns = {"sentence": [p[0] for p in pairs], "positive": [p[1] for p in pairs]}
    else:
        columns = {"sentence": load_corpus(data)}
    n = len(columns["sentence"])
    run.record_data(sentences=n, mode=mode)
    run.set_steps(n, epochs)
    with run.scope():
        encoder = run.load_encoder()
        trainer = SelfGuided(
            encoder, loss=loss, temperature=temperature, view_pooling=view_pooling,
            min_layer=min_layer, max_layer=max_layer,
            projection_dim=projection_dim if projection else None, reg_weight=reg_weight,
            freeze_embeddings=freeze_embeddings, seed=run.seed,
            pooling=run.pooling_for(encoder),
        )
        optimizer = adamw_linear_decay(
            run.learning_rate, run.steps, warmup_ratio, weight_decay,
            beta_1=0.9, beta_2=0.9,
            global_clipnorm=None if max_grad_norm is None
            else validation.positive_float(max_grad_norm, "max_grad_norm"),
        )
        optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    run.compile(trainer, optimizer)
    run.fit(trainer, run.batches(encoder, columns), patience=patience)
    return run.finish(trainer.encoder)
