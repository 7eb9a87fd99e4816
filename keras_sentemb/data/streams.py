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
- `.csv`: comma-separated with a header line (quoted fields allowed);
- `.tfrecord` / `.tfrec` (`.gz` compressed too): `tf.train.Example` records
  with a bytes feature per column;
- `.parquet`: needs pyarrow (`pip install -e ".[parquet]"`).

Small in-memory data (a list, a single small text file) is not a stream:
the methods read it as before (`keras_sentemb.data.corpus.load_corpus`),
with the same batches for the same seed.

A source yields rows `{name: tf.string}` in file order; shuffling,
batching, mixing and sharding are in `keras_sentemb.data.stream_batches`.
"""

import glob as _glob
import json
import logging
import os

import tensorflow as tf

from keras_sentemb.missing_dependency import is_missing
from keras_sentemb.missing_dependency import missing_dependency

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


def is_glob(path):
    """Whether `path` is a pattern (holds `*`, `?` or `[`)."""
    return isinstance(path, str) and any(c in path for c in _GLOB_CHARS)


def _is_remote(path):
    return "://" in path


def expand_files(pattern):
    """The files a glob (or one path) names, sorted; a one-line error when none.

    Args:
        pattern: str. A path or a glob, on any file system `tf.io.gfile` reads.

    Returns:
        list of str.
    """
    if is_glob(pattern):
        files = sorted(tf.io.gfile.glob(pattern) if _is_remote(pattern) else _glob.glob(pattern))
        files = [f for f in files if not tf.io.gfile.isdir(f)]
        if not files:
            raise ValueError(f"No training file matches {pattern!r}.")
        return files
    if not tf.io.gfile.exists(pattern) or tf.io.gfile.isdir(pattern):
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

    def __repr__(self):
        return f"TextFiles({len(self.files)} {self.format} file(s), columns={self.columns})"

    def rows(self, names, seed=None, cycle_length=8, shard=None, scan=None):
        """One pass over the files: rows `{name: tf.string}`, files in a seeded order.

        Repeated (`.repeat()`), each pass draws a new file order.

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
        """
        columns = self._columns_for(names)
        files = tf.data.Dataset.from_tensor_slices(self.files)
        if shard is not None:
            files = files.shard(*shard)
        if seed is not None and len(self.files) > 1:
            files = files.shuffle(len(self.files), seed=seed, reshuffle_each_iteration=True)
        read = self._reader(columns, names)
        if scan is not None:
            read = _bounded(read, scan)
        return files.interleave(
            read, cycle_length=max(1, min(cycle_length, len(self.files) // (shard or (1,))[0])),
            block_length=16,
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True,
        ).filter(lambda row: _all_non_empty(row, names))

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

    def _reader(self, columns, names):
        fmt = self.format
        if fmt == "txt":
            return lambda f: _text_lines(f).map(lambda line: {names[0]: tf.strings.strip(line)})
        if fmt == "tsv":
            return self._tsv_reader(columns, names)
        if fmt == "csv":
            return self._csv_reader(columns, names)
        if fmt == "jsonl":
            return _jsonl_reader(columns, names)
        if fmt == "tfrecord":
            return _tfrecord_reader(columns, names)
        return _parquet_reader(columns, names)

    def _header(self, delimiter):
        """The header of the first file (all files must share it)."""
        with tf.io.gfile.GFile(self.files[0], "r") as f:
            first = f.readline().rstrip("\r\n")
        import csv

        return [h.strip() for h in next(csv.reader([first], delimiter=delimiter))]

    def _indices(self, columns, delimiter):
        if all(isinstance(c, int) for c in columns):
            return list(columns), False
        header = self._header(delimiter)
        missing = [c for c in columns if c not in header]
        if missing:
            raise ValueError(
                f"{self.files[0]} has no column(s) {missing}; its header is {header}."
            )
        return [header.index(c) for c in columns], True

    def _tsv_reader(self, columns, names):
        indices, header = self._indices(columns, "\t")
        need = max(indices) + 1

        def read(path):
            lines = _text_lines(path)
            if header:
                lines = lines.skip(1)
            parts = lines.map(lambda line: tf.strings.split(line, "\t"))
            parts = parts.filter(lambda p: tf.size(p) >= need)
            return parts.map(
                lambda p: {n: tf.strings.strip(p[i]) for n, i in zip(names, indices)}
            )

        return read

    def _csv_reader(self, columns, names):
        header = self._header(",")
        if all(isinstance(c, int) for c in columns):
            indices = list(columns)
        else:
            missing = [c for c in columns if c not in header]
            if missing:
                raise ValueError(
                    f"{self.files[0]} has no column(s) {missing}; its header is {header}."
                )
            indices = [header.index(c) for c in columns]
        order = sorted(set(indices))

        def read(path):
            ds = tf.data.experimental.CsvDataset(
                path, [tf.constant("", tf.string)] * len(order), header=True,
                select_cols=order, compression_type=_compression(path),
            ).ignore_errors()
            return ds.map(lambda *cells: {
                n: tf.strings.strip(cells[order.index(i)]) for n, i in zip(names, indices)
            })

        return read


def _bounded(read, scan):
    return lambda path: read(path).take(scan)


def _compression(path):
    return "GZIP" if str(path).endswith(".gz") else ""


def _text_lines(path):
    return tf.data.TextLineDataset(path, compression_type=_compression_tensor(path))


def _compression_tensor(path):
    if isinstance(path, str):
        return _compression(path)
    return tf.where(tf.strings.regex_full_match(path, r".*\.gz"), "GZIP", "")


def _all_non_empty(row, names):
    ok = tf.constant(True)
    for name in names:
        ok = tf.logical_and(ok, tf.strings.length(row[name]) > 0)
    return ok


def _jsonl_reader(columns, names):
    def parse(line):
        line = line.numpy().decode("utf-8", "replace")
        try:
            obj = json.loads(line)
        except ValueError:
            return [b""] * len(names)
        if not isinstance(obj, dict):
            return [b""] * len(names)
        keys = columns
        if keys is None:
            keys = ("sentence",) if "sentence" in obj else ("text",)
        out = []
        for key in keys:
            value = obj.get(key, "")
            out.append(value.strip().encode("utf-8") if isinstance(value, str) else b"")
        return out

    def read(path):
        def row(line):
            cells = tf.py_function(parse, [line], [tf.string] * len(names))
            return {n: tf.ensure_shape(c, []) for n, c in zip(names, cells)}

        return _text_lines(path).map(row)

    return read


def _tfrecord_reader(columns, names):
    features = {c: tf.io.FixedLenFeature([], tf.string, default_value="") for c in columns}

    def read(path):
        records = tf.data.TFRecordDataset(path, compression_type=_compression_tensor(path))

        def row(record):
            parsed = tf.io.parse_single_example(record, features)
            return {n: tf.strings.strip(parsed[c]) for n, c in zip(names, columns)}

        return records.map(row)

    return read


def _parquet_reader(columns, names):
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        if is_missing(e, "pyarrow"):
            raise missing_dependency("pyarrow", "Reading Parquet training files", "parquet") from None
        raise
    wanted = [str(c) for c in columns]

    def rows(path):
        path = path.decode("utf-8") if isinstance(path, bytes) else path
        if _is_remote(path):  # one file at a time in memory (pyarrow reads local files lazily)
            import pyarrow as pa

            with tf.io.gfile.GFile(path, "rb") as f:
                handle = pa.BufferReader(f.read())
        else:
            handle = path
        with pq.ParquetFile(handle) as table:
            missing = [c for c in wanted if c not in table.schema_arrow.names]
            if missing:
                raise ValueError(f"{path} has no column(s) {missing}; it has "
                                 f"{table.schema_arrow.names}.")
            for batch in table.iter_batches(batch_size=1024, columns=wanted):
                cells = [batch.column(c).to_pylist() for c in wanted]
                for values in zip(*cells):
                    yield tuple((v or "").strip().encode("utf-8") if isinstance(v, str)
                                else b"" for v in values)

    def read(path):
        ds = tf.data.Dataset.from_generator(
            rows, args=(path,),
            output_signature=tuple(tf.TensorSpec([], tf.string) for _ in wanted),
        )
        return ds.map(lambda *cells: dict(zip(names, cells)))

    return read


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

    def rows(self, names, seed=None, cycle_length=None, shard=None, scan=None):
        """The dataset's rows `{name: tf.string}` (one pass; endless if the dataset is).

        Numeric features (a TFDS class label) are read as their text; `scan`
        reads at most that many elements.
        """
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

            def pick(x):
                return {n: _text(x[c]) for n, c in zip(names, columns)}
        elif isinstance(spec, tuple):
            # The first positions in order (a label after the text is left out when unused).
            columns = columns or tuple(range(min(len(spec), len(names))))
            if len(columns) != len(names):
                raise ValueError(
                    f"{self.name} yields {len(spec)}-tuples; {len(names)} columns are needed "
                    f"({list(names)}): pass `columns=`."
                )

            def pick(*x):
                return {n: _text(x[c]) for n, c in zip(names, columns)}
        else:
            if getattr(spec, "dtype", None) != tf.string or len(names) != 1:
                raise ValueError(
                    f"{self.name} must yield strings (or dicts / tuples of {len(names)} string "
                    f"columns); it yields {spec}."
                )

            def pick(x):
                return {names[0]: tf.strings.strip(x)}

        for column in (columns or ()):
            dtype = getattr(spec[column], "dtype", None)
            if dtype is not None and dtype != tf.string and not (dtype.is_integer
                                                                 or dtype.is_floating):
                raise ValueError(f"{self.name}'s feature {column!r} is {dtype.name}, not a string.")
        dataset = self.dataset if scan is None else self.dataset.take(scan)
        return dataset.map(pick).filter(lambda row: _all_non_empty(row, names))


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
    streamed-only format (`.jsonl`, `.tfrecord`, `.parquet`); a
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
        if fmt in ("jsonl", "tfrecord", "parquet"):
            return TextFiles(data, columns)
        if fmt == "txt" and os.path.getsize(data) > IN_MEMORY_LIMIT:
            logger.info("%s is larger than %d MiB: streamed, not read into memory",
                        data, IN_MEMORY_LIMIT // 2**20)
            return TextFiles(data, columns)
        return None
    if tfds and not os.path.exists(data) and os.sep not in data and not data.endswith(".txt"):
        return tfds_source(data, columns)
    return None

