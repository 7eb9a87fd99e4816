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

import numpy as np

from keras_sentemb.evaluation import _plotting


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
    import tensorflow as tf

    from keras_sentemb.models.pooling import parse_pooling
    from keras_sentemb.models.sentence_encoder import to_text

    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive int, received {batch_size!r}.")
    max_length = encoder.max_length if max_length is None else max_length
    limit = int(encoder.backbone.max_sequence_length)
    if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)) or not 3 <= max_length <= limit:
        raise ValueError(f"`max_length` must be an int in [3, {limit}], received {max_length!r}.")
    poolings = list(poolings)
    resolved = [parse_pooling(p, encoder.num_layers) for p in poolings]
    sentences = [to_text(s, i) for i, s in enumerate(sentences)]
    n = len(sentences)
    out = np.zeros((len(poolings), n, encoder.base_output_dim), dtype=np.float32)
    if n:
        spec = tf.TensorSpec([None, None], tf.int32)

        @tf.function(input_signature=[spec, spec], reduce_retracing=True)
        def pooled(token_ids, padding_mask):
            inputs = {"token_ids": token_ids, "padding_mask": padding_mask}
            states = encoder.hidden_states(inputs, training=False)
            return tf.stack([
                encoder.head(encoder.pool(states, padding_mask, p), postprocess=False)
                for p in resolved
            ])

        for idx, token_ids, mask in encoder.packed_batches(sentences, batch_size, max_length):
            out[:, idx] = pooled(token_ids, mask).numpy()
    return dict(zip(poolings, out))


def encode_all_layers(encoder, sentences, batch_size=128, max_length=None):
    """Mean-pooled vectors of every layer, from one forward pass per batch.

    Layer `k` (0 = the embedding output, `encoder.num_layers` = the last
    Transformer layer) is pooled as `pooling=f"layer:{k}"` (masked mean);
    see `encode_poolings`.

    Args:
        encoder: `SentenceEncoder`.
        sentences: list of str.
        batch_size: int. Defaults to `128`.
        max_length: int or None. Defaults to the encoder's `max_length`.

    Returns:
        float32 numpy array `[num_layers + 1, len(sentences), base_output_dim]`.
    """
    poolings = [f"layer:{k}" for k in range(encoder.num_layers + 1)]
    vectors = encode_poolings(encoder, sentences, poolings, batch_size, max_length)
    return np.stack([vectors[p] for p in poolings])


def layer_survey(
    encoder,
    data="stsb",
    split="test",
    path=None,
    batch_size=128,
    max_length=None,
    title=None,
):
    """STS Spearman of every layer's mean-pooled output (CT paper, Figure 1).

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

    Returns:
        A JSON-serialisable dict: `split`, `num_pairs`, `num_layers`,
        `metric` (`"spearman_x100"`), `layers` (a list of
        `{"layer": k, "pooling": "layer:k", "spearman": s}` for
        `k = 0..num_layers`), `best_layer` and `plot` (the PNG path or None).

    Examples:

    ```python
    survey = layer_survey(SentenceEncoder.from_preset("default"), path="layers.png")
    [(l["layer"], round(l["spearman"], 2)) for l in survey["layers"]]
    ```

    References:
        - [Carlsson et al., 2021](https://openreview.net/forum?id=Ov_sMNau-PF)
    """
    from scipy.stats import spearmanr

    from keras_sentemb.evaluation.sts import cosine_scores
    from keras_sentemb.evaluation.readers import load_stsb_pairs

    pairs = load_stsb_pairs(data, split)
    sentences = sorted({s for p in pairs for s in (p[0], p[1])})
    index = {s: i for i, s in enumerate(sentences)}
    a_idx = [index[p[0]] for p in pairs]
    b_idx = [index[p[1]] for p in pairs]
    gold = np.array([p[2] for p in pairs], dtype=np.float64)
    vectors = encode_all_layers(encoder, sentences, batch_size, max_length)
    layers = []
    for k, layer_vectors in enumerate(vectors):
        rho = spearmanr(cosine_scores(layer_vectors[a_idx], layer_vectors[b_idx]), gold).correlation
        layers.append(
            {
                "layer": k,
                "pooling": f"layer:{k}",
                "spearman": None if rho is None or math.isnan(rho) else float(rho * 100),
            }
        )
    scored = [l for l in layers if l["spearman"] is not None]
    result = {
        "split": split if not isinstance(data, (list, tuple)) else "custom",
        "num_pairs": len(pairs),
        "num_layers": int(encoder.num_layers),
        "metric": "spearman_x100",
        "layers": layers,
        "best_layer": max(scored, key=lambda l: l["spearman"])["layer"] if scored else None,
        "plot": None,
    }
    if path is not None:
        result["plot"] = str(plot_layer_survey(result, path, title=title))
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
    ax.set_title(title or "Layer-wise STS survey (mean pooling)")
    ax.grid(alpha=0.3)
    return _plotting.save(fig, path, legend=any(results))
