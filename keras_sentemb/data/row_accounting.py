"""Rows read and rows skipped while a stream is read, and the rule on how many may be skipped.

A stream's reader says of every record it reads what is wrong with it, as a
problem code beside the row's columns (`PROBLEM`): nothing (`OK`), a
missing column (`MISSING`: a JSON key, a TFRecord feature, a Parquet or CSV
column, a TSV field), a broken record (`BROKEN`: a line that is not JSON or
not CSV, a value that is not text), bytes that are not UTF-8 (`NOT_UTF8`),
or a label that does not parse (`BAD_LABEL`, counted where labels are
parsed). A record whose text is empty (a blank line) is not a row
(`BLANK`), and `END_OF_PASS` marks the end of each pass over the source.
`drop_problems` is the one place rows with a problem leave the stream; a
`RowCounter` counts them there, in the tf.data pipeline (one `tf.Variable`,
updated once per chunk of 256 rows), while training runs.

The rule: a run stops with one line naming the source, the rows read, the
rows skipped and why, when it skipped more than `max_skipped` of the rows
it read (1 % by default; `fit_*(..., max_skipped=...)`,
`keras-sentemb train ... --max-skipped`), or when the source holds fewer
usable rows than one batch. `accounting(...)` collects the counters of the
streams a training run reads, so the run can check them (every
`eval_every` steps once `MIN_ROWS_TO_JUDGE` rows are read, and at its end)
before anything is saved.
"""

import contextlib
import contextvars
import dataclasses
import logging

import tensorflow as tf

from keras_sentemb.data.read_errors import DataError
from keras_sentemb.validation import DEFAULT_MAX_SKIPPED

logger = logging.getLogger(__name__)

PROBLEM = "_problem"
FILE = "_file"
OK, BLANK, MISSING, BROKEN, NOT_UTF8, BAD_LABEL, END_OF_PASS = range(7)
# The counter's slots: one per code, then the rows a whole pass holds.
_PASS_ROWS = 7
_SLOTS = 8
SKIPPED = (MISSING, BROKEN, NOT_UTF8, BAD_LABEL)
# Checks while training runs wait for this many rows (a share of a few rows says little).
MIN_ROWS_TO_JUDGE = 1000
# Rows classified and counted together.
_CHUNK = 256
# Files a message names as holding the most skipped rows.
_WORST_FILES = 3


@dataclasses.dataclass(frozen=True)
class RowCounts:
    """What a reader met in a stream.

    Attributes:
        read: int. Rows read (records that are not blank), skipped ones included.
        skipped: dict code -> int. Rows skipped, by why (`MISSING`, `BROKEN`,
            `NOT_UTF8`, `BAD_LABEL`).
        blank: int. Records with an empty text (not rows; not counted as skipped).
        passes: int. Whole passes read over the source.
        pass_rows: int. Usable rows in one whole pass (0 before the first ends).
        worst_files: tuple of `(file, rows skipped)`. The files of a source
            of several that skipped the most rows as they were read (labels
            that do not parse are not told by file).
    """
    read: int = 0
    skipped: dict = dataclasses.field(default_factory=dict)
    blank: int = 0
    passes: int = 0
    pass_rows: int = 0
    worst_files: tuple = ()

    @classmethod
    def from_slots(cls, slots, worst_files=()):
        """The counts in a counter's slots (a sequence of `_SLOTS` ints)."""
        slots = [int(v) for v in slots]
        skipped = {code: slots[code] for code in SKIPPED if slots[code]}
        read = slots[OK] + slots[MISSING] + slots[BROKEN] + slots[NOT_UTF8]
        return cls(read=read, skipped=skipped, blank=slots[BLANK], passes=slots[END_OF_PASS],
                   pass_rows=slots[_PASS_ROWS], worst_files=tuple(worst_files))

    @property
    def total_skipped(self):
        return sum(self.skipped.values())

    @property
    def usable(self):
        return self.read - self.total_skipped

    def over_share(self, max_skipped):
        """Whether more than `max_skipped` of the rows read were skipped."""
        return max_skipped is not None and self.total_skipped > max_skipped * self.read


class RowCounter:
    """Counts a stream's rows by problem code inside its tf.data pipeline.

    Rows skipped by the readers are also counted by file when the source is
    a list of files whose rows say which (`FILE`).

    Args:
        source: the stream source counted (its `where` names it in messages,
            its `files` the files of skipped rows).
        names: tuple of str. The columns read from it.
    """

    def __init__(self, source, names):
        self.source = source
        self.names = tuple(names)
        self.files = list(getattr(source, "files", None) or ())
        if not getattr(source, "rows_tell_files", False):
            self.files = []
        with tf.init_scope():
            self.slots = tf.Variable(tf.zeros([_SLOTS], tf.int64), trainable=False,
                                     name="row_counts")
            self.by_file = tf.Variable(tf.zeros([max(1, len(self.files))], tf.int64),
                                       trainable=False, name="rows_skipped_by_file")

    def count(self, codes, files=None):
        """Add rows of problem `codes` (int32, a scalar or a vector; -1 counts nothing).

        The end of the first pass records the usable rows counted so far (a
        pass ends with its marker, the last row of its batch).

        Args:
            codes: int32 tensor.
            files: int32 tensor like `codes` or None. The rows' files.

        Returns:
            The update op.
        """
        codes = tf.reshape(codes, [-1])
        update = tf.reduce_sum(tf.one_hot(codes, _SLOTS, dtype=tf.int64), axis=0)
        first_end = tf.logical_and(update[END_OF_PASS] > 0,
                                   tf.equal(self.slots[END_OF_PASS], 0))
        pass_rows = (self.slots[OK] + update[OK]) * tf.cast(first_end, tf.int64)
        update += tf.one_hot(_PASS_ROWS, _SLOTS, dtype=tf.int64) * pass_rows
        updates = [self.slots.assign_add(update)]
        if files is not None and self.files:
            skipped = (codes == MISSING) | (codes == BROKEN) | (codes == NOT_UTF8)
            which = tf.boolean_mask(tf.reshape(files, [-1]), skipped)
            updates.append(self.by_file.scatter_nd_add(
                which[:, None], tf.ones_like(which, tf.int64)))
        return tf.group(updates)

    def counts(self):
        """The counts so far (`RowCounts`)."""
        by_file = self.by_file.numpy()
        worst = sorted(((int(n), i) for i, n in enumerate(by_file) if n), reverse=True)
        worst = [(self.files[i], n) for n, i in worst[:_WORST_FILES]] if self.files else []
        return RowCounts.from_slots(self.slots.numpy(), worst)


def _non_empty(row, names):
    ok = tf.constant(True)
    for name in names:
        ok = tf.logical_and(ok, tf.strings.length(row[name]) > 0)
    return ok


def utf8_valid(text):
    """Whether a string tensor holds valid UTF-8 (element-wise)."""
    fixed = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace")
    return tf.equal(fixed, text)


def classify(row, names):
    """The final problem code of raw rows (one row, or a chunk of them as vectors).

    `BLANK` for an empty text, `NOT_UTF8` for bytes that are not UTF-8, else
    the reader's code.
    """
    code = tf.cast(row[PROBLEM], tf.int32)
    clean = tf.equal(code, OK)
    code = tf.where(clean & ~_non_empty(row, names), BLANK, code)
    valid = tf.constant(True)
    for name in names:
        if row[name].dtype == tf.string:
            valid = tf.logical_and(valid, utf8_valid(row[name]))
    return tf.where(tf.equal(code, OK) & ~valid, NOT_UTF8, code)


def drop_problems(rows, names, counter=None):
    """Rows without a problem (and with every text non-empty), counted by `counter`.

    Rows are classified and counted `_CHUNK` at a time (vectorised: one
    counter update per chunk), so counting costs next to nothing per row.

    Args:
        rows: dataset of raw rows (`{name: tf.string, PROBLEM: int32}`).
        names: tuple of str. The text columns.
        counter: `RowCounter` or None.

    Returns:
        dataset of rows `{name: tf.string}`, in the same order.
    """
    @tf.autograph.experimental.do_not_convert
    def usable(chunk):
        codes = classify(chunk, names)
        if counter is not None:
            with tf.control_dependencies([counter.count(codes, chunk.get(FILE))]):
                codes = tf.identity(codes)
        keep = tf.equal(codes, OK)
        return {k: tf.boolean_mask(v, keep) for k, v in chunk.items()
                if k not in (PROBLEM, FILE)}

    return rows.batch(_CHUNK).map(usable).unbatch()


def end_of_pass(names):
    """A one-row dataset marking the end of a pass (dropped by `drop_problems`)."""
    row = {name: tf.constant("") for name in names}
    row[PROBLEM] = tf.constant(END_OF_PASS, tf.int32)
    row[FILE] = tf.constant(0, tf.int32)
    return tf.data.Dataset.from_tensors(row)


# ------------------------------------------------------------ messages
def _quoted(names):
    return ", ".join(repr(str(n)) for n in names)


def why_skipped(source, names, counts):
    """Why rows were skipped, in words: `"50 lack the field 'text' (its records have ...)"`."""
    parts = []
    for code in SKIPPED:
        n = counts.skipped.get(code, 0)
        if not n:
            continue
        if code == MISSING:
            wanted = source.wanted(names)
            seen = source.fields()
            missing = [c for c in wanted if seen is None or str(c) not in seen] or wanted
            noun = "field" if len(missing) == 1 else "fields"
            text = f"{n} lack the {noun} {_quoted(missing)}"
            if seen is not None:
                text += f" (its records have the fields {sorted(seen)})"
        else:
            text = {BROKEN: f"{n} are broken records",
                    NOT_UTF8: f"{n} are not valid UTF-8",
                    BAD_LABEL: f"{n} have a label that does not parse"}[code]
        parts.append(text)
    if counts.worst_files and len(getattr(source, "files", ())) > 1:
        named = ", ".join(f"{path} ({n})" for path, n in counts.worst_files)
        parts.append(f"the most in {named}")
    return "; ".join(parts)


def share_text(max_skipped):
    return f"{100 * max_skipped:g} %"


def check_counts(source, names, counts, max_skipped=None, batch_size=None, whole=False):
    """Raise a one-line `DataError` when `counts` break the rule.

    Args:
        source: the stream source the counts are of.
        names: tuple of str. Its columns.
        counts: `RowCounts`.
        max_skipped: float or None. The largest share of skipped rows (None:
            not checked).
        batch_size: int or None. With `whole`, fewer usable rows is an error.
        whole: bool. The counts cover the whole source.

    Raises:
        DataError: too many rows skipped, or (whole) fewer rows than a batch.
    """
    where, why = source.where, why_skipped(source, names, counts)
    if whole and batch_size is not None and counts.usable < batch_size:
        detail = f"; {why}" if why else ""
        raise DataError(f"{where} holds {counts.usable} usable row(s), fewer than one batch "
                        f"of {batch_size}: {counts.read} read, {counts.total_skipped} "
                        f"skipped{detail}.")
    if counts.read and counts.over_share(max_skipped):
        share = 100 * counts.total_skipped / counts.read
        passes = f" ({counts.passes} passes over it)" if counts.passes > 1 else ""
        raise DataError(
            f"{where}: {counts.total_skipped} of {counts.read} rows read{passes} were skipped "
            f"({share:.3g} %, more than the {share_text(max_skipped)} allowed by "
            f"max_skipped / --max-skipped): {why}.")


# ---------------------------------------------------------- accounting
_ACTIVE = contextvars.ContextVar("keras_sentemb_row_accounting", default=None)


class Accounting:
    """The row counters of the streams one training run reads, and their checks.

    Args:
        max_skipped: float. The largest share of skipped rows.
    """

    def __init__(self, max_skipped=DEFAULT_MAX_SKIPPED):
        self.max_skipped = max_skipped
        self.counters = []

    def counter(self, source, names):
        """A new `RowCounter` of `source`, checked with the others."""
        counter = RowCounter(source, names)
        self.counters.append(counter)
        return counter

    def where(self):
        """How messages name what the run reads (its sources, joined)."""
        return ", ".join(dict.fromkeys(c.source.where for c in self.counters)) or "the data"

    def check(self, final=True):
        """Raise `DataError` when a source skipped more than the share (see `check_counts`).

        Args:
            final: bool. The run has ended: judge any number of rows (else
                only sources with `MIN_ROWS_TO_JUDGE` rows read).
        """
        for counter in self.counters:
            counts = counter.counts()
            if final or counts.read >= MIN_ROWS_TO_JUDGE:
                check_counts(counter.source, counter.names, counts, self.max_skipped)

    def report(self, steps, batch_size):
        """`{where: counts}` for the training report; logs a source read more than once."""
        out = {}
        for counter in self.counters:
            counts = counter.counts()
            where = counter.source.where
            out[where] = {"rows_read": counts.read, "rows_skipped": counts.total_skipped,
                          "passes": counts.passes}
            drawn = steps * batch_size
            if counts.passes and 0 < counts.pass_rows < drawn:
                logger.info("%s holds %d usable row(s) a pass: %d steps of %d rows read it "
                            "%.1f times over", where, counts.pass_rows, steps, batch_size,
                            drawn / counts.pass_rows)
        return out


@contextlib.contextmanager
def accounting(max_skipped=DEFAULT_MAX_SKIPPED):
    """Collect the row counters of the streams built inside the block (`Accounting`)."""
    state = Accounting(max_skipped)
    token = _ACTIVE.set(state)
    try:
        yield state
    finally:
        _ACTIVE.reset(token)


def active_accounting():
    """The `Accounting` of the training run being built, or None."""
    return _ACTIVE.get()


def new_counter(source, names):
    """A counter of `source` registered with the active accounting, or None without one."""
    state = _ACTIVE.get()
    return None if state is None else state.counter(source, names)
