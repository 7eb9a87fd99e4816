"""`with_projection_head`: an encoder whose sentence vectors go through a trainable tanh head."""

import keras
import numpy as np

from keras_sentemb import validation


def with_projection_head(encoder, units=None, activation="tanh", initializer="normal",
                         stddev=0.02, seed=None):
    """The same encoder with a new dense head on its pooled vectors, kept at evaluation.

    SimCSE's MLP (`tanh(W x + b)` on the [CLS] vector) is dropped after
    unsupervised training but kept for the supervised (NLI) models, which
    are evaluated "[CLS] with MLP"; the parallel-pairs paper does the same
    for its NLI fine-tuned models (Appendix C). Unlike the training-only
    `ProjectionMLP`, this head is the encoder's own `projection`: every
    `encode`, dev evaluation and save goes through it. The backbone and
    tokenizer are shared with `encoder` (not copied). The head maps the
    pooled size to `units` (default: the pooled size), its kernel drawn from
    a normal of standard deviation `stddev` (BERT's initialiser, as SimCSE's
    head) or the (rectangular) identity, its bias zero. A head of another
    size also lets a student be compared with a teacher of that size.

    Args:
        encoder: `SentenceEncoder` without a projection head.
        units: int or None. Output size. Defaults to `None` (the pooled
            size).
        activation: str or None. The head's activation. Defaults to `"tanh"`.
        initializer: str. `"normal"` or `"identity"`. Defaults to
            `"normal"`.
        stddev: float. Standard deviation of the initial kernel. Defaults to
            `0.02`.
        seed: int or None. Seed of the initial kernel. Defaults to `None`.

    Returns:
        A new `SentenceEncoder` sharing `encoder`'s backbone and tokenizer.

    Examples:

    ```python
    head = with_projection_head(SentenceEncoder.from_preset("default"))
    head.projection_dim  # 384: the pooled size
    ```

    References:
        - [Gao et al., 2021. SimCSE](https://arxiv.org/abs/2104.08821),
          section 6.3 / Appendix: the MLP kept for supervised SimCSE.
    """
    if encoder.projection is not None:
        raise ValueError(
            f"The encoder already has a projection head ({encoder.projection_dim} units); "
            "train it as it is."
        )
    if encoder.postprocess is not None:
        raise ValueError("A projection head would go before the encoder's post-processing "
                         "layer, which was fitted without it; remove the post-processing first.")
    validation.choice(initializer, "initializer", ("normal", "identity"))
    hidden = int(encoder.base_output_dim)
    dim = hidden if units is None else validation.positive_int(units, "units")
    copy = type(encoder)(
        encoder.backbone, encoder.tokenizer, pooling=encoder.declared_pooling,
        normalize=encoder.normalize, max_length=encoder.max_length, projection_dim=dim,
        projection_activation=activation, text_normalization=encoder.text_normalization,
        kernels=encoder.kernels, feedforward_gelu=encoder.feedforward_gelu,
        prompt=encoder.prompt_template, name=encoder.name,
    )
    if initializer == "identity":
        kernel = np.eye(hidden, dim, dtype="float32")
    else:
        kernel = keras.ops.convert_to_numpy(
            keras.random.normal((hidden, dim), stddev=stddev, seed=seed))
    copy.projection.set_weights([kernel, np.zeros((dim,), dtype="float32")])
    copy.model_card = encoder.model_card
    return copy
