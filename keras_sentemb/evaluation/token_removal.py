"""Frequent-token removal (ConSERT, Figure 4): STS as the top-k frequent tokens leave the average.

ConSERT shows that the sentence vectors of an un-tuned BERT are dominated by
a few very frequent tokens: removing the top-k most frequent tokens from the
average pooling *raises* BERT's STS-B correlation, while a contrastively
trained encoder barely changes. Here the last layer's token vectors are
averaged over every real token except the `k` most frequent ones (the
attention is untouched), for each `k` in `top_k`, from one forward pass.
Frequencies are counted over `frequency_corpus` (default: the evaluated
sentences themselves). As in the paper, `[CLS]` and `[SEP]` (`<s>`, `</s>`)
are counted too, once per sentence each, so they are ranked among the most
frequent tokens (Figure 4: "we also considered the [CLS] and [SEP] tokens
and they are the 2 most frequent tokens"); `count_special=False` never ranks
them (they then stay in every average, as in plain mean pooling). Padding
is never counted.

References:
    - [Yan et al., 2021. ConSERT: A Contrastive Framework for Self-Supervised
      Sentence Representation Transfer](https://arxiv.org/abs/2105.11741),
      section 6.3 and Figure 4.
"""

import math

from scipy.stats import spearmanr
import numpy as np
import tensorflow as tf

from keras_sentemb import validation
from keras_sentemb.evaluation import _plotting
from keras_sentemb.evaluation.readers import load_stsb_pairs
from keras_sentemb.evaluation.sts import cosine_scores
from keras_sentemb.models.encoding_engine import to_text

DEFAULT_TOP_K = (0, 1, 2, 3, 5, 10, 20, 50, 100)


def token_frequencies(encoder, sentences):
    """Count of every token id over `sentences` (no special tokens added), `[vocabulary]`."""
    size = int(encoder.backbone.vocabulary_size)
    if not sentences:
        return np.zeros(size, dtype=np.int64)
    ids, _, _ = encoder._tokenize_to_numpy(list(sentences))  # the bulk tokenizer `encode` uses
    return np.bincount(ids, minlength=size)[:size].astype(np.int64)


def frequent_token_removal(
    encoder,
    data="stsb",
    split="dev",
    top_k=DEFAULT_TOP_K,
    frequency_corpus=None,
    batch_size=128,
    max_length=None,
    path=None,
    title=None,
    count_special=True,
):
    """STS Spearman x100 with the top-k frequent tokens removed from mean pooling.

    Args:
        encoder: `SentenceEncoder`.
        data: `"stsb"`, a path to an STS-B csv/folder or a list of
            `(s1, s2, score)`. Defaults to `"stsb"`.
        split: str. Defaults to `"dev"`.
        top_k: sequence of int >= 0. Defaults to `(0, 1, 2, 3, 5, 10, 20, 50, 100)`.
        frequency_corpus: list of str, a text file (one sentence a line) or
            None (the evaluated sentences). Defaults to None.
        batch_size: int. Defaults to `128`.
        max_length: int or None. Defaults to the encoder's.
        path: str or None. Write the plot to this PNG. Defaults to None.
        title: str or None. Plot title.
        count_special: bool. Count the start / end tokens once per sentence
            (the paper's ranking) or never rank them. Defaults to `True`.

    Returns:
        A JSON-serialisable dict: `points` (`[{"k", "spearman", "removed"}]`,
        `removed` the tokens taken out at that `k`, up to 20 shown),
        `split`, `num_pairs`, `frequency_corpus`, `protocol`, `plot`.

    Examples:

    ```python
    before = frequent_token_removal(SentenceEncoder.from_preset("runs/untuned-minilm"))
    after = frequent_token_removal(SentenceEncoder.from_preset("default"))
    plot_token_removal({"un-tuned": before, "trained": after}, "removal.png")
    ```

    References:
        - [Yan et al., 2021](https://arxiv.org/abs/2105.11741), Figure 4.
    """
    top_k = [validation.non_negative_int(k, "top_k") for k in top_k]
    if not top_k:
        raise ValueError("`top_k` is empty.")
    pairs = load_stsb_pairs(data, split)
    sentences = sorted({s for p in pairs for s in (p[0], p[1])})
    if frequency_corpus is None:
        corpus, corpus_name = sentences, f"the evaluated sentences (STS-B {split})"
    elif isinstance(frequency_corpus, (str, bytes)) or hasattr(frequency_corpus, "__fspath__"):
        with open(frequency_corpus, encoding="utf-8", errors="replace") as f:
            corpus = [line.strip() for line in f if line.strip()]
        corpus_name = str(frequency_corpus)
    else:
        corpus, corpus_name = [to_text(s, i) for i, s in enumerate(frequency_corpus)], "given list"
    counts = token_frequencies(encoder, corpus)
    specials = {encoder.start_token_id, encoder.end_token_id}
    for special in specials | {encoder.pad_token_id}:
        counts[special] = -1
    if count_special:  # every packed sentence holds one start and one end token
        for special in specials - {encoder.pad_token_id}:
            counts[special] = len(corpus)
    ranking = np.argsort(-counts, kind="stable")
    max_length = encoder.max_length if max_length is None else max_length

    spec = tf.TensorSpec([None, None], tf.int32)

    @tf.function(input_signature=[spec, spec], reduce_retracing=True)
    def last_states(token_ids, padding_mask):
        states = encoder.hidden_states({"token_ids": token_ids, "padding_mask": padding_mask})
        return tf.cast(states[-1], tf.float32)

    vectors = np.zeros((len(top_k), len(sentences), encoder.hidden_dim), np.float32)
    removed_sets = [ranking[:k] for k in top_k]
    for idx, token_ids, mask in encoder.packed_batches(sentences, batch_size, max_length):
        states = last_states(token_ids, mask).numpy()
        for j, removed in enumerate(removed_sets):
            keep = mask.astype(bool) & ~np.isin(token_ids, removed)
            total = np.einsum("bth,bt->bh", states, keep.astype(np.float32))
            vectors[j, idx] = total / np.maximum(keep.sum(axis=1, keepdims=True), 1e-9)
    index = {s: i for i, s in enumerate(sentences)}
    a_idx = [index[p[0]] for p in pairs]
    b_idx = [index[p[1]] for p in pairs]
    gold = np.array([p[2] for p in pairs])
    vocabulary = encoder.tokenizer.get_vocabulary() if hasattr(encoder.tokenizer, "get_vocabulary") else None
    points = []
    for j, k in enumerate(top_k):
        head = np.asarray(encoder.head(tf.constant(vectors[j])))
        rho = spearmanr(cosine_scores(head[a_idx], head[b_idx]), gold).correlation
        shown = removed_sets[j][:20].tolist()
        points.append({
            "k": k,
            "spearman": None if rho is None or math.isnan(rho) else float(100 * rho),
            "removed": [vocabulary[t] for t in shown] if vocabulary else shown,
        })
    result = {
        "points": points,
        "split": split if not isinstance(data, (list, tuple)) else "custom",
        "num_pairs": len(pairs),
        "frequency_corpus": corpus_name,
        "protocol": "STS Spearman x100 of cosine, mean of the last layer's token vectors "
                    "without the k most frequent tokens ("
                    + ("[CLS]/[SEP] counted once per sentence, as the paper"
                       if count_special else "special tokens never ranked") + ")",
        "count_special": bool(count_special),
        "plot": None,
    }
    if path is not None:
        result["plot"] = str(plot_token_removal(result, path, title=title))
    return result


def plot_token_removal(results, path, title=None):
    """Spearman against k (log-scaled k + 1) for one result or `{name: result}` (PNG)."""
    results = _plotting.named_results(results, "points", "token removal")
    fig, ax = _plotting.axes()
    for name, res in results.items():
        ks = [p["k"] for p in res["points"]]
        ys = [np.nan if p["spearman"] is None else p["spearman"] for p in res["points"]]
        ax.plot([k + 1 for k in ks], ys, "o-", label=name or None)
    ax.set_xscale("log")
    ticks = [p["k"] for p in next(iter(results.values()))["points"]]
    ax.set_xticks([k + 1 for k in ticks])
    ax.set_xticklabels([str(k) for k in ticks])
    ax.set_xlabel("top-k frequent tokens removed from the average")
    ax.set_ylabel("STS Spearman x100")
    ax.set_title(title or "Frequent-token removal (ConSERT Fig. 4)")
    ax.grid(alpha=0.3)
    return _plotting.save(fig, path, legend=any(results))
