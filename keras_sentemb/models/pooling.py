"""Pooling of Transformer hidden states into one vector per sentence."""

import re

import keras
from keras import ops
import tensorflow as tf

from keras_sentemb.models import sbert_wk
from keras_sentemb.models.sbert_wk import sbert_wk_pool

POOLING_MODES = ("cls", "mean", "max", "mean_last2", "first_last")
_LAYER_RE = re.compile(r"^layer:(-?\d+)$")
_SBERT_WK_RE = re.compile(r"^sbert_wk(?::(-?\d+)(?::(\d+))?)?$")
_TOKEN_RE = re.compile(r"^token:(-?\d+)$")
# The last layer at the [MASK] of the encoder's prompt (`SentenceEncoder(prompt=...)`).
MASK_POOLING = "mask"


def parse_pooling(pooling, num_layers=None):
    """Validate a pooling name and return it in canonical form.

    Args:
        pooling: str. One of `"cls"`, `"mean"`, `"max"`, `"mean_last2"`,
            `"first_last"` or `"layer:K"` (masked mean of layer `K`, `0` being
            the embedding output and negative `K` counting from the last
            layer), `"token:I"` (the last layer at token `I`: from the start
            when `I >= 0`, `token:0` being [CLS]; from each sentence's own
            end when negative, `token:-1` being its end token, the
            last-token pooling of decoder embedders), `"mask"` (the last layer at
            the [MASK] of the encoder's prompt; see `SentenceEncoder`'s
            `prompt`) or `"sbert_wk[:START[:WINDOW]]"`.
        num_layers: int or None. The number of Transformer layers, to check
            `layer:K`. Defaults to None (no range check).

    Returns:
        The pooling string, with `layer:K` normalised to a non-negative `K`
        when `num_layers` is known.
    """
    if not isinstance(pooling, str):
        raise ValueError(
            f"`pooling` must be a string, received {pooling!r} "
            f"({type(pooling).__name__})."
        )
    pooling = pooling.strip().lower()
    if pooling in POOLING_MODES or pooling == MASK_POOLING:
        return pooling
    match = _TOKEN_RE.match(pooling)
    if match:
        return f"token:{int(match.group(1))}"
    match = _LAYER_RE.match(pooling)
    if match:
        k = int(match.group(1))
        if num_layers is not None:
            if not -(num_layers + 1) <= k <= num_layers:
                raise ValueError(
                    f"`pooling='{pooling}'` is out of range: the model has "
                    f"{num_layers} Transformer layers, so K must be in "
                    f"[0, {num_layers}] (0 = embedding output) or negative "
                    f"from the end."
                )
            k = k % (num_layers + 1)
        return f"layer:{k}"
    match = _SBERT_WK_RE.match(pooling)
    if match:
        return _parse_sbert_wk(pooling, match, num_layers)
    raise ValueError(
        f"Unknown pooling {pooling!r}. Expected one of "
        f"{', '.join(POOLING_MODES)}, 'layer:K', 'token:I', 'mask' or "
        "'sbert_wk[:START[:WINDOW]]'."
    )


def _parse_sbert_wk(pooling, match, num_layers):
    start = sbert_wk.DEFAULT_LAYER_START if match.group(1) is None else int(match.group(1))
    window = sbert_wk.DEFAULT_WINDOW if match.group(2) is None else int(match.group(2))
    if num_layers is not None:
        if not -(num_layers + 1) <= start <= num_layers:
            raise ValueError(
                f"`pooling='{pooling}'` is out of range: the model has {num_layers} "
                f"Transformer layers, so START must be in [0, {num_layers}] or negative "
                "from the end."
            )
        start = start % (num_layers + 1)
        sbert_wk.check_sbert_wk(start, window, num_layers)
    elif window < 1:
        raise ValueError(f"`pooling='{pooling}'`: the SBERT-WK window must be >= 1.")
    return f"sbert_wk:{start}:{window}"


def masked_mean(hidden, padding_mask):
    """Mean of `hidden` [B, T, D] over the real tokens of `padding_mask` [B, T].

    Matches sentence-transformers' mean pooling: the token count is clamped at
    1e-9, so an all-padding row gives a zero vector rather than NaN.
    """
    hidden = ops.cast(hidden, "float32")
    mask = ops.cast(padding_mask, "float32")[:, :, None]
    total = ops.sum(hidden * mask, axis=1)
    count = ops.maximum(ops.sum(mask, axis=1), 1e-9)
    return total / count


def masked_max(hidden, padding_mask):
    """Max of `hidden` [B, T, D] over the real tokens (padding set to -1e9)."""
    hidden = ops.cast(hidden, "float32")
    mask = ops.cast(padding_mask, "bool")[:, :, None]
    return ops.max(ops.where(mask, hidden, -1e9), axis=1)


def token_state(hidden, padding_mask, index):
    """The state of token `index` of each row: from the start if `index >= 0`, else from its end."""
    if index >= 0:
        return ops.cast(hidden[:, index, :], "float32")
    lengths = ops.sum(ops.cast(padding_mask, "int32"), axis=1)
    positions = ops.maximum(lengths + index, 0)
    return ops.cast(tf.gather(hidden, positions, batch_dims=1), "float32")


def pool_hidden_states(hidden_states, padding_mask, pooling):
    """Pool a list of hidden states (embedding output first) into [B, D].

    Args:
        hidden_states: list of L + 1 tensors [B, T, D]: the embedding output
            followed by every Transformer layer's output.
        padding_mask: tensor [B, T]. 1 for real tokens, 0 for padding.
        pooling: str. A canonical pooling name (see `parse_pooling`).

    Returns:
        float32 tensor [B, D].
    """
    last = hidden_states[-1]
    if pooling == "cls":
        return ops.cast(last[:, 0, :], "float32")
    if pooling == "mean":
        return masked_mean(last, padding_mask)
    if pooling == "max":
        return masked_max(last, padding_mask)
    if pooling == "mean_last2":
        return 0.5 * (
            masked_mean(hidden_states[-1], padding_mask)
            + masked_mean(hidden_states[-2], padding_mask)
        )
    if pooling == "first_last":
        # hidden_states[1] is the first Transformer layer's output (SimCSE's
        # corrected "first-last-avg"), hidden_states[-1] the last.
        return 0.5 * (
            masked_mean(hidden_states[1], padding_mask)
            + masked_mean(hidden_states[-1], padding_mask)
        )
    if pooling.startswith("token:"):
        return token_state(last, padding_mask, int(pooling.split(":")[1]))
    if pooling == MASK_POOLING:
        raise ValueError("`pooling='mask'` reads the [MASK] of an encoder's prompt; pool through "
                         "the encoder (`encoder.pool`), which knows where its prompt puts it.")
    if pooling.startswith("sbert_wk:"):

        _, start, window = pooling.split(":")
        return sbert_wk_pool(hidden_states, padding_mask, int(start), int(window))
    k = int(pooling.split(":")[1])
    return masked_mean(hidden_states[k], padding_mask)


@keras.saving.register_keras_serializable(package="keras_sentemb")
class SentencePooling(keras.layers.Layer):
    """Pools Transformer hidden states into one float32 vector per sentence.

    The layer takes the list of all hidden states (the embedding output first,
    then one tensor per Transformer layer) and the padding mask, so that every
    pooling that the sentence-embedding literature uses can be expressed:
    `cls` (the first token of the last layer), `mean` and `max` (masked, over
    the last layer), `mean_last2` (average of the last two layers' masked
    means), `first_last` (average of the first and last Transformer layers'
    masked means), `layer:K` (masked mean of layer `K`, `0` = embedding
    output) and `sbert_wk:START:WINDOW` (SBERT-WK, Wang & Kuo 2020).

    Args:
        mode: str. The pooling mode. Defaults to `"mean"`.

    Examples:

    ```python
    pooling = SentencePooling("mean_last2")
    vectors = pooling(hidden_states, padding_mask)  # [batch, hidden_dim]
    ```

    References:
        - [Reimers & Gurevych, 2019](https://arxiv.org/abs/1908.10084)
        - [Gao et al., 2021](https://arxiv.org/abs/2104.08821) (first-last avg)
        - [Wang & Kuo, 2020](https://arxiv.org/abs/2002.06652) (SBERT-WK)
    """
    def __init__(self, mode="mean", **kwargs):
        super().__init__(**kwargs)
        self.mode = parse_pooling(mode)

    def call(self, hidden_states, padding_mask):
        return pool_hidden_states(list(hidden_states), padding_mask, self.mode)

    def get_config(self):
        config = super().get_config()
        config.update({"mode": self.mode})
        return config
