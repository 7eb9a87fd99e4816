"""One reader per file format: a file's records as raw rows, each with its problem code.

A reader is `read(path, index) -> tf.data.Dataset` of raw rows `{name:
tf.string, PROBLEM: int32, FILE: int32}` (see
`keras_sentemb.data.row_accounting`; `index` is the file's place in the
source's list, so skipped rows are told by file): every record of the file
gives a row, and a record the reader cannot use says why in its
code (`MISSING`, `BROKEN`; `NOT_UTF8` and blank texts are told apart later,
for every format at once). Nothing is filtered here: `TextFiles.rows`
counts and drops in one place.

- `.txt`: a line is a row.
- `.tsv`: a line split on tabs; too few fields is `MISSING`.
- Empty lines of every text format are no records (left out as blank).
- `.csv`: a line holding one record (quoted fields allowed, a quoted field
  cannot hold a line break), after each file's header line; a line that is
  not CSV is `BROKEN`, one with too few fields `MISSING`.
- `.jsonl`: a JSON object a line; not JSON or not an object is `BROKEN`, a
  missing key `MISSING`, a value that is not a string `BROKEN`, bytes that
  are not UTF-8 `NOT_UTF8`.
- TFRecord: `tf.train.Example`s; a missing feature is `MISSING`. A record
  that fails its checksum stops the reading with one line naming the file.
- Parquet (pyarrow): a file without a column gives its rows as `MISSING`;
  a file that is not Parquet stops with one line naming it; an empty (0-byte)
  file holds no rows.

A `.gz` file is read as gzip and, once read, checked to end with gzip's end
marker: TensorFlow reads a truncated gzip file without an error, so a file
cut short stops with one line naming it instead of training on a part.
`fields_of(path, format)` names what a file's first records hold (for
messages).
"""

import csv
import json
import zlib

import tensorflow as tf

from keras_sentemb.data.read_errors import DataError
from keras_sentemb.data.row_accounting import BROKEN
from keras_sentemb.data.row_accounting import FILE
from keras_sentemb.data.row_accounting import MISSING
from keras_sentemb.data.row_accounting import NOT_UTF8
from keras_sentemb.data.row_accounting import OK
from keras_sentemb.data.row_accounting import PROBLEM
from keras_sentemb.data.row_accounting import utf8_valid
from keras_sentemb.missing_dependency import is_missing
from keras_sentemb.missing_dependency import missing_dependency

# A missing TFRecord feature reads as this (bytes that no UTF-8 text holds).
_ABSENT = b"\xff\x00absent"
_CSV_FIELD = r'(?:[^",]*|"(?:[^"]|"")*")'
_CSV_RECORD = rf"{_CSV_FIELD}(?:,{_CSV_FIELD})*"
_QUOTED = r'"(?:[^"]|"")*"'
# Records of a file looked at to name its fields.
_FIELD_SAMPLE = 20
_VERIFIED_GZIP = set()


def compression(path):
    return "GZIP" if str(path).endswith(".gz") else ""


def _compression_tensor(path):
    if isinstance(path, str):
        return compression(path)
    return tf.where(tf.strings.regex_full_match(path, r".*\.gz"), "GZIP", "")


def _check_gzip(path):
    """Raise `DataError` unless the gzip file `path` ends with gzip's end marker."""
    path = path.numpy().decode("utf-8") if hasattr(path, "numpy") else str(path)
    if not path.endswith(".gz") or path in _VERIFIED_GZIP:
        return ""
    inflate, empty = zlib.decompressobj(16 + zlib.MAX_WBITS), True
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                empty = False
                while chunk:
                    inflate.decompress(chunk, 1 << 24)
                    chunk = inflate.unconsumed_tail
                    if inflate.eof and inflate.unused_data:  # a next gzip member
                        chunk = inflate.unused_data + chunk
                        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    except zlib.error as error:
        raise DataError(f"cannot read {path}: not valid gzip data ({error})") from None
    if not (empty or inflate.eof):
        raise DataError(f"cannot read {path}: the gzip data ends before its end marker "
                        "(the file is truncated)")
    _VERIFIED_GZIP.add(path)
    return ""


def _gzip_checked(path, dataset):
    """`dataset` (the records of `path`), then a check that a `.gz` file was whole (no rows)."""
    check = tf.data.Dataset.from_tensors(path).map(
        lambda p: tf.ensure_shape(tf.py_function(_check_gzip, [p], tf.string), []))
    check = check.filter(lambda _: False)
    if isinstance(dataset.element_spec, dict):
        spec = dataset.element_spec
        check = check.map(lambda _: {k: tf.zeros([], s.dtype) for k, s in spec.items()})
    return dataset.concatenate(check)


def text_lines(path):
    """The lines of a text file (gzip when named `.gz`), checked whole when gzip."""
    lines = tf.data.TextLineDataset(path, compression_type=_compression_tensor(path))
    return _gzip_checked(path, lines)


def _row(cells, names, code):
    row = {n: tf.strings.strip(c) for n, c in zip(names, cells)}
    row[PROBLEM] = tf.cast(code, tf.int32)
    return row


def _of_file(row, index):
    """`row` with the index of its file in the source's list (`FILE`)."""
    return dict(row, **{FILE: tf.cast(index, tf.int32)})


def _blank(line):
    return tf.equal(tf.strings.strip(line), "")


def txt_reader(names):
    return lambda path, index=0: text_lines(path).map(
        lambda line: _of_file(_row([line], names, OK), index))


def tsv_reader(indices, names, header):
    """Rows of tab-separated lines: the fields at `indices` (after a header line if `header`)."""
    need = max(indices) + 1

    def row(line):
        parts = tf.strings.split(line, "\t")
        padded = tf.concat([parts, tf.fill([need], "")], 0)
        code = tf.where((tf.size(parts) >= need) | _blank(line), OK, MISSING)
        return _row([padded[i] for i in indices], names, code)

    def read(path, index=0):
        lines = text_lines(path)
        return (lines.skip(1) if header else lines).map(lambda line: _of_file(row(line), index))

    return read


def csv_reader(indices, names):
    """Rows of CSV records, one a line, after each file's header: the fields at `indices`."""
    order = sorted(set(indices))
    need = max(indices) + 1
    blank = "," * (need - 1)

    def row(line):
        line = tf.strings.regex_replace(line, "\r$", "")
        text = utf8_valid(line)
        well_formed = text & tf.strings.regex_full_match(line, _CSV_RECORD)
        unquoted = tf.strings.regex_replace(line, _QUOTED, "")
        fields = tf.strings.length(tf.strings.regex_replace(unquoted, "[^,]", "")) + 1
        enough = fields >= need
        safe = tf.where(well_formed & enough, line, blank)
        cells = tf.io.decode_csv(safe, [""] * len(order), select_cols=order)
        code = tf.where(~text, NOT_UTF8, tf.where(~well_formed, BROKEN,
                                                  tf.where(enough, OK, MISSING)))
        code = tf.where(_blank(line), OK, code)  # an empty line is no record (left out as blank)
        return _row([cells[order.index(i)] for i in indices], names, code)

    return lambda path, index=0: text_lines(path).skip(1).map(
        lambda line: _of_file(row(line), index))


def _json_cells(line, keys, width):
    """`(cells, code)` of one JSON line (see the module docstring)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return [b""] * width, NOT_UTF8
    if not text.strip():
        return [b""] * width, OK  # an empty line: no record (left out as blank)
    try:
        obj = json.loads(text)
    except ValueError:
        return [b""] * width, BROKEN
    if not isinstance(obj, dict):
        return [b""] * width, BROKEN
    if keys is None:
        keys = ("sentence",) if "sentence" in obj else ("text",)
    cells, code = [], OK
    for key in keys:
        value = obj.get(key)
        if key not in obj:
            code = max(code, MISSING)
        elif value is not None and not isinstance(value, str):
            code = max(code, BROKEN)
        cells.append(value.encode("utf-8") if isinstance(value, str) else b"")
    return cells, code


def jsonl_reader(columns, names):
    def parse(line):
        cells, code = _json_cells(line.numpy(), columns, len(names))
        return cells + [code]

    def row(line):
        out = tf.py_function(parse, [line], [tf.string] * len(names) + [tf.int32])
        return _row([tf.ensure_shape(c, []) for c in out[:-1]], names,
                    tf.ensure_shape(out[-1], []))

    return lambda path, index=0: text_lines(path).map(lambda line: _of_file(row(line), index))


def tfrecord_reader(columns, names):
    features = {c: tf.io.FixedLenFeature([], tf.string, default_value=_ABSENT)
                for c in columns}

    def row(record):
        parsed = tf.io.parse_single_example(record, features)
        absent = tf.reduce_any(tf.stack([tf.equal(parsed[c], _ABSENT) for c in columns]))
        cells = [tf.where(tf.equal(parsed[c], _ABSENT), "", parsed[c]) for c in columns]
        return _row(cells, names, tf.where(absent, MISSING, OK))

    def read(path, index=0):
        records = tf.data.TFRecordDataset(path, compression_type=_compression_tensor(path))
        return _gzip_checked(path, records.map(lambda record: _of_file(row(record), index)))

    return read


def _pyarrow_parquet(what="Reading Parquet training files"):
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        if is_missing(e, "pyarrow"):
            raise missing_dependency("pyarrow", what, "parquet") from None
        raise
    return pq


def _open_parquet(path):
    """A `pyarrow.parquet.ParquetFile` of `path` (remote files are read into memory), or None."""
    import pyarrow as pa

    pq = _pyarrow_parquet()
    if tf.io.gfile.stat(path).length == 0:
        return None  # an empty file holds no rows
    try:
        if "://" in path:  # one file at a time in memory (pyarrow reads local files lazily)
            with tf.io.gfile.GFile(path, "rb") as f:
                return pq.ParquetFile(pa.BufferReader(f.read()))
        return pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as error:
        raise DataError(f"cannot read {path}: not a Parquet file "
                        f"({str(error).splitlines()[0]})") from None


def _parquet_cell(value):
    if value is None:
        return b"", OK
    if not isinstance(value, str):
        return b"", BROKEN
    return value.strip().encode("utf-8"), OK


def parquet_rows(path, wanted):
    """`(cell, ..., code)` tuples of a Parquet file's rows (see the module docstring)."""
    table = _open_parquet(path)
    if table is None:
        return
    with table:
        if any(c not in table.schema_arrow.names for c in wanted):
            for _ in range(table.metadata.num_rows):
                yield (b"",) * len(wanted) + (MISSING,)
            return
        for batch in table.iter_batches(batch_size=1024, columns=wanted):
            for values in zip(*[batch.column(c).to_pylist() for c in wanted]):
                cells = [_parquet_cell(v) for v in values]
                yield tuple(c for c, _ in cells) + (max(code for _, code in cells),)


def parquet_reader(columns, names):
    _pyarrow_parquet()
    wanted = [str(c) for c in columns]

    def rows(path):
        yield from parquet_rows(path.decode("utf-8") if isinstance(path, bytes) else path,
                                wanted)

    def read(path, index=0):
        signature = tuple(tf.TensorSpec([], tf.string) for _ in wanted) + (
            tf.TensorSpec([], tf.int32),)
        ds = tf.data.Dataset.from_generator(rows, args=(path,), output_signature=signature)
        return ds.map(lambda *cells: _of_file(_row(cells[:-1], names, cells[-1]), index))

    return read


# -------------------------------------------------------------- fields
def _json_fields(path):
    fields = set()
    with tf.io.gfile.GFile(path, "rb") as f:
        raw = f.read(1 << 20)
    if path.endswith(".gz"):
        raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, 1 << 20)
    for line in raw.splitlines()[:_FIELD_SAMPLE]:
        try:
            obj = json.loads(line.decode("utf-8"))
        except ValueError:
            continue
        if isinstance(obj, dict):
            fields.update(obj)
    return fields


def _tfrecord_fields(path):
    fields = set()
    records = tf.data.TFRecordDataset(path, compression_type=compression(path))
    for record in records.take(_FIELD_SAMPLE).as_numpy_iterator():
        example = tf.train.Example.FromString(record)
        fields.update(example.features.feature.keys())
    return fields


def _header_fields(path, delimiter):
    with tf.io.gfile.GFile(path, "rb") as f:
        raw = f.read(1 << 16)
    if path.endswith(".gz"):
        raw = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, 1 << 16)
    first = raw.decode("utf-8", "replace").splitlines()[:1] or [""]
    return {h.strip() for h in next(csv.reader(first, delimiter=delimiter))}


def fields_of(path, format):
    """The field names a file's first records hold (a set), or None when it cannot tell.

    Args:
        path: str. A file.
        format: str. Its format (`"jsonl"`, `"tfrecord"`, `"parquet"`,
            `"csv"`, `"tsv"`; `"txt"` has none).
    """
    try:
        if format == "jsonl":
            return _json_fields(path)
        if format == "tfrecord":
            return _tfrecord_fields(path)
        if format == "parquet":
            table = _open_parquet(path)
            return None if table is None else set(table.schema_arrow.names)
        if format in ("csv", "tsv"):
            return _header_fields(path, "," if format == "csv" else "\t")
    except Exception:  # only for a message: a file that cannot be read names no fields
        return None
    return None
