"""SBERT-WK pooling: layer-wise unification and token importance (Wang & Kuo, 2020).

For every token, the hidden states of layers `layer_start..L` are fused
into one vector with weights from two geometric scores per layer, computed
from the QR decomposition of the token's vector at that layer next to its
neighbours at the `window` layers before and after:

- alignment: `1 / (2 m cos)`, with `cos` the cosine between the mean of the
  neighbours' unit vectors and the vector's projection onto the neighbours'
  span (`m` = neighbours + 1);
- novelty: the share of the vector's norm orthogonal to that span.

(The authors compute both from a QR decomposition per token and layer; the
same R factor comes here from the Cholesky factor of the window's Gram
matrix, in float64.)

Each score is normalised to sum 1 over the layers, the two are added and
normalised again, giving the fused token vector. Tokens are then weighted
by the variance of the cosine similarities between their adjacent layers
(normalised over the sentence). The sentence's last token (`[SEP]`,
`</s>`) is left out; `[CLS]` is kept, as in the authors' code.

The windows follow the authors' code exactly, including its Python slicing:
the left window of layer `k` is empty while `k < window` (a negative slice
start), the right window is cut at the last layer.
"""

import tensorflow as tf

DEFAULT_LAYER_START = 4
DEFAULT_WINDOW = 2


def layer_windows(num_fused, window):
    """The neighbour layers of each fused layer, as in the authors' code.

    Args:
        num_fused: int. Number of fused layers (`L + 1 - layer_start`).
        window: int. Context window size.

    Returns:
        list of lists: for layer `k`, `left + right + [k]` (indices into the
        fused layers; `k` itself last).
    """
    layers = list(range(num_fused))
    return [layers[k - window : k] + layers[k + 1 : k + window + 1] + [k] for k in layers]


def check_sbert_wk(layer_start, window, num_layers):
    """Raise ValueError unless every fused layer has a neighbour and the variance is defined."""
    num_fused = num_layers + 1 - layer_start
    if window < 1:
        raise ValueError(f"SBERT-WK needs a context window >= 1, received {window}.")
    if num_fused < 3 or any(len(w) < 2 for w in layer_windows(num_fused, window)):
        raise ValueError(
            f"SBERT-WK with layer_start={layer_start} and window={window} fuses "
            f"{max(num_fused, 0)} hidden states of this {num_layers}-layer model; it needs "
            f"at least max(3, window + 1) = {max(3, window + 1)} (pass a smaller start, "
            f"e.g. 'sbert_wk:{max(0, num_layers + 1 - max(3, window + 1))}:{window}')."
        )


def _unit_columns(r):
    """Columns of `r` [..., m, n] scaled to unit norm (zero columns stay zero)."""
    norms = tf.norm(r, axis=-2, keepdims=True)
    return tf.math.divide_no_nan(r, norms)


def sbert_wk_pool(hidden_states, padding_mask, layer_start=DEFAULT_LAYER_START,
                  window=DEFAULT_WINDOW):
    """SBERT-WK sentence vectors from all hidden states.

    Args:
        hidden_states: list of `L + 1` tensors `[B, T, D]` (the embedding
            output first).
        padding_mask: `[B, T]`, 1 for real tokens (contiguous from 0).
        layer_start: int. First fused hidden state (0 = embedding output).
            Defaults to `4` (the authors' setting for 12-layer BERT).
        window: int. Context window size. Defaults to `2`.

    Returns:
        float32 tensor `[B, D]` (float64 for float64 inputs).
    """
    dtype = "float64" if hidden_states[0].dtype == tf.float64 else "float32"
    states = tf.stack([tf.cast(h, dtype) for h in hidden_states[layer_start:]], axis=2)
    num_fused = states.shape[2]
    # The QR factor R of a window (its vectors as columns) is the Cholesky
    # factor of the window's Gram matrix (up to row signs, to which both
    # scores are invariant). Gram matrices of all fused layers come from one
    # einsum, in float64: no QR of a [D, m] matrix per token and layer.
    gram = tf.einsum("btid,btjd->btij", tf.cast(states, "float64"), tf.cast(states, "float64"))
    alignment, novelty = [], []
    for k, rows in enumerate(layer_windows(num_fused, window)):
        m = len(rows)
        block = tf.gather(tf.gather(gram, rows, axis=2), rows, axis=3)  # [B, T, m, m]
        # A relative 1e-14 ridge keeps Cholesky defined for dependent vectors.
        ridge = 1e-14 * tf.linalg.trace(block)[..., None, None] / m + 1e-300
        r = tf.linalg.matrix_transpose(
            tf.linalg.cholesky(block + ridge * tf.eye(m, dtype="float64"))
        )
        neighbours = _unit_columns(r[..., :-1, :-1])
        direction = tf.reduce_mean(neighbours, axis=-1)  # [B, T, m - 1]
        column = r[..., :, -1]  # the token's coordinates [B, T, m]
        cosine = tf.reduce_sum(direction * column[..., :-1], axis=-1) / tf.norm(
            column[..., :-1], axis=-1
        )
        alignment.append(1.0 / (cosine * float(m) * 2.0))
        novelty.append(tf.abs(column[..., -1]) / tf.norm(column, axis=-1))
    alignment = tf.stack(alignment, axis=-1)  # [B, T, n]
    novelty = tf.stack(novelty, axis=-1)
    alpha = alignment / tf.reduce_sum(alignment, -1, keepdims=True) + novelty / tf.reduce_sum(
        novelty, -1, keepdims=True
    )
    alpha = tf.cast(alpha / tf.reduce_sum(alpha, -1, keepdims=True), dtype)
    tokens = tf.einsum("btn,btnd->btd", alpha, states)

    # Cosines of adjacent layers, from the float64 Gram matrices: their
    # variance is small and float32 cancellation would dominate it.
    norms = tf.sqrt(tf.linalg.diag_part(gram))  # [B, T, n]
    adjacent = tf.math.divide_no_nan(
        tf.linalg.diag_part(gram[..., :-1, 1:]), norms[..., :-1] * norms[..., 1:]
    )  # [B, T, n - 1]
    variance = tf.cast(tf.math.reduce_variance(adjacent, axis=-1), dtype)  # [B, T]

    mask = tf.cast(padding_mask, "int32")
    length = tf.reduce_sum(mask, axis=1, keepdims=True)
    # The real tokens but the last one ([SEP]); at least [CLS].
    keep = tf.logical_and(
        mask > 0, tf.cumsum(mask, axis=1) < tf.maximum(length, 2)
    )
    variance = tf.where(keep, variance, tf.zeros_like(variance))
    weights = tf.math.divide_no_nan(variance, tf.reduce_sum(variance, 1, keepdims=True))
    # NaN/inf scores of padding positions must not leak through a zero weight.
    tokens = tf.where(keep[:, :, None], tokens, tf.zeros_like(tokens))
    return tf.einsum("bt,btd->bd", weights, tokens)
