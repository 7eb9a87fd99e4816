"""Layer-wise STS survey: Spearman of every layer's mean-pooled output (CT, Figure 1).

Contrastive Tension's Figure 1 plots, for each layer of a pre-trained
Transformer (0 = the embedding output), the STS-B test Spearman correlation
of the cosine similarity of mean-pooled token vectors of that layer. For
BERT the middle layers beat the last one, which motivates CT. The survey
here encodes the sentences once and pools every layer from that single
forward pass (`encode_all_layers`, over `encode_poolings`), which gives the
same vectors as `encoder.encode(..., pooling=f"layer:{k}")` for each `k` in
`L + 1` passes.

References:
    - [Carlsson et al., 2021. Semantic Re-tuning with Contrastive
      Tension](https://openreview.net/forum?id=Ov_sMNau-PF), Figure 1.
"""

import math

from scipy.stats import spearmanr
import numpy as np
import tensorflow as tf

from keras_sentemb.evaluation import _plotting
from keras_sentemb.evaluation.readers import load_stsb_pairs
from keras_sentemb.evaluation.sts import cosine_scores
from keras_sentemb.models.encoding_engine import to_text
from keras_sentemb.models.pooling import masked_max
from keras_sentemb.models.pooling import parse_pooling


LAYER_POOLINGS = ("mean", "cls", "max")


def _layer_pooling(encoder, k, pooling):
    """`(states, padding_mask) -> ` layer `k`'s vectors: masked mean (`layer:k`), first token or masked max."""

    def pool(states, padding_mask):
        if pooling == "mean":
            return encoder.pool(states, padding_mask, f"layer:{k}")
        if pooling == "cls":
            return tf.cast(states[k][:, 0, :], tf.float32)
        return masked_max(states[k], padding_mask)

    return pool


def _encode_pooled(encoder, sentences, pool_fns, batch_size, max_length):
    """`[len(pool_fns), len(sentences), base_output_dim]`: each function's vectors through the head.

    One forward pass per batch, whatever the number of functions; a
    post-processing layer belongs to the encoder's own pooling, so it is
    left out (`head(..., postprocess=False)`).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive int, received {batch_size!r}.")
    max_length = encoder.max_length if max_length is None else max_length
    limit = int(encoder.backbone.max_sequence_length)
    if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)) or not 3 <= max_length <= limit:
        raise ValueError(f"`max_length` must be an int in [3, {limit}], received {max_length!r}.")
    sentences = [to_text(s, i) for i, s in enumerate(sentences)]
    n = len(sentences)
    out = np.zeros((len(pool_fns), n, encoder.base_output_dim), dtype=np.float32)
    if n:
        spec = tf.TensorSpec([None, None], tf.int32)

        @tf.function(input_signature=[spec, spec], reduce_retracing=True)
        def pooled(token_ids, padding_mask):
            inputs = {"token_ids": token_ids, "padding_mask": padding_mask}
            states = encoder.hidden_states(inputs, training=False)
            return tf.stack([
                encoder.head(fn(states, padding_mask), postprocess=False) for fn in pool_fns
            ])

        for idx, token_ids, mask in encoder.packed_batches(sentences, batch_size, max_length):
            out[:, idx] = pooled(token_ids, mask).numpy()
    return out


def encode_poolings(encoder, sentences, poolings, batch_size=128, max_length=None):
    """Vectors of `sentences` with several poolings, from one forward pass per batch.

    Each pooling's vectors pass through the encoder's head (projection and
    normalisation, if it has them) and equal `encoder.encode(sentences,
    pooling=p, postprocess=False)`: a post-processing layer belongs to the
    encoder's own pooling, so it is left out. Sentences are length-sorted and
    bucketed like `encode`. One pass instead of one per pooling: the
    Transformer runs once.

    Args:
        encoder: `SentenceEncoder`.
        sentences: list of str.
        poolings: list of pooling names (see `parse_pooling`).
        batch_size: int. Defaults to `128`.
        max_length: int or None. Defaults to the encoder's `max_length`.

    Returns:
        dict pooling (as given) -> float32 numpy array `[len(sentences),
        base_output_dim]`.
    """
    poolings = list(poolings)
    resolved = [parse_pooling(p, encoder.num_layers) for p in poolings]
    fns = [lambda states, mask, name=name: encoder.pool(states, mask, name) for name in resolved]
    return dict(zip(poolings, _encode_pooled(encoder, sentences, fns, batch_size, max_length)))


def encode_all_layers(encoder, sentences, batch_size=128, max_length=None, poolings=None):
    """Pooled vectors of every layer, from one forward pass per batch.

    Layer `k` (0 = the embedding output, `encoder.num_layers` = the last
    Transformer layer) is pooled as `pooling=f"layer:{k}"` (masked mean)
    and passed through the encoder's head (projection and normalisation, if
    it has them), exactly as `encoder.encode(sentences,
    pooling=f"layer:{k}", postprocess=False)` does. With `poolings`, each
    layer is also pooled by its first token (`"cls"`: `encoder.encode(...,
    pooling="cls")` at the last layer) and by the masked max (`"max"`).
    Sentences are length-sorted and bucketed like `encode`.

    Args:
        encoder: `SentenceEncoder`.
        sentences: list of str.
        batch_size: int. Defaults to `128`.
        max_length: int or None. Defaults to the encoder's `max_length`.
        poolings: tuple of str or None. Any of `"mean"`, `"cls"`, `"max"`;
            None means mean only and returns a single array. Defaults to None.

    Returns:
        float32 numpy array `[num_layers + 1, len(sentences), base_output_dim]`;
        with `poolings`, a dict `{pooling: such an array}`.
    """
    single = poolings is None
    poolings = ("mean",) if single else tuple(poolings)
    bad = [p for p in poolings if p not in LAYER_POOLINGS]
    if bad or not poolings:
        raise ValueError(f"`poolings` must be a non-empty subset of {LAYER_POOLINGS}. Received: {poolings!r}.")
    num_states = encoder.num_layers + 1
    fns = [_layer_pooling(encoder, k, p) for p in poolings for k in range(num_states)]
    out = _encode_pooled(encoder, sentences, fns, batch_size, max_length)
    out = out.reshape((len(poolings), num_states) + out.shape[1:])
    return out[0] if single else dict(zip(poolings, out))


def layer_survey(
    encoder,
    data="stsb",
    split="test",
    path=None,
    batch_size=128,
    max_length=None,
    title=None,
    pooling="mean",
):
    """STS Spearman of every layer's pooled output (CT paper, Figure 1).

    Args:
        encoder: `SentenceEncoder`.
        data: `"stsb"`, a path to an STS-B csv/folder, or a list of
            `(s1, s2, score)`. Defaults to `"stsb"`.
        split: str. `"train"`, `"dev"` or `"test"`. Defaults to `"test"`.
        path: str or None. Write the plot to this PNG file. Defaults to
            `None`.
        batch_size: int. Defaults to `128`.
        max_length: int or None. Defaults to the encoder's.
        title: str or None. Plot title.
        pooling: str or tuple of str. How each layer is pooled: `"mean"`
            (masked mean, `layer:k`), `"cls"` (the first token), `"max"`
            (masked max), or a tuple of those, all from one forward pass.
            Defaults to `"mean"`.

    Returns:
        A JSON-serialisable dict: `split`, `num_pairs`, `num_layers`,
        `metric` (`"spearman_x100"`), `layer_pooling`, `layers` (a list of
        `{"layer": k, "pooling": name, "spearman": s}` for
        `k = 0..num_layers`, name `layer:k` for mean, `cls@layer:k` /
        `max@layer:k` otherwise), `best_layer` and `plot` (the PNG path or
        None). For a tuple of poolings: `{pooling: such a dict}` (one plot
        with a curve each).

    Examples:

    ```python
    survey = layer_survey(SentenceEncoder.from_preset("default"), path="layers.png")
    [(l["layer"], round(l["spearman"], 2)) for l in survey["layers"]]
    ```

    References:
        - [Carlsson et al., 2021](https://openreview.net/forum?id=Ov_sMNau-PF)
    """
    pairs = load_stsb_pairs(data, split)
    sentences = sorted({s for p in pairs for s in (p[0], p[1])})
    index = {s: i for i, s in enumerate(sentences)}
    a_idx = [index[p[0]] for p in pairs]
    b_idx = [index[p[1]] for p in pairs]
    gold = np.array([p[2] for p in pairs], dtype=np.float64)
    poolings = (pooling,) if isinstance(pooling, str) else tuple(pooling)
    vectors = encode_all_layers(encoder, sentences, batch_size, max_length, poolings=poolings)
    results = {}
    for name in poolings:
        layers = []
        for k, layer_vectors in enumerate(vectors[name]):
            rho = spearmanr(cosine_scores(layer_vectors[a_idx], layer_vectors[b_idx]), gold).correlation
            layers.append(
                {
                    "layer": k,
                    "pooling": f"layer:{k}" if name == "mean" else f"{name}@layer:{k}",
                    "spearman": None if rho is None or math.isnan(rho) else float(rho * 100),
                }
            )
        scored = [l for l in layers if l["spearman"] is not None]
        results[name] = {
            "split": split if not isinstance(data, (list, tuple)) else "custom",
            "num_pairs": len(pairs),
            "num_layers": int(encoder.num_layers),
            "metric": "spearman_x100",
            "layer_pooling": name,
            "layers": layers,
            "best_layer": max(scored, key=lambda l: l["spearman"])["layer"] if scored else None,
            "plot": None,
        }
    result = results[pooling] if isinstance(pooling, str) else results
    if path is not None:
        plot = str(plot_layer_survey(result, path, title=title))
        for r in results.values():
            r["plot"] = plot
    return result


def plot_layer_survey(results, path, title=None):
    """Plot Spearman per layer to a PNG (matplotlib, Agg).

    Args:
        results: one `layer_survey` dict, or `{name: result}` to compare
            models (e.g. before / after training) on one plot.
        path: str or path. The PNG file.
        title: str or None. Defaults to "Layer-wise STS survey".

    Returns:
        `path`.
    """
    results = _plotting.named_results(results, "layers", "survey")
    fig, ax = _plotting.axes()
    for name, res in results.items():
        ks = [l["layer"] for l in res["layers"]]
        ys = [np.nan if l["spearman"] is None else l["spearman"] for l in res["layers"]]
        ax.plot(ks, ys, "o-", label=name or None)
        ax.set_xticks(ks)
    split = next(iter(results.values())).get("split")
    ax.set_xlabel("layer (0 = embedding output)")
    ax.set_ylabel("STS Spearman x100" + (f" ({split})" if split not in (None, "custom") else ""))
    poolings = {r.get("layer_pooling", "mean") for r in results.values()}
    ax.set_title(title or f"Layer-wise STS survey ({'/'.join(sorted(poolings))} pooling)")
    ax.grid(alpha=0.3)
    return _plotting.save(fig, path, legend=any(results))
