"""The `fit_*` entry points: one call from raw text to a trained encoder."""

import contextlib
import logging
import math
import os

import keras

logger = logging.getLogger(__name__)


def load_encoder(model, max_length=None):
    """A `SentenceEncoder` from a `model` argument (name, folder or instance)."""
    from keras_sentemb.models import SentenceEncoder

    if isinstance(model, SentenceEncoder):
        return model
    return SentenceEncoder.from_preset(model, max_length=max_length)


def load_dev_pairs(dev):
    """Dev pairs for checkpoint selection.

    `dev` is `"stsb"` (the bundled STS-B dev set), a path to an STS-B style
    csv or folder, a list of (s1, s2, score), or None (no dev selection).
    """
    from keras_sentemb.data.resources import bundled_sts_dir
    from keras_sentemb.evaluation.readers import read_stsb

    if dev is None:
        return None
    if isinstance(dev, str) and dev.lower() in ("stsb", "sts-b", "default"):
        return read_stsb(bundled_sts_dir(), "dev")
    if isinstance(dev, (str, os.PathLike)):
        return read_stsb(os.fspath(dev), "dev")
    pairs = list(dev)
    if not pairs or len(pairs[0]) != 3:
        raise ValueError("`dev` pairs must be a non-empty list of (s1, s2, score).")
    return pairs


def scope(strategy):
    return strategy.scope() if strategy is not None else contextlib.nullcontext()


def run_fit(trainer, dataset, steps, eval_every, dev_pairs, callbacks, verbose):
    """`trainer.fit` in epochs of `eval_every` steps, with dev selection and NaN guard."""
    from keras_sentemb.trainers.callbacks import NonFiniteGuard, STSDevEvaluation

    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"`steps` must be a positive int, received {steps!r}.")
    steps_per_epoch = max(1, min(int(eval_every), steps))
    epochs = math.ceil(steps / steps_per_epoch)
    all_callbacks = [NonFiniteGuard()]
    selector = None
    if dev_pairs is not None:
        selector = STSDevEvaluation(dev_pairs, every=steps_per_epoch)
        all_callbacks.append(selector)
    all_callbacks += list(callbacks or [])
    history = trainer.fit(
        dataset,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        callbacks=all_callbacks,
        verbose=verbose,
    )
    trainer.selection = selector
    return history


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

    if keep not in ("best", "tower2"):
        raise ValueError(f"`keep` must be 'best' or 'tower2', received {keep!r}.")
    _, k = parse_negatives(negatives)
    sentences = load_corpus(corpus)
    dev_pairs = load_dev_pairs(dev)
    with scope(strategy):
        encoder = load_encoder(model)
        trainer = ContrastiveTension(
            encoder, negatives=negatives, logits=logits, dropout=dropout
        )
        trainer.compile(optimizer=_ct_optimizer(trainer, optimizer, learning_rate))
    dataset = ct_pair_dataset(sentences, batch_size, k, seed=seed)
    dataset = tokenize_columns(encoder, dataset, ["left", "right"], max_length)
    if keep == "tower2":
        run_fit(trainer, dataset, steps, eval_every, None, callbacks, verbose)
        trainer.select_encoder("tower2")
    else:
        run_fit(trainer, dataset, steps, eval_every, dev_pairs, callbacks, verbose)
    if getattr(trainer, "selection", None) is not None:
        logger.info("CT dev history (step, spearman per tower): %s", trainer.selection.history)
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
