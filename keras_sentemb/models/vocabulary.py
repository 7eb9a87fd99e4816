"""Growing a WordPiece vocabulary so that an encoder can learn a new script.

An English BERT vocabulary maps most of a new script to `[UNK]`: on Tatoeba's
Chinese sentences the default model turns 64 % of the characters into the same
token, so no amount of training can tell them apart. `extend_vocabulary`
finds the text units the tokenizer cannot represent, appends them to the
vocabulary, and grows the backbone's token-embedding matrix by as many
trainable rows; every other weight is copied unchanged.

Which units: the words the tokenizer hands to WordPiece (after the encoder's
`text_normalization`, the tokenizer's own lowercasing / accent stripping and
BERT's basic split, which makes every CJK ideograph and every punctuation
mark its own word) that WordPiece maps to `[UNK]`. Such a word of one
character (a Chinese character, a full-width symbol) is added whole; longer
words (an alphabet the vocabulary lacks) get WordPiece pieces learned on the
corpus (`keras_hub.tokenizers.compute_word_piece_vocabulary`), of which those
the corpus uses at least `min_count` times are added.

Text that tokenizes without any new token gets exactly the token ids and the
outputs it got before: WordPiece is greedy longest-match-first, so if the
longest match at every position is an old token in the larger vocabulary it
was the longest match in the old one too.

Supported: keras-hub WordPiece tokenizers (`BertTokenizer`). Byte-level BPE
(`RobertaTokenizer`) never produces an unknown token (every text is a
sequence of byte pieces), so there is nothing of that kind to add; it is
refused with an error.
"""

import collections
import logging

from scipy import sparse
import keras_hub
import numpy as np
import tensorflow as tf

from keras_sentemb import compat
from keras_sentemb import validation
from keras_sentemb.models.encoding_engine import to_text

logger = logging.getLogger(__name__)

INITS = ("mean", "pieces", "normal", "aligned")
ALIGNMENT_ITERATIONS = 5
# Model 1's EM holds one entry per (source token, target token) of every
# pair: ~100 per Tatoeba pair, a few hundred for longer sentences; at most
# this many pairs (evenly spaced) keep that to a few GB.
ALIGNMENT_MAX_PAIRS = 100000
CHUNK = 4096


def can_extend(encoder):
    """Whether `extend_vocabulary` supports the encoder's tokenizer (WordPiece)."""

    return isinstance(encoder.tokenizer, keras_hub.tokenizers.WordPieceTokenizer)


def _check_wordpiece(encoder):
    tokenizer = encoder.tokenizer
    if not can_extend(encoder):
        raise ValueError(
            "Vocabulary extension supports WordPiece tokenizers (BERT-family models); "
            f"this encoder's tokenizer is a {type(tokenizer).__name__}. Byte-level BPE "
            "(RoBERTa) has no unknown token: every text is already a sequence of byte "
            "pieces, so there is nothing of that kind to add."
        )
    rows = int(encoder.adapter.token_embedding.input_dim)
    if rows != tokenizer.vocabulary_size():
        raise ValueError(
            f"The token embedding has {rows} rows but the tokenizer has "
            f"{tokenizer.vocabulary_size()} tokens; extension needs them equal."
        )
    return tokenizer


def _sentences(corpus):
    if isinstance(corpus, (str, bytes)):
        raise ValueError(
            "`corpus` must be a list of sentences (one str each), received a single "
            f"{type(corpus).__name__}."
        )
    try:
        sentences = [to_text(s, i) for i, s in enumerate(corpus)]
    except TypeError as e:
        raise ValueError(str(e)) from None
    if not sentences:
        raise ValueError("`corpus` is empty; pass the sentences of the new language.")
    return sentences


def _token_rows(tokenizer, texts):
    """Token ids of each text (the tokenizer only), as a flat array + row lengths."""
    # In a graph: eager keras-hub tokenizers return Python lists.
    tokenize = tf.function(tokenizer, input_signature=[tf.TensorSpec([None], tf.string)])
    flat, lengths = [], []
    for i in range(0, len(texts), CHUNK):
        ragged = tokenize(tf.constant([t.encode("utf-8") for t in texts[i : i + CHUNK]]))
        flat.append(ragged.flat_values.numpy())
        lengths.append(ragged.row_lengths().numpy())
    return np.concatenate(flat).astype(np.int64), np.concatenate(lengths).astype(np.int64)


def unknown_words(encoder, corpus):
    """The words of `corpus` that the encoder's tokenizer maps to `[UNK]`, counted.

    Words are what the tokenizer hands to WordPiece: after the encoder's
    `text_normalization` and the tokenizer's own lowercasing, accent
    stripping and basic split (punctuation and every CJK ideograph are words
    of their own).

    Args:
        encoder: `SentenceEncoder` with a WordPiece tokenizer.
        corpus: list of str.

    Returns:
        `collections.Counter` {word: occurrences}.

    Examples:

    >>> from keras_sentemb.models import SentenceEncoder
    >>> encoder = SentenceEncoder.from_preset("default")
    >>> unknown_words(encoder, ["我喜欢猫。", "Cats!"]).most_common()
    [('喜', 1), ('欢', 1), ('猫', 1)]
    """
    tokenizer = _check_wordpiece(encoder)
    sentences = _sentences(corpus)
    counts = collections.Counter()
    for i in range(0, len(sentences), CHUNK):
        text = encoder.clean_text(tf.constant([s.encode("utf-8") for s in sentences[i : i + CHUNK]]))
        words = compat.wordpiece_words(tokenizer, text)
        counts.update(words.flat_values.numpy().tolist())
    words = [w.decode("utf-8") for w in counts]
    if not words:
        return collections.Counter()
    flat, lengths = _token_rows(tokenizer, words)
    unk = np.zeros(len(words), bool)
    rows = np.repeat(np.arange(len(words)), lengths)
    unk[rows[flat == tokenizer.token_to_id(tokenizer.oov_token)]] = True
    return collections.Counter(
        {w: counts[w.encode("utf-8")] for w, is_unk in zip(words, unk) if is_unk}
    )


def _learned_pieces(tokenizer, words, max_new_tokens):
    """WordPiece pieces learned on `words` ({word: count}), with their use counts.

    The pieces are learned on the unknown words alone; a learned piece that
    the vocabulary already has is not new. Use counts are the occurrences of
    each new piece when the words are tokenized with the old vocabulary plus
    all learned pieces.
    """
    occurrences = [w for w, c in words.items() for _ in range(c)]
    data = tf.data.Dataset.from_tensor_slices(tf.constant(occurrences)).batch(1024)
    learned = keras_hub.tokenizers.compute_word_piece_vocabulary(
        data, vocabulary_size=max_new_tokens + 1, split=False,
        suffix_indicator=tokenizer.suffix_indicator, reserved_tokens=[tokenizer.oov_token],
    )
    old = tokenizer.get_vocabulary()
    known = set(old)
    new = [p for p in learned if p not in known and not any(c.isspace() for c in p)]
    if not new:
        return {}
    probe = keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=old + new, lowercase=False, strip_accents=False,  # words split again are the same words
        suffix_indicator=tokenizer.suffix_indicator, oov_token=tokenizer.oov_token,
    )
    unique = list(words)
    flat, lengths = _token_rows(probe, unique)
    weights = np.repeat([words[w] for w in unique], lengths)
    uses = np.bincount(flat, weights=weights, minlength=len(old) + len(new))
    return {p: int(uses[len(old) + i]) for i, p in enumerate(new)}


def new_vocabulary_units(encoder, corpus, max_new_tokens=10000, min_count=2):
    """The tokens `extend_vocabulary` would add, most frequent first.

    Unknown words (see `unknown_words`) of one character are candidates
    whole; for longer ones WordPiece pieces are learned on them. Candidates
    seen fewer than `min_count` times are dropped, and at most
    `max_new_tokens` of the most frequent are kept (ties by text).

    Args:
        encoder: `SentenceEncoder` with a WordPiece tokenizer.
        corpus: list of str. Text in the new language (the training side).
        max_new_tokens: int. At most this many tokens. Defaults to `10000`.
        min_count: int. Minimum occurrences in `corpus`. Defaults to `2`.

    Returns:
        list of `(token, count)`.

    Examples:

    >>> from keras_sentemb.models import SentenceEncoder
    >>> encoder = SentenceEncoder.from_preset("default")
    >>> new_vocabulary_units(encoder, ["我喜欢猫。", "他喜欢狗。"], min_count=1)
    [('喜', 2), ('欢', 2), ('他', 1), ('狗', 1), ('猫', 1)]
    """
    tokenizer = _check_wordpiece(encoder)
    max_new_tokens = validation.positive_int(max_new_tokens, "max_new_tokens")
    min_count = validation.positive_int(min_count, "min_count")
    unknown = unknown_words(encoder, corpus)
    candidates = collections.Counter(
        {w: c for w, c in unknown.items() if len(w) == 1 and not w.isspace()}
    )
    longer = {w: c for w, c in unknown.items() if len(w) > 1}
    if longer:
        candidates.update(_learned_pieces(tokenizer, longer, max_new_tokens))
    kept = sorted(
        ((t, c) for t, c in candidates.items() if c >= min_count), key=lambda tc: (-tc[1], tc[0])
    )
    return kept[:max_new_tokens]


def unknown_token_share(encoder, sentences):
    """Share of the tokens of `sentences` that are the unknown token.

    Args:
        encoder: `SentenceEncoder`.
        sentences: list of str.

    Returns:
        float in [0, 1] (0 for a tokenizer without an unknown token).
    """
    oov = getattr(encoder.tokenizer, "oov_token", None)
    if oov is None:
        return 0.0
    flat = encoder.tokenize(_sentences(sentences)).flat_values.numpy()
    return float(np.mean(flat == encoder.tokenizer.token_to_id(oov))) if flat.size else 0.0


def _new_rows(table, tokens, init, tokenizer, seed):
    """Initial embedding rows of `tokens` from the old `table` [vocab, dim]."""
    table = np.asarray(table, np.float64)
    if init == "mean":
        return np.tile(table.mean(axis=0), (len(tokens), 1))
    if init == "normal":
        rng = np.random.default_rng(seed)
        return rng.normal(table.mean(axis=0), table.std(axis=0), size=(len(tokens), table.shape[1]))
    # "pieces": the mean of the rows of what the old tokenizer made of the unit.
    suffix = tokenizer.suffix_indicator
    texts = [t[len(suffix):] if t.startswith(suffix) and len(t) > len(suffix) else t for t in tokens]
    flat, lengths = _token_rows(tokenizer, texts)
    rows = np.tile(table.mean(axis=0), (len(tokens), 1))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    filled = lengths > 0
    if filled.any():
        sums = np.add.reduceat(table[flat], starts[filled], axis=0)
        rows[filled] = sums / lengths[filled, None]
    return rows


def _flat_ids(encoder, sentences):
    """Token ids of `sentences` (the encoder's tokenize): flat array + row starts."""
    flat, starts, _ = encoder._tokenize_to_numpy(sentences)
    return flat.astype(np.int64), starts


def alignment_probabilities(encoder, corpus, translations, iterations=ALIGNMENT_ITERATIONS,
                            max_pairs=ALIGNMENT_MAX_PAIRS):
    """IBM Model 1 translation probabilities t(source token | target token).

    Each target sentence (`corpus[i]`, tokenized by `encoder`) generates the
    tokens of its translation (`translations[i]`): every source token is
    drawn from one target token of the sentence, or from a NULL token that
    absorbs function words, with probability `t(source | target)`; EM from
    uniform probabilities for `iterations` rounds (Brown et al., 1993). Only
    token pairs that co-occur in a sentence pair are represented.

    Args:
        encoder: `SentenceEncoder`. Tokenizes both sides.
        corpus: list of str. Target sentences.
        translations: list of str. Their translations, aligned with `corpus`.
        iterations: int. EM rounds. Defaults to `5`.
        max_pairs: int. Larger corpora are subsampled to this many evenly
            spaced pairs (EM memory grows with the pairs). Defaults to
            `100000`.

    Returns:
        `(target_ids, source_ids, probabilities)`: three aligned 1-D arrays
        over co-occurring pairs (`target_ids == -1` is the NULL token); for
        each target token the probabilities sum to 1.

    References:
        - [Brown et al., 1993. The Mathematics of Statistical Machine
          Translation](https://aclanthology.org/J93-2003/)
    """
    corpus, translations = _sentences(corpus), _sentences(translations)
    if len(corpus) != len(translations):
        raise ValueError(
            f"`translations` must align with `corpus`: received {len(translations)} "
            f"translations for {len(corpus)} sentences."
        )
    iterations = validation.positive_int(iterations, "iterations")
    max_pairs = validation.positive_int(max_pairs, "max_pairs")
    if len(corpus) > max_pairs:
        keep = np.unique(np.linspace(0, len(corpus) - 1, max_pairs).astype(np.int64))
        corpus = [corpus[i] for i in keep]
        translations = [translations[i] for i in keep]
    target, target_starts = _flat_ids(encoder, corpus)
    source, source_starts = _flat_ids(encoder, translations)
    n = len(corpus)
    target_len = np.diff(np.append(target_starts, len(target)))
    source_len = np.diff(np.append(source_starts, len(source)))
    # Each target sentence gets a NULL token (-1) appended.
    with_null = np.insert(target, np.append(target_starts[1:], len(target)), -1)
    null_starts = target_starts + np.arange(n)
    # One triple per (source occurrence, target token of its sentence or NULL).
    sentence_of_source = np.repeat(np.arange(n), source_len)
    fan = target_len[sentence_of_source] + 1
    occurrence = np.repeat(np.arange(len(source)), fan)
    within = np.arange(fan.sum()) - np.repeat(np.cumsum(fan) - fan, fan)
    target_of = with_null[null_starts[sentence_of_source][occurrence] + within]
    source_of = source[occurrence]
    keys = (target_of + 1) * (int(source.max(initial=0)) + 1) + source_of
    unique, pair = np.unique(keys, return_inverse=True)
    pair_target = unique // (int(source.max(initial=0)) + 1) - 1
    pair_source = unique % (int(source.max(initial=0)) + 1)
    _, target_group = np.unique(pair_target, return_inverse=True)
    t = np.ones(len(unique))
    for _ in range(iterations):
        w = t[pair]
        z = np.bincount(occurrence, weights=w, minlength=len(source))
        counts = np.bincount(pair, weights=w / z[occurrence], minlength=len(unique))
        totals = np.bincount(target_group, weights=counts)
        t = counts / totals[target_group]
    return pair_target, pair_source, t


def _aligned_rows(encoder, grown, tokens, table, corpus, translations):
    """Rows of `tokens`: source-token rows weighted by t(source | token)."""

    if corpus is None or translations is None:
        raise ValueError("init='aligned' needs `corpus` and its `translations`.")
    first = table.shape[0]
    target, source, t = alignment_probabilities(grown, corpus, translations)
    keep = (target >= first) & (source < first)
    weights = sparse.csr_matrix(
        (t[keep], (target[keep] - first, source[keep])), shape=(len(tokens), first)
    )
    mass = np.asarray(weights.sum(axis=1)).ravel()
    rows = np.asarray(weights @ table.astype(np.float64))
    mean = table.astype(np.float64).mean(axis=0)
    unseen = mass <= 0
    rows[~unseen] /= mass[~unseen, None]
    rows[unseen] = mean  # a token the corpus never shows
    return rows


def add_vocabulary(encoder, tokens, init="mean", seed=0, name=None, corpus=None, translations=None):
    """A copy of `encoder` whose vocabulary ends with `tokens`.

    The tokenizer's vocabulary gets `tokens` appended (ids from the old
    vocabulary size on); the backbone is rebuilt from its config with the
    larger `vocabulary_size`, every weight copied, and the token-embedding
    matrix grown by one trainable row per token:

    - `"mean"`: the mean of the old rows (every new token starts alike);
    - `"pieces"`: the mean of the rows of the tokens the old tokenizer made
      of the unit (for an unknown character, the `[UNK]` row);
    - `"normal"`: drawn from a normal with the old rows' per-dimension mean
      and standard deviation (new tokens start distinguishable);
    - `"aligned"`: for translation pairs (`corpus` in the new language,
      `translations` in one the encoder knows), the rows of the source
      tokens weighted by the IBM Model 1 probability that the new token
      translates to them (`alignment_probabilities`): "猫" starts near
      "cat".

    Args:
        encoder: `SentenceEncoder` with a WordPiece tokenizer. Unchanged.
        tokens: list of str. New tokens (a word-continuation piece starts
            with the tokenizer's suffix indicator, `##`).
        init: str. `"mean"`, `"pieces"`, `"normal"` or `"aligned"`.
            Defaults to `"mean"`.
        seed: int. Seed of `"normal"`. Defaults to `0`.
        name: str or None. Name of the copy.
        corpus: list of str or None. Target sentences (for `"aligned"`).
        translations: list of str or None. Their translations (for
            `"aligned"`).

    Returns:
        A new `SentenceEncoder` (same pooling, head and settings).
    """
    tokenizer = _check_wordpiece(encoder)
    validation.choice(init, "init", INITS)
    tokens = list(tokens)
    old = list(tokenizer.get_vocabulary())
    known = set(old)
    for token in tokens:
        if not isinstance(token, str) or not token or any(c.isspace() for c in token):
            raise ValueError(f"New tokens must be non-empty str without white space, received {token!r}.")
        if token in known:
            raise ValueError(f"{token!r} is already in the vocabulary (or given twice).")
        known.add(token)
    grown = type(tokenizer).from_config(tokenizer.get_config())
    grown.split_on_cjk = tokenizer.split_on_cjk  # not in keras-hub's config
    grown.set_vocabulary(old + tokens)

    backbone = encoder.backbone
    variable = encoder.adapter.token_embedding.embeddings
    weights = backbone.get_weights()
    index = [i for i, w in enumerate(backbone.weights) if w.path == variable.path]
    if len(index) != 1:
        raise ValueError(f"Cannot find the token embedding {variable.path} among the backbone's weights.")
    table = weights[index[0]]
    rows = _new_rows(table, tokens, "mean" if init == "aligned" else init, tokenizer, seed)
    weights[index[0]] = np.concatenate([table, rows.astype(table.dtype)], axis=0)
    config = backbone.get_config()
    config["vocabulary_size"] = len(old) + len(tokens)
    new_backbone = type(backbone).from_config(config)
    new_backbone.set_weights(weights)
    copy = encoder.clone(name=name or encoder.name, backbone=new_backbone, tokenizer=grown)
    if init == "aligned":  # needs the grown tokenizer to find the new tokens in `corpus`
        rows = _aligned_rows(encoder, copy, tokens, table, corpus, translations)
        weights[index[0]][len(old):] = rows.astype(table.dtype)
        copy.adapter.token_embedding.embeddings.assign(weights[index[0]])
    return copy


def extend_vocabulary(encoder, corpus, max_new_tokens=10000, min_count=2, init="mean", seed=0,
                      translations=None):
    """A copy of `encoder` that can represent the text units of `corpus` it could not.

    Finds the units the tokenizer maps to `[UNK]` (`new_vocabulary_units`:
    characters such as CJK ideographs, which BERT's basic tokenizer splits
    one by one, whole; WordPiece pieces learned on the corpus for longer
    unknown words), appends them to the vocabulary and grows the
    token-embedding matrix (`add_vocabulary`). Outputs for text that uses
    no new token are exactly those of `encoder`. The copy saves, loads and
    exports like any encoder (the saved tokenizer holds the new vocabulary).

    Args:
        encoder: `SentenceEncoder` with a WordPiece tokenizer. Unchanged.
        corpus: list of str. Text in the new language (training data only).
        max_new_tokens: int. At most this many new tokens. Defaults to
            `10000`.
        min_count: int. Minimum occurrences of a new token in `corpus`.
            Defaults to `2`.
        init: str. Initial rows: `"mean"`, `"pieces"`, `"normal"` or
            `"aligned"` (see `add_vocabulary`). Defaults to `"mean"`.
        seed: int. Seed of `"normal"`. Defaults to `0`.
        translations: list of str or None. The translation of each `corpus`
            sentence in a language the encoder knows (needed by
            `"aligned"`).

    Returns:
        A new `SentenceEncoder`; `encoder` itself (a copy) when nothing is
        unknown.

    Examples:

    >>> import keras_sentemb
    >>> encoder = keras_sentemb.SentenceEncoder.from_preset("default")
    >>> zh = keras_sentemb.extend_vocabulary(encoder, ["我喜欢猫。", "他喜欢狗。"], min_count=1)
    >>> zh.tokenizer.vocabulary_size() - encoder.tokenizer.vocabulary_size()
    5
    >>> [zh.tokenizer.id_to_token(int(i)) for i in zh.tokenize(["他喜欢猫"])[0]]
    ['他', '喜', '欢', '猫']

    References:
        - [Wang et al., 2020. Extending Multilingual BERT to Low-Resource
          Languages](https://arxiv.org/abs/2004.13640)
    """
    validation.choice(init, "init", INITS)
    if init == "aligned" and translations is None:
        raise ValueError("init='aligned' needs `translations` (one per corpus sentence).")
    units = new_vocabulary_units(encoder, corpus, max_new_tokens, min_count)
    if not units:
        logger.info("extend_vocabulary: the tokenizer already represents the corpus; nothing added")
        return encoder.clone(name=encoder.name)
    logger.info(
        "extend_vocabulary: %d new tokens (%d single characters), e.g. %s",
        len(units), sum(len(t) == 1 for t, _ in units), " ".join(t for t, _ in units[:10]),
    )
    return add_vocabulary(encoder, [t for t, _ in units], init=init, seed=seed, corpus=corpus,
                          translations=translations)
