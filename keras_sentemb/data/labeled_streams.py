"""Streamed supervised rows: labels and scores parsed in tf.data, NLI triplets as labelled pairs.

A stream source yields strings only (`keras_sentemb.data.streams`); the
supervised methods need a number beside the text: a class label
(paraphrase / NLI pairs) or a similarity score (STS pairs). A label parser
turns the label column's text into its value inside the pipeline and says
whether it parsed; rows whose label does not parse (a header line read as
data, an empty or junk cell, a score out of range) are skipped, as the
in-memory readers skip malformed rows (`keras_sentemb.data.nli`).

- `class_labels()`: non-negative integers (`"1"`, `"1.0"`) or NLI names
  (`entailment` 0, `neutral` 1, `contradiction` 2), as `read_labeled_pairs`
  reads them; int32.
- `score_labels(low, high)`: a number in `[low, high]`; float32.
- `TripletPairs(source)`: `(sent0, sent1, hard_neg)` triplets read as two
  labelled rows each, `(sent0, sent1, 0)` and `(sent0, hard_neg, 2)`
  (`triplets_to_nli_pairs`, streamed).
- `supervised_kind(stream)`: whether a stream holds NLI triplets or
  labelled pairs, from its first rows.
"""

import copy

import tensorflow as tf

from keras_sentemb.data.nli import NLI_LABELS
from keras_sentemb.data.nli import _parse_label
from keras_sentemb.data.stream_batches import Mixture
from keras_sentemb.data.stream_batches import _labelled
from keras_sentemb.data.stream_checks import check_stream

TRIPLET_COLUMNS = ("sent0", "sent1", "hard_neg")
PAIR_COLUMNS = ("sentence1", "sentence2", "label")
# Rows looked at to tell triplets from labelled pairs.
KIND_SAMPLE = 100
_INTEGER = r"\+?[0-9]+(\.0*)?"
_NUMBER = r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?"


def class_labels(num_classes=None):
    """A parser of class labels: `text -> (int32 label, parsed)` (see the module docstring).

    Args:
        num_classes: int or None. Labels from this value up do not parse.
    """

    def parse(text):
        text = tf.strings.lower(tf.strings.strip(text))
        numeric = tf.strings.regex_full_match(text, _INTEGER)
        value = tf.cast(tf.strings.to_number(tf.where(numeric, text, "0")), tf.int32)
        ok = numeric
        for name, label in NLI_LABELS.items():
            named = tf.equal(text, name)
            value = tf.where(named, label, value)
            ok = tf.logical_or(ok, named)
        if num_classes is not None:
            ok = tf.logical_and(ok, value < num_classes)
        return value, ok

    return parse


def score_labels(low, high):
    """A parser of scores in `[low, high]`: `text -> (float32 score, parsed and in range)`."""
    low, high = float(low), float(high)

    def parse(text):
        text = tf.strings.strip(text)
        numeric = tf.strings.regex_full_match(text, _NUMBER)
        value = tf.strings.to_number(tf.where(numeric, text, "0"), tf.float32)
        ok = numeric & tf.math.is_finite(value) & (value >= low) & (value <= high)
        return value, ok

    return parse


class TripletPairs:
    """NLI triplets streamed as labelled pairs (entailment 0, contradiction 2).

    Each `(sent0, sent1, hard_neg)` row of `source` becomes the rows
    `(sent0, sent1, "0")` and `(sent0, hard_neg, "2")` (SNLI's label order),
    next to each other; the shuffle buffer parts them.

    Args:
        source: a stream source holding `sent0`, `sent1`, `hard_neg` (or the
            three columns it names).
    """

    def __init__(self, source):
        self.source = source
        self.files = source.files
        self.size = None if source.size is None else 2 * source.size
        self.infinite = getattr(source, "infinite", False)
        self.options = source.options
        self.where = source.where
        self.rows_per_record = 2
        self.rows_tell_files = getattr(source, "rows_tell_files", False)

    def __repr__(self):
        return f"TripletPairs({self.source!r})"

    def rows(self, names, seed=None, cycle_length=8, shard=None, scan=None, counter=None):
        """Rows `{premise, hypothesis, label}` (named by `names`), two per triplet.

        `counter` counts the triplets read and skipped.
        """
        if len(names) != 3:
            raise ValueError(f"Triplets read as labelled pairs give 3 columns; {list(names)} "
                             "were asked for.")
        triplets = self.source.rows(TRIPLET_COLUMNS, seed=seed, cycle_length=cycle_length,
                                    shard=shard, scan=scan, counter=counter)
        labels = tf.constant([str(NLI_LABELS["entailment"]), str(NLI_LABELS["contradiction"])])

        def split(row):
            return tf.data.Dataset.from_tensor_slices({
                names[0]: tf.stack([row["sent0"], row["sent0"]]),
                names[1]: tf.stack([row["sent1"], row["hard_neg"]]),
                names[2]: labels,
            })

        return triplets.flat_map(split)

    def parts(self, names):
        """The triplets' files, raw (see `keras_sentemb.data.stream_checks`)."""
        return self.source.parts(TRIPLET_COLUMNS)

    def wanted(self, names):
        return self.source.wanted(TRIPLET_COLUMNS)

    def fields(self):
        return self.source.fields()


def _source_kind(source):
    """The kind of one source, from at most `KIND_SAMPLE` records of each of its files."""
    try:
        rows = [tuple(r[k].decode("utf-8", "replace") for k in TRIPLET_COLUMNS) for r in
                source.rows(TRIPLET_COLUMNS, scan=KIND_SAMPLE).take(KIND_SAMPLE)
                .as_numpy_iterator()]
    except (ValueError, tf.errors.InvalidArgumentError):
        return "labeled_pairs"  # no sent0 / sent1 / hard_neg columns
    labelled = 0
    for row in rows:
        try:
            _parse_label(row[2])
            labelled += 1
        except ValueError:
            pass
    return "triplets" if rows and labelled * 2 < len(rows) else "labeled_pairs"


def supervised_kind(stream):
    """`"triplets"` or `"labeled_pairs"`: what a streamed supervised source holds.

    Triplets when the source has `sent0`, `sent1`, `hard_neg` columns (or
    the three columns it names) whose third cell is mostly not a label;
    labelled pairs (`sentence1`, `sentence2`, `label`, or the columns it
    names) otherwise. A `Mixture` holds what its first dataset holds, and
    all its datasets must agree.
    """
    sources = list(stream.sources.values()) if isinstance(stream, Mixture) else [stream]
    kinds = {_source_kind(s) for s in sources}
    if len(kinds) > 1:
        raise ValueError("The mixed datasets hold both NLI triplets and labelled pairs; mix "
                         "one kind at a time.")
    return kinds.pop()


def as_labeled_pairs(stream):
    """`stream` with every triplet source read as labelled pairs (`TripletPairs`)."""
    if isinstance(stream, Mixture):
        mixed = copy.copy(stream)
        mixed.sources = {k: as_labeled_pairs(s) for k, s in stream.sources.items()}
        return mixed
    return TripletPairs(stream) if _source_kind(stream) == "triplets" else stream


def check_rows(stream, names, labels=None):
    """A one-line `ValueError` when a source's first records hold no usable row.

    A record missing a column (a JSON key, a TFRecord feature) or whose
    label does not parse is skipped while training; a source where every
    record is skipped would train on nothing. Each source's first records
    are read (a bounded number: see `keras_sentemb.data.stream_checks`,
    which names the missing column and the fields the records have).

    Args:
        stream: a stream source or `Mixture`.
        names: tuple of str. The text columns.
        labels: dict column -> label parser, or None.
    """
    check_stream(stream, names, 1, labels)


def ordered_rows(stream, names, labels=None):
    """One pass over a stream in its files' order (a `Mixture`: its datasets one after another).

    Rows `{name: tf.string}` plus the parsed `labels` columns; rows whose
    label does not parse are skipped. For what is read before training (a
    statistic of the data), not shuffled.
    """
    columns = tuple(names) + tuple(labels or ())
    sources = list(stream.sources.values()) if isinstance(stream, Mixture) else [stream]
    rows = None
    for source in sources:
        part = _labelled(source.rows(columns), labels)
        rows = part if rows is None else rows.concatenate(part)
    return rows
