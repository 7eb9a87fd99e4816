"""BERT's reference text normalization, in graph (tf.strings / tf_text ops).

Hugging Face's `BertTokenizer` (what sentence-transformers runs) cleans and
normalizes text before splitting words: it deletes NUL, U+FFFD and every
control / format character except tab, newline and carriage return (so a
zero-width joiner or soft hyphen disappears rather than splitting a word),
maps all white space to a space, and for uncased vocabularies lower-cases
(`str.lower`) and strips accents (NFD, then drops combining marks). keras-hub's
WordPiece pre-tokenizer differs on these points (it case-folds with NFKC,
which rewrites "ß", ligatures, full-width forms and re-composes Hangul, and
keeps format characters as separators), so encoders loaded from Hugging Face
folders normalize here and run keras-hub's tokenizer with its own lowercasing
and accent stripping turned off.
"""

import tensorflow as tf
import tensorflow_text as tf_text

MODES = (None, "bert_uncased", "bert_cased")


def check_mode(mode):
    if mode not in MODES:
        raise ValueError(f"`text_normalization` must be one of {MODES}, received {mode!r}.")
    return mode


def normalize_text(text, mode):
    """Normalize a string tensor like Hugging Face's BERT basic tokenizer."""
    if mode is None:
        return text
    text = tf.strings.regex_replace(text, r"[\t\n\r]", " ")
    text = tf.strings.regex_replace(text, r"[\x00\x{FFFD}\p{Cc}\p{Cf}\p{Co}\p{Cs}]", "")
    text = tf.strings.regex_replace(text, r"\p{Zs}", " ")
    if mode == "bert_uncased":
        text = tf.strings.lower(text, encoding="utf-8")
        text = tf_text.normalize_utf8(text, "NFD")
        text = tf.strings.regex_replace(text, r"\p{Mn}", "")
    return text
