"""The `fit_*` entry points: one call from raw text to a trained encoder."""

import logging

import keras

logger = logging.getLogger(__name__)


def _ct_optimizer(trainer, optimizer, learning_rate):
    default = trainer.default_optimizer(learning_rate)
    if optimizer is None:
        return default
    if isinstance(optimizer, keras.optimizers.Optimizer):
        return optimizer
    if isinstance(optimizer, str):
        try:
            cls = type(keras.optimizers.get(optimizer))
        except ValueError as e:
            raise ValueError(f"Unknown optimizer {optimizer!r}: {e}") from e
        return cls(learning_rate=default._learning_rate)
    raise ValueError(
        f"`optimizer` must be a keras Optimizer, a name or None; received {optimizer!r}."
    )


def fit_ct(
    corpus,
    model="default",
    steps=500,
    batch_size=16,
    negatives="k7",
    logits="dot",
    dev="stsb",
    keep="best",
    eval_every=100,
    learning_rate=None,
    max_length=75,
    dropout=False,
    optimizer=None,
    seed=0,
    output=None,
    strategy=None,
    callbacks=None,
    verbose="auto",
):
    """Train a sentence encoder with Contrastive Tension; return it.

    Two towers start from `model`; batches follow CT's layout (see
    `keras_sentemb.data.ct_sampler`), sampled uniformly from the whole corpus.
    Every `eval_every` steps both towers are scored on the dev set and the
    best one at its best step is kept — the starting weights included, so the
    returned encoder is never worse on dev than the model you started from.

    The defaults are the paper's (`negatives="k7"`, dot-product logits,
    RMSprop with the step schedule from 1e-5, max length 75, dropout off).

    Args:
        corpus: list of str, a text file (one sentence per line), a
            `tf.data.Dataset` of strings, or a TFDS dataset name.
        model: str or `SentenceEncoder`. Defaults to `"default"`.
        steps: int. Training steps. Defaults to `500`.
        batch_size: int. Rows per batch (a multiple of K + 1 for `kN`).
            Defaults to `16`.
        negatives: str. `"k7"` (any `"kN"`) or `"in_batch"`. Defaults to `"k7"`.
        logits: str. `"dot"` (paper) or `"cosine"` (learnable scale). Defaults
            to `"dot"`.
        dev: `"stsb"` (bundled STS-B dev), a path, a list of (s1, s2, score)
            or None. Defaults to `"stsb"`.
        keep: str. `"best"` (best tower on dev) or `"tower2"` (always tower 2,
            as sentence-transformers does). Defaults to `"best"`.
        eval_every: int. Steps between dev evaluations. Defaults to `100`.
        learning_rate: float or None. First-stage learning rate. Defaults to
            `1e-5` (`kN`, RMSprop) or `2e-5` (`in_batch`, AdamW).
        max_length: int. Token limit per training sentence. Defaults to `75`
            (the encoder keeps its own limit for inference).
        dropout: bool. Dropout on in the towers. Defaults to `False`.
        optimizer: `keras.optimizers.Optimizer`, an optimizer name (e.g.
            `"adamw"`, run on the same learning-rate schedule) or None (RMSprop
            with CT's step schedule for `kN`, AdamW for in-batch).
        seed: int. Sampling seed. Defaults to `0`.
        output: str or None. Folder to save the kept encoder to.
        strategy: `tf.distribute.Strategy` or None.
        callbacks: list of Keras callbacks (e.g. `BackupAndRestore`,
            `TensorBoard`).
        verbose: Keras `fit` verbosity. Defaults to `"auto"`.

    Returns:
        The trained `SentenceEncoder` (mean pooling, as trained).

    Examples:

    ```python
    encoder = keras_sentemb.fit_ct("sentences.txt", steps=400)
    encoder.encode(["A sentence."])
    ```

    References:
        - [Carlsson et al., 2021](https://openreview.net/forum?id=Ov_sMNau-PF)
    """
    from keras_sentemb.data.batching import tokenize_columns
    from keras_sentemb.data.corpus import load_corpus
    from keras_sentemb.data.ct_sampler import ct_pair_dataset
    from keras_sentemb.trainers.contrastive_tension import ContrastiveTension
    from keras_sentemb.trainers.contrastive_tension import parse_negatives
    from keras_sentemb.trainers._fit import fit_with_selection
    from keras_sentemb.trainers._fit import resolve_dev
    from keras_sentemb.trainers._fit import resolve_encoder
    from keras_sentemb.trainers._fit import scope

    if keep not in ("best", "tower2"):
        raise ValueError(f"`keep` must be 'best' or 'tower2', received {keep!r}.")
    _, k = parse_negatives(negatives)
    sentences = load_corpus(corpus)
    dev_pairs = resolve_dev(dev)
    with scope(strategy):
        encoder = resolve_encoder(model)
        trainer = ContrastiveTension(
            encoder, negatives=negatives, logits=logits, dropout=dropout
        )
        trainer.compile(optimizer=_ct_optimizer(trainer, optimizer, learning_rate))
    dataset = ct_pair_dataset(sentences, batch_size, k, seed=seed)
    dataset = tokenize_columns(encoder, dataset, ["left", "right"], max_length)
    if keep == "tower2":
        fit_with_selection(trainer, dataset, steps, eval_every, None, callbacks, verbose)
        trainer.select_encoder("tower2")
    else:
        fit_with_selection(trainer, dataset, steps, eval_every, dev_pairs, callbacks, verbose)
    kept = trainer.encoder
    kept._ct_selection = getattr(trainer, "selection", None)
    kept.pooling = "mean"
    if output is not None:
        kept.save(output)
    return kept


# The other methods live beside their trainers; they are re-exported here so
# that `keras_sentemb.fit_*` and `keras-sentemb train METHOD` find them.
from keras_sentemb.trainers.consert import fit_consert  # noqa: E402,F401
from keras_sentemb.trainers.multitask import fit_multitask  # noqa: E402,F401
from keras_sentemb.trainers.parallel import fit_parallel  # noqa: E402,F401
from keras_sentemb.trainers.self_guided import fit_self_guided  # noqa: E402,F401
from keras_sentemb.trainers.simcse import fit_simcse  # noqa: E402,F401
from keras_sentemb.trainers.sts_regression import fit_sts_regression  # noqa: E402,F401
