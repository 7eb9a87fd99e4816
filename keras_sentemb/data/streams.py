"""Streamed training data: files of any size read through tf.data, never held in memory.

A *stream source* is training data read row by row while training runs:

- a glob (`"corpus/part-*.txt"`), a list of files (`TextFiles([...])`) or a
  text file larger than `IN_MEMORY_LIMIT`, on any path `tf.io.gfile` reads
  (local, `gs://`, ...);
- a `tf.data.Dataset` (of strings, of dicts with one string feature, or of
  dicts / tuples with the wanted columns) or a TFDS name.

File formats, chosen by the file name (or `format=`):

- `.txt`: one sentence per line (empty lines skipped);
- `.jsonl` / `.json`: one JSON object per line, the text in `column`
  (default `"text"`, or `"sentence"` when present) or the pair / triplet in
  `columns`;
- `.tsv`: tab-separated, a header line naming the columns when `column` /
  `columns` are names (column numbers need no header);
- `.csv`: comma-separated with a header line, one record a line (quoted
  fields allowed);
- `.tfrecord` / `.tfrec` (`.gz` compressed too): `tf.train.Example` records
  with a bytes feature per column;
- `.parquet`: needs pyarrow (`pip install -e ".[parquet]"`).

Small in-memory data (a list, a single small text file) is not a stream:
the methods read it as before (`keras_sentemb.data.corpus.load_corpus`),
with the same batches for the same seed.

A source yields rows `{name: tf.string}` in file order; shuffling,
batching, mixing and sharding are in `keras_sentemb.data.stream_batches`.
Each format's reader is in `keras_sentemb.data.stream_readers`; records it
cannot use (a missing column, a broken record, bytes that are not UTF-8)
are left out in one place and counted (`keras_sentemb.data.row_accounting`),
and a remote path that cannot be listed is one line naming it
(`keras_sentemb.data.read_errors`).
"""

import glob as _glob
import logging
import os

import tensorflow as tf

from keras_sentemb.data import stream_readers as readers
from keras_sentemb.data.read_errors import gfile_call
from keras_sentemb.data.read_errors import remember_files
from keras_sentemb.data.row_accounting import FILE
from keras_sentemb.data.row_accounting import OK
from keras_sentemb.data.row_accounting import PROBLEM
from keras_sentemb.data.row_accounting import drop_problems
from keras_sentemb.data.row_accounting import end_of_pass

logger = logging.getLogger(__name__)

# A single text file at most this large is read into memory (today's exact
# batches); a larger one is streamed.
IN_MEMORY_LIMIT = 256 * 1024 * 1024
FORMATS = ("txt", "jsonl", "tsv", "csv", "tfrecord", "parquet")
_SUFFIXES = {
    ".txt": "txt", ".text": "txt", ".jsonl": "jsonl", ".json": "jsonl", ".tsv": "tsv",
    ".csv": "csv", ".tfrecord": "tfrecord", ".tfrecords": "tfrecord", ".tfrec": "tfrecord",
    ".parquet": "parquet", ".pq": "parquet",
}
_GLOB_CHARS = "*?["
# Files a source's name lists before it says "and N more".
_NAMED_FILES = 2


def is_glob(path):
    """Whether `path` is a pattern (holds `*`, `?` or `[`)."""
    return isinstance(path, str) and any(c in path for c in _GLOB_CHARS)


def _is_remote(path):
    return "://" in path


def expand_files(pattern):
    """The files a glob (or one path) names, sorted; a one-line error when none.

    A remote path that cannot be listed (no network, no credentials, no
    such bucket, a file system this TensorFlow lacks) is a one-line
    `DataError` naming it and why (`keras_sentemb.data.read_errors`).

    Args:
        pattern: str. A path or a glob, on any file system `tf.io.gfile` reads.

    Returns:
        list of str.

    Raises:
        ValueError: nothing matches, the file is missing, or the path
            cannot be reached (`DataError`).
    """
    if is_glob(pattern):
        if _is_remote(pattern):
            files = sorted(gfile_call(tf.io.gfile.glob, pattern, "list"))
        else:
            files = sorted(_glob.glob(pattern))
        files = [f for f in files if not gfile_call(tf.io.gfile.isdir, f)]
        if not files:
            raise ValueError(f"No training file matches {pattern!r}.")
        return files
    if not gfile_call(tf.io.gfile.exists, pattern) or gfile_call(tf.io.gfile.isdir, pattern):
        raise ValueError(f"Training file not found: {pattern}")
    return [pattern]


def file_format(path, format=None):
    """The format of `path` (`format` when given, else from its suffix)."""
    if format is not None:
        if format not in FORMATS:
            raise ValueError(f"`format` must be one of {list(FORMATS)}; received {format!r}.")
        return format
    name = path[:-3] if path.endswith(".gz") else path
    suffix = os.path.splitext(name)[1].lower()
    if suffix not in _SUFFIXES:
        raise ValueError(
            f"Cannot tell the format of {path} from its suffix; name it .txt, .jsonl, .tsv, "
            f".csv, .tfrecord or .parquet, or pass format=."
        )
    return _SUFFIXES[suffix]


def _where(patterns, files):
    """How messages name a set of files: the one file, the glob, or the first few."""
    if len(files) == 1:
        return files[0]
    if len(patterns) == 1:
        return f"{patterns[0]} ({len(files)} files)"
    named = ", ".join(files[:_NAMED_FILES])
    more = f" and {len(files) - _NAMED_FILES} more" if len(files) > _NAMED_FILES else ""
    return f"{len(files)} files ({named}{more})"


class TextFiles:
    """Training data read from files while training runs (a stream source).

    Args:
        files: str or list of str. A glob, a path, or a list of paths
            (globs allowed in it).
        columns: str, tuple of str / int, or None. The column(s) holding
            the text: one name for a corpus, two or three for pairs /
            triplets (in the order the method expects them). None: the
            whole line (`.txt`), `"text"` / `"sentence"` (`.jsonl`), the
            first column (`.tsv`, `.csv`) or the feature `"text"`
            (TFRecord, Parquet).
        format: str or None. One of `FORMATS`; None tells it from each
            file's suffix (all files must then share one format).

    Examples:

    ```python
    keras_sentemb.fit_simcse(TextFiles("wiki/part-*.txt"), steps=10_000)
    keras_sentemb.fit_simcse(TextFiles(["a.jsonl", "b.jsonl"], columns="body"), steps=500)
    ```
    """

    def __init__(self, files, columns=None, format=None):
        patterns = [files] if isinstance(files, (str, os.PathLike)) else list(files)
        if not patterns:
            raise ValueError("`files` is empty: name at least one training file.")
        self.files = []
        for pattern in patterns:
            if not isinstance(pattern, (str, os.PathLike)):
                raise ValueError(f"`files` must hold paths; received {type(pattern).__name__}.")
            self.files.extend(expand_files(os.fspath(pattern)))
        formats = {file_format(f, format) for f in self.files}
        if len(formats) > 1:
            raise ValueError(
                f"The training files mix formats {sorted(formats)}; pass one format at a time "
                "(or mix them as datasets, each with its own weight)."
            )
        self.format = formats.pop()
        if isinstance(columns, (str, int)):
            columns = (columns,)
        self.columns = None if columns is None else tuple(columns)
        self.size = None  # not counted: that would be a full pass over the data
        self.where = _where([os.fspath(p) for p in patterns], self.files)
        remember_files([self.where, *map(os.fspath, patterns)], self.files)
        self.rows_tell_files = True  # a raw row's FILE is its place in `files`

    def __repr__(self):
        return f"TextFiles({len(self.files)} {self.format} file(s), columns={self.columns})"

    def rows(self, names, seed=None, cycle_length=8, shard=None, scan=None, counter=None):
        """One pass over the files: rows `{name: tf.string}`, files in a seeded order.

        Repeated (`.repeat()`), each pass draws a new file order. Records
        with a problem (a missing column, a broken record, bytes that are
        not UTF-8) and blank ones are left out, and counted by `counter`.

        Args:
            names: tuple of str. The output names, one per column.
            seed: int or None. Shuffles the file order each epoch (None:
                file order as listed).
            cycle_length: int. Files read at once (interleaved).
            shard: `(count, index)` or None. Read only files `index`,
                `index + count`, ... (this worker's files).
            scan: int or None. Read at most this many records of each file
                (rows with an empty column included): a bounded look at the
                data.
            counter: `RowCounter` or None. Counts the records read, by
                problem, and the passes.
        """
        read = self._reader(names)
        files = tf.data.Dataset.from_tensor_slices((self.files, tf.range(len(self.files))))
        if shard is not None:
            files = files.shard(*shard)
        if seed is not None and len(self.files) > 1:
            files = files.shuffle(len(self.files), seed=seed, reshuffle_each_iteration=True)
        if scan is not None:
            read = _bounded(read, scan)
        rows = files.interleave(
            read, cycle_length=max(1, min(cycle_length, len(self.files) // (shard or (1,))[0])),
            block_length=16,
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True,
        )
        if scan is None:
            rows = rows.concatenate(end_of_pass(names))
        return drop_problems(rows, names, counter)

    def parts(self, names):
        """`(file, raw rows)` per file, in the listed order (for checking the first records)."""
        read = self._reader(names)
        return [(path, read(path, index)) for index, path in enumerate(self.files)]

    def wanted(self, names):
        """The columns read for `names`, as messages name them."""
        columns = self._columns_for(names)
        if columns is None:
            return ("text",) if self.format == "jsonl" else tuple(names)
        return columns

    def fields(self):
        """The fields the first file's first records hold (a set), or None."""
        return readers.fields_of(self.files[0], self.format)

    # ------------------------------------------------------------ formats
    def _columns_for(self, names):
        if self.columns is None and len(names) > 1 and self.format in (
                "csv", "jsonl", "tfrecord", "parquet"):
            return tuple(names)  # pairs / triplets: the columns named as the method names them
        if self.columns is None:
            defaults = {"txt": None, "jsonl": None, "tsv": tuple(range(len(names))),
                        "csv": tuple(range(len(names))), "tfrecord": ("text",),
                        "parquet": ("text",)}
            columns = defaults[self.format]
            if columns is not None and len(columns) != len(names):
                raise ValueError(
                    f"{len(names)} columns {list(names)} are needed from the {self.format} files; "
                    "name them with `columns=`."
                )
            if self.format == "txt" and len(names) != 1:
                raise ValueError(
                    f".txt files hold one sentence a line; {list(names)} need a .tsv, .csv, "
                    ".jsonl, TFRecord or Parquet file with `columns=`."
                )
            return columns
        if len(self.columns) != len(names):
            raise ValueError(
                f"`columns` names {len(self.columns)} column(s) {list(self.columns)}; "
                f"{len(names)} are needed ({list(names)})."
            )
        if self.format == "txt":
            raise ValueError(".txt files hold one sentence a line and have no columns; "
                             "use .tsv, .csv, .jsonl, TFRecord or Parquet files for `columns`.")
        return self.columns

    def _reader(self, names):
        """`read(path)`: a file's raw rows (see `keras_sentemb.data.stream_readers`)."""
        columns = self._columns_for(names)
        fmt = self.format
        if fmt == "txt":
            return readers.txt_reader(names)
        if fmt in ("tsv", "csv"):
            delimiter = "\t" if fmt == "tsv" else ","
            indices, header = self._indices(columns, delimiter)
            if fmt == "csv":
                return readers.csv_reader(indices, names)
            return readers.tsv_reader(indices, names, header)
        if fmt == "jsonl":
            return readers.jsonl_reader(columns, names)
        if fmt == "tfrecord":
            return readers.tfrecord_reader(columns, names)
        return readers.parquet_reader(columns, names)

    def _header(self, delimiter):
        """The header of the first file (all files must share it)."""
        def first_line(path):
            with tf.io.gfile.GFile(path, "rb") as f:
                raw = f.read(1 << 16)
            if path.endswith(".gz"):
                import zlib

                raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, 1 << 16)
            return raw.decode("utf-8", "replace").splitlines()[:1] or [""]

        import csv

        first = gfile_call(first_line, self.files[0])
        return [h.strip() for h in next(csv.reader(first, delimiter=delimiter))]

    def _indices(self, columns, delimiter):
        """`(indices, header)`: the columns' positions, and whether a header line names them.

        A CSV file always has a header line; a TSV file has one when the
        columns are named.
        """
        if all(isinstance(c, int) for c in columns):
            return list(columns), delimiter == ","
        header = self._header(delimiter)
        missing = [c for c in columns if c not in header]
        if missing:
            raise ValueError(
                f"{self.files[0]} has no column(s) {missing}; its header is {header}."
            )
        return [header.index(c) for c in columns], True


def _bounded(read, scan):
    return lambda path, index: read(path, index).take(scan)


class DatasetSource:
    """A `tf.data.Dataset` (or a TFDS split) as a stream source.

    Args:
        dataset: `tf.data.Dataset` of strings, or of dicts / tuples holding
            the columns.
        columns: tuple of str / int or None. The dict keys (or tuple
            positions) of the columns; None: the one string feature, or the
            tuple's first positions in order.
        name: str. How errors name it.
    """

    def __init__(self, dataset, columns=None, name="the dataset"):
        self.dataset = dataset
        self.columns = None if columns is None else (
            (columns,) if isinstance(columns, (str, int)) else tuple(columns))
        self.name = name
        self.files = []
        cardinality = int(dataset.cardinality())
        self.size = cardinality if cardinality >= 0 else None
        self.infinite = cardinality == tf.data.INFINITE_CARDINALITY

    def __repr__(self):
        return f"DatasetSource({self.name}, size={self.size})"

    @property
    def where(self):
        return self.name

    def rows(self, names, seed=None, cycle_length=None, shard=None, scan=None, counter=None):
        """The dataset's rows `{name: tf.string}` (one pass; endless if the dataset is).

        Numeric features (a TFDS class label) are read as their text; `scan`
        reads at most that many elements. Rows with an empty text or bytes
        that are not UTF-8 are left out, and counted by `counter`.
        """
        raw = self._raw_rows(names, scan)
        if scan is None and not self.infinite:
            raw = raw.concatenate(end_of_pass(names))
        return drop_problems(raw, names, counter)

    def parts(self, names):
        """`[(name, raw rows)]`: the dataset as one part (for checking its first records)."""
        return [(self.name, self._raw_rows(names))]

    def wanted(self, names):
        """The features read for `names`, as messages name them."""
        return self._columns(names) or tuple(names)

    def fields(self):
        """The features the dataset yields (a set), or None for strings and tuples."""
        spec = self.dataset.element_spec
        return set(spec) if isinstance(spec, dict) else None

    def _columns(self, names):
        """The dict keys or tuple positions read for `names` (None: the strings themselves)."""
        spec = self.dataset.element_spec
        columns = self.columns
        if isinstance(spec, dict):
            if columns is None and all(n in spec for n in names):
                columns = tuple(names)  # the features named as the method names them
            if columns is None:
                columns = tuple(k for k, v in spec.items() if getattr(v, "dtype", None) == tf.string)
                if len(columns) != len(names):
                    raise ValueError(
                        f"{self.name} yields dicts with string features {list(columns)}; "
                        f"{len(names)} are needed ({list(names)}): pass `columns=`."
                    )
            missing = [c for c in columns if c not in spec]
            if missing:
                raise ValueError(f"{self.name} has no feature(s) {missing}; it has {list(spec)}.")
        elif isinstance(spec, tuple):
            # The first positions in order (a label after the text is left out when unused).
            columns = columns or tuple(range(min(len(spec), len(names))))
            if len(columns) != len(names):
                raise ValueError(
                    f"{self.name} yields {len(spec)}-tuples; {len(names)} columns are needed "
                    f"({list(names)}): pass `columns=`."
                )
        elif getattr(spec, "dtype", None) != tf.string or len(names) != 1:
            raise ValueError(
                f"{self.name} must yield strings (or dicts / tuples of {len(names)} string "
                f"columns); it yields {spec}."
            )
        for column in (columns or ()):
            dtype = getattr(spec[column], "dtype", None)
            if dtype is not None and dtype != tf.string and not (dtype.is_integer
                                                                 or dtype.is_floating):
                raise ValueError(f"{self.name}'s feature {column!r} is {dtype.name}, not a string.")
        return columns

    def _raw_rows(self, names, scan=None):
        columns = self._columns(names)
        tuples = isinstance(self.dataset.element_spec, tuple)

        def pick(*x):
            element = x if tuples else x[0]
            if columns is None:
                row = {names[0]: tf.strings.strip(element)}
            else:
                row = {n: _text(element[c]) for n, c in zip(names, columns)}
            row[PROBLEM] = tf.constant(OK, tf.int32)
            row[FILE] = tf.constant(0, tf.int32)
            return row

        dataset = self.dataset if scan is None else self.dataset.take(scan)
        return dataset.map(pick)


def _text(value):
    """A string cell stripped; a number as its text (a class label of a TFDS dataset)."""
    if value.dtype != tf.string:
        value = tf.strings.as_string(value)
    return tf.strings.strip(value)


def tfds_source(name, columns=None, split="train"):
    """A TFDS dataset (`"name"` or `"name:feature"`) as a `DatasetSource`."""
    import tensorflow_datasets as tfds  # slow to import; loaded only for a TFDS name

    name, _, feature = name.partition(":")
    if feature and columns is None:
        columns = (feature,)
    try:
        dataset = tfds.load(name, split=split, shuffle_files=False)
    except Exception as e:  # tfds raises many types (not found, no network)
        raise ValueError(f"Could not load TFDS dataset {name!r} (split {split!r}): {e}") from e
    return DatasetSource(dataset, columns, name=f"TFDS {name!r}")


def stream_source(data, columns=None, tfds=False):
    """`data` as a stream source, or None when it is in-memory data (read as before).

    Streamed: a `TextFiles` or `DatasetSource`; a glob; a text file larger
    than `IN_MEMORY_LIMIT` or on a remote file system; a file of a
    streamed-only format (`.jsonl`, `.tfrecord`, `.parquet`) or a gzip
    file (`.gz`); a
    `tf.data.Dataset`; a TFDS name with `tfds=True`. In memory: lists and
    tuples, and small local files (`.txt`, `.tsv`, `.csv`), which keep
    their exact batches.

    Args:
        data: the `data` argument of a `fit_*` function.
        columns: passed to the source made for a path or a dataset.
        tfds: bool. Stream a TFDS name (a string that is not a path).
            Defaults to `False` (the caller reads it into memory).

    Returns:
        A source with `rows(names, seed)`, `files` and `size` (None when
        unknown), or None.
    """
    if isinstance(data, (TextFiles, DatasetSource)):
        return data
    if isinstance(data, tf.data.Dataset):
        return DatasetSource(data, columns)
    if isinstance(data, os.PathLike):
        data = os.fspath(data)
    if not isinstance(data, str):
        return None
    if is_glob(data):
        return TextFiles(data, columns)
    if _is_remote(data):
        return TextFiles(data, columns)
    if os.path.isfile(data):
        try:
            fmt = file_format(data)
        except ValueError:
            return None
        if fmt in ("jsonl", "tfrecord", "parquet") or data.endswith(".gz"):
            return TextFiles(data, columns)  # the in-memory readers read plain text only
        if fmt == "txt" and os.path.getsize(data) > IN_MEMORY_LIMIT:
            logger.info("%s is larger than %d MiB: streamed, not read into memory",
                        data, IN_MEMORY_LIMIT // 2**20)
            return TextFiles(data, columns)
        return None
    if tfds and not os.path.exists(data) and os.sep not in data and not data.endswith(".txt"):
        return tfds_source(data, columns)
    return None

