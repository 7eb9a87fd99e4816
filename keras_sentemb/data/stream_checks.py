"""Before training starts: a stream's first records, checked against what the method reads.

`check_stream` reads each source's first records, file by file in the
listed order, with the problem codes its readers give them
(`keras_sentemb.data.row_accounting`), until it has seen `CHECK_RECORDS`
records and one batch of usable rows, or the whole source, or
`CHECK_LIMIT` records. It stops with one line (a `DataError`) when

- a file cannot be read (corrupt TFRecord data, a truncated gzip file, a
  file gone since it was listed, a Parquet file that is not one): the line
  names the file;
- none of the records read holds the columns (and a label that parses): the
  line names the source, the rows read and why they were skipped (the
  missing field and the fields the records have);
- the whole source holds fewer usable rows than one batch (with
  `no_duplicates`, fewer distinct ones), or skips more than `max_skipped`
  of its rows.

What it reads is bounded: a few hundred records of a large corpus; the
rest is counted while training runs.
"""

import tensorflow as tf

from keras_sentemb.data.read_errors import DataError
from keras_sentemb.data.read_errors import reading
from keras_sentemb.data.row_accounting import BAD_LABEL
from keras_sentemb.data.row_accounting import FILE
from keras_sentemb.data.row_accounting import OK
from keras_sentemb.data.row_accounting import PROBLEM
from keras_sentemb.data.row_accounting import RowCounts
from keras_sentemb.data.row_accounting import check_counts
from keras_sentemb.data.row_accounting import classify
from keras_sentemb.data.row_accounting import why_skipped

# Records looked at, at least (all of a shorter source).
CHECK_RECORDS = 100
# Records looked at, at most (looking for one batch of usable rows).
CHECK_LIMIT = 10_000
# Files opened, at most.
CHECK_FILES = 64
_READ_BATCH = 256


def parse_labels(row, labels):
    """`(row with each label column parsed, whether every label parsed)`.

    Args:
        row: dict of tensors.
        labels: dict column -> parser (`text -> (value, ok)`, see
            `keras_sentemb.data.labeled_streams`).
    """
    out, ok = dict(row), tf.constant(True)
    for name, parser in labels.items():
        out[name], parsed = parser(row[name])
        ok = tf.logical_and(ok, parsed)
    return out, ok


def _marked(raw, labels):
    """Raw rows with their final problem code (blank, not UTF-8, label that does not parse)."""
    texts = [k for k in raw.element_spec if k not in (PROBLEM, FILE)]
    present = {k: v for k, v in (labels or {}).items() if k in texts}

    @tf.autograph.experimental.do_not_convert
    def mark(row):
        code = classify(row, texts)
        if present:
            _, ok = parse_labels(row, present)
            code = tf.where(tf.equal(code, OK) & ~ok, BAD_LABEL, code)
        return {PROBLEM: code, "key": tf.strings.reduce_join(
            tf.stack([row[k] for k in texts if k not in present]), separator="\t")}

    return raw.map(mark)


class _Tally:
    """Problem codes and distinct usable rows seen so far."""

    def __init__(self):
        self.slots = [0] * 8
        self.distinct = set()

    def add(self, codes, keys):
        for code, key in zip(codes.tolist(), keys.tolist()):
            self.slots[code] += 1
            if code == OK:
                self.distinct.add(key)

    @property
    def records(self):
        return sum(self.slots[:BAD_LABEL + 1])

    def counts(self):
        slots = list(self.slots)
        slots[OK] += slots[BAD_LABEL]  # a row whose label does not parse was read
        return RowCounts.from_slots(slots)


def head_counts(source, columns, batch_size, labels=None):
    """`(counts, distinct usable rows, whole)` of a source's first records (see the module).

    Args:
        source: a stream source (`parts(columns)` gives its files' raw rows).
        columns: tuple of str. The columns read (text and label columns).
        batch_size: int. Reading stops once this many distinct usable rows
            (and `CHECK_RECORDS` records) are seen.
        labels: dict column -> label parser, or None.

    Raises:
        DataError: a file cannot be read (the line names it).
    """
    tally, parts = _Tally(), source.parts(columns)
    for index, (where, raw) in enumerate(parts):
        if index >= CHECK_FILES:
            return tally.counts(), len(tally.distinct), False
        with reading(where):
            for batch in _marked(raw, labels).batch(_READ_BATCH).as_numpy_iterator():
                tally.add(batch[PROBLEM], batch["key"])
                enough = len(tally.distinct) >= batch_size and tally.records >= CHECK_RECORDS
                if enough or tally.records >= CHECK_LIMIT:
                    return tally.counts(), len(tally.distinct), False
    return tally.counts(), len(tally.distinct), True


def _sources(stream):
    return list(stream.sources.values()) if hasattr(stream, "sources") else [stream]


def check_usable(source, columns, counts):
    """Raise a one-line `DataError` when none of the rows in `counts` can be used.

    Args:
        source: the stream source read.
        columns: tuple of str. The columns read.
        counts: `RowCounts` of what was read.
    """
    if counts.read == 0:
        blank = f" ({counts.blank} blank record(s))" if counts.blank else ""
        raise DataError(f"{source.where} holds no rows to train on{blank}.")
    if counts.usable == 0:
        raise DataError(
            f"{source.where}: none of the {counts.read} row(s) read holds the columns "
            f"{list(source.wanted(columns))}: {why_skipped(source, columns, counts)}.")


def check_source(source, columns, batch_size, labels=None, no_duplicates=False,
                 max_skipped=None):
    """Raise a one-line `DataError` when a source's first records show it cannot train.

    Args:
        source: a stream source.
        columns: tuple of str. The columns read (text, then label columns).
        batch_size: int. Rows per batch.
        labels: dict column -> label parser, or None.
        no_duplicates: bool. Batches hold no text twice: the source must
            hold one batch of distinct rows.
        max_skipped: float or None. The largest share of skipped rows, judged
            when the whole source was read.

    Returns:
        `RowCounts` of the records read.
    """
    counts, distinct, whole = head_counts(source, columns, batch_size, labels)
    where = source.where
    check_usable(source, columns, counts)
    per_record = getattr(source, "rows_per_record", 1)
    if whole and no_duplicates and distinct * per_record < batch_size <= counts.usable:
        raise DataError(f"{where} holds {distinct} distinct usable row(s), fewer than one "
                        f"batch of {batch_size} with no text twice in a batch.")
    if whole:
        rows = RowCounts(read=counts.read * per_record,
                         skipped={c: n * per_record for c, n in counts.skipped.items()})
        check_counts(source, columns, rows, max_skipped, batch_size, whole=True)
    return counts


def check_stream(stream, names, batch_size, labels=None, no_duplicates=False, max_skipped=None):
    """`check_source` for each source of a stream (each dataset of a `Mixture` alone).

    Args:
        stream: a stream source or `Mixture`.
        names: tuple of str. The text columns.
        batch_size: int. Rows per batch (each batch comes from one source).
        labels: dict column -> label parser, or None.
        no_duplicates: bool. The method's batches hold no text twice.
        max_skipped: float or None. See `check_source`.

    Raises:
        DataError: one line naming the file or source and what is wrong.
    """
    columns = tuple(names) + tuple(labels or ())
    for source in _sources(stream):
        options = getattr(source, "options", None)
        dedupe = no_duplicates if getattr(options, "no_duplicates", None) is None \
            else options.no_duplicates
        check_source(source, columns, batch_size, labels, dedupe, max_skipped)

