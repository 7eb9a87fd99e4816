"""SNCSE's soft negative: a rule-based English negation, in TensorFlow string ops.

The official code (Sense-GVT/SNCSE `generate_soft_negative_samples.py`,
`convert_to_negation`) negates each sentence with a spaCy dependency parse
(`en_core_web_sm`), once, offline. Its rules, in order:

1. A token `"not"` (lowercase; spaCy splits "cannot" into "can" + "not")
   is deleted, the first one only.
2. Otherwise the first token that is an auxiliary (`aux` / `auxpass`) or
   the root verb, whichever comes first, is negated: an auxiliary, or a
   root that is a form of "be" or a modal, gets " not" after it; any other
   root verb gets do-support ("has" -> "does not have", "said" -> "did not
   say").
3. Otherwise (no verb found) "Not" is put before the sentence. Training
   uses the same fallback for a sentence missing from the negation file
   (`train_SNCSE.py`, line 514: `"Not " + sentence`).

Here the same idea runs in the `tf.data` pipeline with plain regular
expressions (no parser, no tagger), so it needs no extra data and no
files. The rules, applied to each text once, first match wins:

1. **Remove a negation.** The leftmost of: the lowercase word "not"
   (deleted with the spaces before it), "cannot" (-> "can"), or a
   contraction in "n't": "can't" -> "can", "won't" -> "will", "shan't"
   -> "shall", "ain't" -> "is", any other "Xn't" -> "X" ("doesn't" ->
   "does", "isn't" -> "is"); the apostrophe may be ' or ’.
2. **Negate the first auxiliary.** The leftmost lowercase word among "am
   is are was were can could will would shall should may might must do
   does did has have had", or a verb contraction "'re 'm 'll 've 'd"
   after a word, gets " not" after it. When that word is "has", "have",
   "had", "do", "does" or "did" directly followed by a determiner, a
   number or "to" ("has a", "had to", "did the"), it is the main verb
   and gets do-support instead: "has a" -> "does not have a", "had to" ->
   "did not have to", "did the" -> "did not do the". "do" and "have"
   right after "to" ("to have", "to do") are infinitives, not
   auxiliaries, and are skipped.
3. **Fallback.** Otherwise "Not " is put before the text.

A blank text is returned as it is. Everything else is kept as written
(case, spacing, punctuation).

Deliberate differences from the official rules, where regular expressions
cannot follow a parse:

- The official code negates the *first* auxiliary or root verb; here only
  the auxiliaries and modals above are found, so a sentence whose main
  verb comes before them ("He said she was ill") has its later auxiliary
  negated ("He said she was not ill", officially "He did not say she was
  ill"), and a sentence whose only verb is a plain lexical verb ("The
  album features ten songs") falls back to "Not The album features ten
  songs" (officially "The album does not feature ten songs").
- Capitalized words are never taken for auxiliaries (sentence-initial
  questions, and names such as "May" or "Will", are left alone); the
  official parser tells them apart.
- "n't" is removed here. The official rule 1 looks for the token "not"
  only, so spaCy's "n't" token is not removed and the sentence gets a
  second negation ("do n't know" -> "do not n't know").
- The official output is spaCy's tokens joined by single spaces ("Hello ,
  world ."); here the text keeps its own spacing. For WordPiece
  tokenizers that changes nothing but contractions.
- The official "Not" fallback is also used in training for every sentence
  whose text does not end with punctuation (the negation file is looked up
  after " ." is appended to it, `train_SNCSE.py` lines 511-514), which
  this pipeline does not reproduce: the rules above are used for every
  sentence.
"""

import tensorflow as tf

# Marks the matched word between two passes; removed from the input first.
_MARK = "\x01"
_GUARD = "\x02"
_APOSTROPHE = "['\u2019]"

# Rule 1: the leftmost negation.
_NEGATION = rf"\bnot\b|\b[Cc]annot\b|\b\w*n{_APOSTROPHE}t\b"
# Rewrites of the marked negation, in order (only one matches).
_REMOVALS = (
    (rf"\s+{_MARK}not\b", ""),
    (rf"{_MARK}not\b\s*", ""),
    (rf"\s+{_MARK}n{_APOSTROPHE}t\b", ""),
    (rf"{_MARK}([Cc])annot\b", r"\1an"),
    (rf"{_MARK}([Cc])an{_APOSTROPHE}t\b", r"\1an"),
    (rf"{_MARK}([Ww])on{_APOSTROPHE}t\b", r"\1ill"),
    (rf"{_MARK}([Ss])han{_APOSTROPHE}t\b", r"\1hall"),
    (rf"{_MARK}ain{_APOSTROPHE}t\b", "is"),
    (rf"{_MARK}Ain{_APOSTROPHE}t\b", "Is"),
    (rf"{_MARK}(\w+)n{_APOSTROPHE}t\b", r"\1"),
)

# Rule 2: the leftmost auxiliary or modal (lowercase), or a verb contraction after a word.
AUXILIARIES = ("am", "is", "are", "was", "were", "can", "could", "will", "would", "shall",
               "should", "may", "might", "must", "do", "does", "did", "has", "have", "had")
_AUXILIARY = (r"\b(?:" + "|".join(AUXILIARIES) + r")\b"
              + rf"|\w{_APOSTROPHE}(?:re|m|ll|ve|d)\b")
# What makes "has" / "do" ... a main verb: a determiner, a number or "to" right after it.
_OBJECT = (r"(?:a|an|the|this|that|these|those|my|your|his|her|its|our|their|some|any|no"
           r"|every|each|many|several|much|more|most|few|one|two|three|four|five|\d+|to)\b")
# Do-support of the marked main verb, then " not" after any other marked word.
_INSERTIONS = (
    (rf"\bhas{_MARK}(\s+{_OBJECT})", r"does not have\1"),
    (rf"\bhave{_MARK}(\s+{_OBJECT})", r"do not have\1"),
    (rf"\bhad{_MARK}(\s+{_OBJECT})", r"did not have\1"),
    (rf"\b(do|does|did){_MARK}(\s+{_OBJECT})", r"\1 not do\2"),
    (_MARK, " not"),
)
# "to have" / "to do": infinitives, hidden from rule 2 (a word character glued before them).
_INFINITIVE = r"\bto(\s+)(do|have)\b"


def _replace_once(texts, rules):
    for pattern, rewrite in rules:
        texts = tf.strings.regex_replace(texts, pattern, rewrite, replace_global=False)
    return texts


def negate(texts):
    """The rule-based negation of each text (see the module docstring).

    A pure function of its input: the same text always gets the same
    negation.

    Args:
        texts: string tensor `[B]` (any shape).

    Returns:
        string tensor of the same shape.
    """
    texts = tf.convert_to_tensor(texts, tf.string)
    texts = tf.strings.regex_replace(texts, f"[{_MARK}{_GUARD}]", "")
    # Rule 1.
    has_negation = tf.strings.regex_full_match(texts, rf"(?s).*(?:{_NEGATION}).*")
    removed = tf.strings.regex_replace(texts, f"({_NEGATION})", _MARK + r"\1",
                                       replace_global=False)
    removed = _replace_once(removed, _REMOVALS)
    # Rule 2.
    guarded = tf.strings.regex_replace(texts, _INFINITIVE, rf"to\1{_GUARD}_\2")
    marked = tf.strings.regex_replace(guarded, f"(?:{_AUXILIARY})", r"\0" + _MARK,
                                      replace_global=False)
    has_auxiliary = tf.strings.regex_full_match(marked, f"(?s).*{_MARK}.*")
    inserted = _replace_once(marked, _INSERTIONS)
    inserted = tf.strings.regex_replace(inserted, f"{_GUARD}_", "")
    # Rule 3.
    fallback = tf.strings.join(["Not ", texts])
    blank = tf.strings.regex_full_match(texts, r"\s*")
    out = tf.where(has_auxiliary, inserted, fallback)
    out = tf.where(has_negation, removed, out)
    return tf.where(blank, texts, out)


def negation_view(texts, key):
    """`fn(texts, key)` for `with_text_views`: the negation of `texts` (`key` is unused)."""
    del key
    return negate(texts)
