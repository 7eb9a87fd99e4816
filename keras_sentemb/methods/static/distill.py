"""`distill_static`: a static encoder from any encoder, with no training data.

The recipe is model2vec's (Tulkens & van Dongen, 2024): every token of the
teacher's vocabulary goes through the teacher alone (`[CLS] token [SEP]`),
and its sentence vector becomes the token's vector; PCA then centres the
vectors and keeps the `dims` directions of largest variance (removing the
common direction all token vectors share, which dominates cosine
similarity otherwise), and each token is weighted by `a / (a + p(token))`
(SIF, Arora et al., 2017), with `p` estimated from the token's rank by
Zipf's law (model2vec's default; BERT-family vocabularies are roughly in
frequency order past their reserved tokens) or counted on a corpus. Each
step's effect on STS-B dev is measured in docs/guides/static.md.
"""

import re

import numpy as np

from keras_sentemb.models import static_runtime

WEIGHTINGS = ("zipf", "sif", "none")
VECTORS = ("output", "pooled")
# Reserved, never-seen tokens of BERT vocabularies: left out of the Zipf ranks (as model2vec
# leaves them out of its vocabulary), so the ranks start at the real tokens.
UNUSED_TOKEN = re.compile(r"^\[unused\d+\]$")


def check_dims(dims, teacher_dim):
    """`dims` checked: None (no PCA) or an int in [1, teacher_dim]."""
    if dims is None:
        return None
    if isinstance(dims, bool) or not isinstance(dims, (int, np.integer)) or not (
            1 <= dims <= teacher_dim):
        raise ValueError(f"`dims` must be None or an int in [1, {teacher_dim}] (the teacher's "
                         f"size); received {dims!r}.")
    return int(dims)


def zipf_probabilities(tokens):
    """Token probabilities from their vocabulary rank: `p(r) ~ 1 / (r + 2)` (Zipf's law).

    Ranks count the tokens in id order, special and `[unusedN]` tokens left
    out (they get the smallest probability).

    Args:
        tokens: list of str, indexed by token id.

    Returns:
        float64 array `[V]` summing to 1 over the ranked tokens.
    """
    ranked = np.array([not (UNUSED_TOKEN.match(t) or (t.startswith("[") and t.endswith("]")))
                       for t in tokens])
    ranks = np.cumsum(ranked) - 1
    inverse = np.where(ranked, 1.0 / (ranks + 2.0), 0.0)
    inverse[~ranked] = inverse[ranked].min() if ranked.any() else 1.0
    return inverse / inverse[ranked].sum()


def corpus_probabilities(tokenizer, sentences, vocab_size, smoothing=1.0):
    """Token probabilities counted on `sentences` (add-`smoothing` counts).

    Args:
        tokenizer: `tokenizers.Tokenizer` (the teacher's).
        sentences: list of str.
        vocab_size: int.
        smoothing: float. Added to every count. Defaults to `1.0`.

    Returns:
        float64 array `[vocab_size]` summing to 1.
    """
    counts = np.full(vocab_size, float(smoothing))
    for start in range(0, len(sentences), 4096):
        batch = tokenizer.encode_batch(sentences[start:start + 4096], add_special_tokens=False)
        for encoding in batch:
            np.add.at(counts, np.asarray(encoding.ids, np.int64), 1.0)
    return counts / counts.sum()


def sif_weights(probabilities, coefficient=1e-4):
    """SIF weights `a / (a + p)` (Arora et al., 2017); model2vec's `a` is `1e-4`."""
    if not 0 < coefficient < 1:
        raise ValueError(f"`sif_coefficient` must be in (0, 1); received {coefficient!r}.")
    return (coefficient / (coefficient + np.asarray(probabilities))).astype(np.float32)


def pca(vectors, dims):
    """`(projected [V, dims], mean [D], components [D, dims])`: centred PCA by SVD.

    Components are ordered by variance, so the first `k` dimensions are the
    best `k`-dimensional summary (truncation keeps working, as Matryoshka
    training asks). `dims=None` only centres and rotates (all directions).
    """
    vectors = np.asarray(vectors, np.float64)
    mean = vectors.mean(axis=0)
    centred = vectors - mean
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    components = vt.T[:, :dims] if dims is not None else vt.T
    # A fixed sign per component (largest entry positive): the same table on every machine.
    signs = np.sign(components[np.abs(components).argmax(axis=0), np.arange(components.shape[1])])
    components = components * np.where(signs == 0, 1.0, signs)
    return (centred @ components).astype(np.float32), mean.astype(np.float32), components.astype(
        np.float32)


def teacher_token_vectors(teacher, vectors="output", batch_size=1024):
    """The teacher's vector of every vocabulary token, each encoded alone: `[V, D]` float32.

    Token `t` is the sequence `[CLS] t [SEP]` (the teacher's start and end
    tokens), encoded with the teacher's pooling.

    Args:
        teacher: `SentenceEncoder`.
        vectors: str. `"output"`: the teacher's sentence vector as `encode`
            gives it (projection head, L2 normalisation, post-processing
            included); `"pooled"`: the pooled hidden states (head, no
            normalisation), as model2vec takes them. Defaults to `"output"`.
        batch_size: int. Tokens per forward pass. Defaults to `1024`.
    """
    import tensorflow as tf

    if vectors not in VECTORS:
        raise ValueError(f"`vectors` must be one of {VECTORS}; received {vectors!r}.")
    size = int(teacher.tokenizer.vocabulary_size())

    @tf.function(reduce_retracing=True)
    def run(inputs):
        if vectors == "output":
            return teacher(inputs, training=False)
        return teacher.sentence_vectors(inputs, training=False)

    out = []
    for start in range(0, size, batch_size):
        ids = np.arange(start, min(start + batch_size, size), dtype=np.int32)
        packed = np.stack([np.full_like(ids, teacher.start_token_id), ids,
                           np.full_like(ids, teacher.end_token_id)], axis=1)
        inputs = {"token_ids": packed, "padding_mask": np.ones_like(packed, bool),
                  "segment_ids": np.zeros_like(packed)}
        out.append(np.asarray(run(inputs), np.float32))
    return np.concatenate(out)


def teacher_tokenizer(teacher):
    """The teacher's tokenizer as a `tokenizers.Tokenizer` (padding and truncation off).

    Built by the package's Hugging Face tokenizer writer, so it tokenizes
    as the teacher's keras-hub tokenizer does (BERT WordPiece or RoBERTa
    byte-level BPE).
    """
    import tempfile
    from pathlib import Path

    from keras_sentemb.export.hf_tokenizer import write_tokenizer_files

    with tempfile.TemporaryDirectory(prefix="sentemb-static-") as folder:
        write_tokenizer_files(teacher, Path(folder))
        return static_runtime.load_tokenizer(Path(folder) / static_runtime.TOKENIZER_FILE)


def special_token_mask(teacher):
    """`[V]` float32: 0 for the teacher's special tokens (start, end, padding), 1 otherwise."""
    keep = np.ones(int(teacher.tokenizer.vocabulary_size()), np.float32)
    for token_id in {teacher.start_token_id, teacher.end_token_id, teacher.pad_token_id}:
        keep[token_id] = 0.0
    return keep


def token_weights(tokenizer, tokens, weighting, sif_coefficient, corpus):
    """The per-token weights of `weighting` (`"zipf"`, `"sif"` on `corpus`, `"none"`)."""
    if weighting == "none":
        return np.ones(len(tokens), np.float32)
    if weighting == "zipf":
        return sif_weights(zipf_probabilities(tokens), sif_coefficient)
    if weighting == "sif":
        from keras_sentemb.data.corpus import load_corpus
        from keras_sentemb.data.resources import bundled_corpus

        sentences = load_corpus(str(bundled_corpus()) if corpus is None else corpus)
        return sif_weights(corpus_probabilities(tokenizer, sentences, len(tokens)),
                           sif_coefficient)
    raise ValueError(f"`weighting` must be one of {WEIGHTINGS}; received {weighting!r}.")


def distill_static(teacher="default", dims=256, weighting="zipf", sif_coefficient=1e-4,
                   corpus=None, vectors="pooled", normalize=True, table_dtype="float32",
                   batch_size=1024):
    """A `StaticEncoder` distilled from `teacher` in one pass over its vocabulary.

    Every vocabulary token is encoded by the teacher alone; PCA centres the
    token vectors and keeps `dims` directions; each token is weighted by SIF
    weights from Zipf-estimated (or counted) frequencies. No sentences are
    needed and nothing is trained (model2vec's recipe; `keras-sentemb train
    static` trains the result further on a corpus). On 2 CPU cores the
    default model distils in under a minute.

    Args:
        teacher: `SentenceEncoder` or a model name / folder (see
            `SentenceEncoder.from_preset`). Defaults to `"default"`.
        dims: int or None. Size of the static vectors (PCA components);
            None keeps the teacher's size, without PCA. Defaults to `256`.
        weighting: str. `"zipf"` (SIF weights with probabilities from the
            vocabulary rank, model2vec's default), `"sif"` (SIF weights with
            token frequencies counted on `corpus`) or `"none"`. Defaults to
            `"zipf"`.
        sif_coefficient: float. SIF's `a` in `a / (a + p)`. Defaults to
            `1e-4` (model2vec's).
        corpus: sentences for `"sif"`: list of str or a text file. Defaults
            to the bundled 10,000 Wikipedia sentences.
        vectors: str. `"pooled"` (the teacher's pooled hidden states, not
            normalised, as model2vec takes them) or `"output"` (the
            teacher's vectors as `encode` returns them, L2-normalised:
            the space `train static` distils towards, so it starts from
            these). Defaults to `"pooled"`: 1.1 points better on STS-B dev
            for the default model at 256 dimensions (79.1 against 78.0).
        normalize: bool. The static encoder L2-normalises. Defaults to `True`.
        table_dtype: str. How the table is saved: `"float32"`, `"float16"`
            or `"int8"`. Defaults to `"float32"`.
        batch_size: int. Tokens per teacher forward pass. Defaults to `1024`.

    Returns:
        A `StaticEncoder` with the teacher's tokenizer; its `info` records
        the settings and `pca` the teacher-space map.

    Raises:
        ValueError: a setting is out of range (one line naming it).

    Examples:

    ```python
    static = keras_sentemb.distill_static("default", dims=256)
    static.save("static_minilm")   # keras-sentemb encode --model static_minilm ...
    ```

    References:
        - [Tulkens & van Dongen, 2024. Model2Vec](https://github.com/MinishLab/model2vec)
        - [Arora et al., 2017. A Simple but Tough-to-Beat Baseline for
          Sentence Embeddings](https://openreview.net/forum?id=SyK00v5xx)
    """
    from keras_sentemb.models.static_encoder import StaticEncoder
    from keras_sentemb.pipelines.scaffold import resolve_encoder

    if weighting not in WEIGHTINGS:
        raise ValueError(f"`weighting` must be one of {WEIGHTINGS}; received {weighting!r}.")
    source = teacher if isinstance(teacher, str) else getattr(teacher, "name", "teacher")
    teacher = resolve_encoder(teacher)
    dims = check_dims(dims, teacher.output_dim)
    tokenizer = teacher_tokenizer(teacher)
    tokens = [str(t) for t in teacher.tokenizer.get_vocabulary()]
    vectors_ = teacher_token_vectors(teacher, vectors, batch_size)
    projection = None
    if dims is not None:
        vectors_, mean, components = pca(vectors_, dims)
        projection = (mean, components)
    weights = token_weights(tokenizer, tokens, weighting, sif_coefficient, corpus)
    info = {"teacher": source,
            "distillation": {"dims": dims, "weighting": weighting,
                             "sif_coefficient": sif_coefficient, "vectors": vectors}}
    return StaticEncoder(vectors_, tokenizer, weights=weights, keep=special_token_mask(teacher),
                         normalize=normalize, pca=projection, info=info, table_dtype=table_dtype)
