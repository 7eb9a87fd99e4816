"""TSDAE's noise: words deleted from the encoder's input, in the `tf.data` pipeline.

The paper deletes words (NLTK's tokens) with probability 0.6 and keeps at
least one. Here a word is a run of characters between spaces, with each
punctuation mark, symbol and CJK ideograph a word of its own (as BERT's
basic tokenizer splits them, and as NLTK splits punctuation); the kept
words are joined by single spaces. For WordPiece tokenizers that is the
same token sequence as the reference's detokenized text.
"""

import tensorflow as tf

# A punctuation mark, a symbol or a CJK ideograph: each a word of its own.
_OWN_WORD = r"([\p{P}\p{S}\p{Han}])"


def split_words(texts):
    """The words of each text: a ragged string tensor `[B, None]`."""
    return tf.strings.split(tf.strings.regex_replace(texts, _OWN_WORD, r" \1 "))


def delete_words(texts, key, rate):
    """Each text with each of its words deleted with probability `rate`, at least one kept.

    A pure function of `key`: the same key deletes the same words. A text
    without words (empty or blank) is returned as it is.

    Args:
        texts: string tensor `[B]`.
        key: int64 tensor `[2]`, a stateless random key.
        rate: float in `[0, 1]`.

    Returns:
        string tensor `[B]`.
    """
    words = split_words(texts)
    counts = words.row_lengths()
    keys = tf.random.experimental.stateless_split(tf.cast(key, tf.int64), 2)
    keep = tf.random.stateless_uniform(tf.shape(words.flat_values), seed=keys[0]) >= rate
    # A row that kept nothing keeps one of its words, drawn uniformly.
    kept = tf.reduce_sum(tf.cast(words.with_flat_values(keep), tf.int64), axis=1)
    pick = tf.cast(tf.random.stateless_uniform(tf.shape(counts), seed=keys[1])
                   * tf.cast(counts, tf.float32), tf.int64)
    pick = tf.minimum(pick, tf.maximum(counts - 1, 0))
    rescue = tf.logical_and(tf.equal(kept, 0), counts > 0)
    flat_index = words.row_starts() + pick
    forced = tf.scatter_nd(tf.boolean_mask(flat_index, rescue)[:, None],
                           tf.ones_like(tf.boolean_mask(flat_index, rescue), tf.bool),
                           tf.shape(keep, out_type=tf.int64))
    keep = tf.logical_or(keep, forced)
    kept_words = tf.ragged.boolean_mask(words, words.with_flat_values(keep))
    joined = tf.strings.reduce_join(kept_words, axis=1, separator=" ")
    return tf.where(counts > 0, joined, texts)


def deletion_view(rate):
    """`fn(texts, key)` for `with_text_views`: the deleted-word view at `rate`."""
    rate = float(rate)

    def view(texts, key):
        return delete_words(texts, key, rate)

    return view
