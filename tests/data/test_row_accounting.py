"""Rows read and skipped: the readers' problem codes, the counters, the checks and their lines."""

import gzip
import json

import pytest
import tensorflow as tf

from keras_sentemb.data import read_errors
from keras_sentemb.data import row_accounting as ra
from keras_sentemb.data import stream_checks
from keras_sentemb.data.stream_batches import stream_batches
from keras_sentemb.data.stream_batches import streamed
from keras_sentemb.data.stream_readers import fields_of
from keras_sentemb.data.streams import TextFiles
from keras_sentemb.data.streams import expand_files


def counted(source, names):
    """`(usable rows as tuples, RowCounts)` of one pass over `source`."""
    counter = ra.RowCounter(source, names)
    rows = [tuple(r[n].decode() for n in names)
            for r in source.rows(names, counter=counter).as_numpy_iterator()]
    return rows, counter.counts()


def test_every_format_says_why_it_skips_a_record(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(
        b'{"text": "one"}\n{broken\n[1]\n{"body": "x"}\n{"text": 5}\n{"text": ""}\n'
        b'{"text": "caf\xe9"}\n{"text": "two"}\n')
    rows, counts = counted(TextFiles(str(tmp_path / "a.jsonl")), ("sentence",))
    assert rows == [("one",), ("two",)]
    assert counts.read == 7 and counts.blank == 1 and counts.passes == 1
    assert counts.skipped == {ra.BROKEN: 3, ra.MISSING: 1, ra.NOT_UTF8: 1}
    (tmp_path / "a.csv").write_bytes(b's1,s2\n"a, b",c\n"open,d\nonly\n\xff,e\nf,g\n')
    rows, counts = counted(TextFiles(str(tmp_path / "a.csv")), ("s1", "s2"))
    assert rows == [("a, b", "c"), ("f", "g")]
    assert counts.skipped == {ra.BROKEN: 1, ra.MISSING: 1, ra.NOT_UTF8: 1}
    (tmp_path / "a.tsv").write_text("a\tb\nshort\n\n")
    rows, counts = counted(TextFiles(str(tmp_path / "a.tsv")), ("s1", "s2"))
    assert rows == [("a", "b")] and counts.skipped == {ra.MISSING: 1} and counts.blank == 1


def test_tfrecord_and_parquet_count_a_missing_column(tmp_path):
    with tf.io.TFRecordWriter(str(tmp_path / "a.tfrecord")) as writer:
        for key, text in (("text", b"kept"), ("body", b"other")):
            feature = {key: tf.train.Feature(bytes_list=tf.train.BytesList(value=[text]))}
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=feature)).SerializeToString())
    source = TextFiles(str(tmp_path / "a.tfrecord"))
    rows, counts = counted(source, ("sentence",))
    assert rows == [("kept",)] and counts.skipped == {ra.MISSING: 1}
    assert source.fields() == {"text", "body"}
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.table({"body": ["a", "b"]}), str(tmp_path / "b.parquet"))
    (tmp_path / "c.parquet").write_bytes(b"")  # an empty file holds no rows
    rows, counts = counted(TextFiles(str(tmp_path / "*.parquet")), ("sentence",))
    assert rows == [] and counts.skipped == {ra.MISSING: 2}
    assert fields_of(str(tmp_path / "b.parquet"), "parquet") == {"body"}


def test_the_counter_counts_passes_and_the_rows_of_one():
    source = streamed(tf.data.Dataset.from_tensor_slices(["a", "b", "", "c"]))
    counter = ra.RowCounter(source, ("sentence",))
    rows = source.rows(("sentence",), counter=counter).repeat(3)
    assert len(list(rows.as_numpy_iterator())) == 9
    counts = counter.counts()
    assert (counts.read, counts.blank, counts.passes, counts.pass_rows) == (9, 3, 3, 3)
    assert counts.usable == 9 and not counts.over_share(0.0)


def test_the_share_rule_and_its_line(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"body": "x"}\n' * 2)
    source = TextFiles(str(tmp_path / "a.jsonl"))
    counts = ra.RowCounts(read=200, skipped={ra.MISSING: 2, ra.BROKEN: 1})
    assert counts.over_share(0.01) and not counts.over_share(0.015)
    ra.check_counts(source, ("sentence",), counts, max_skipped=0.015)
    with pytest.raises(read_errors.DataError) as info:
        ra.check_counts(source, ("sentence",), counts, max_skipped=0.01)
    assert str(info.value) == (
        f"{tmp_path / 'a.jsonl'}: 3 of 200 rows read were skipped (1.5 %, more than the 1 % "
        "allowed by max_skipped / --max-skipped): 2 lack the field 'text' (its records have "
        "the fields ['body']); 1 are broken records.")
    with pytest.raises(read_errors.DataError, match="holds 2 usable row.s., fewer than one "
                       "batch of 4: 2 read, 0 skipped"):
        ra.check_counts(source, ("sentence",), ra.RowCounts(read=2), batch_size=4, whole=True)


def test_accounting_collects_the_counters_of_the_streams_built_inside(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"".join(b"line %d\n" % i for i in range(30)) + b"\xff\n")
    source = streamed(str(tmp_path / "*.txt"))
    assert ra.active_accounting() is None
    with pytest.raises(read_errors.DataError, match=r"1 of 31 rows read were skipped \(3.23 %"):
        with ra.accounting(max_skipped=0.01):  # the whole source is read before training
            stream_batches(source, ("sentence",), 4, seed=0)
    with ra.accounting(max_skipped=0.05) as rows:
        batches = stream_batches(source, ("sentence",), 4, seed=0)
    assert ra.active_accounting() is None and len(rows.counters) == 1
    next(iter(batches))  # the shuffle buffer reads the whole pass (and more)
    counts = rows.counters[0].counts()
    assert counts.passes >= 1 and counts.pass_rows == 30
    assert counts.skipped == {ra.NOT_UTF8: counts.read // 31 + (counts.read % 31 == 31)}
    rows.check(final=True)
    rows.max_skipped = 0.01
    rows.check(final=False)  # fewer than MIN_ROWS_TO_JUDGE rows: not judged yet
    with pytest.raises(read_errors.DataError, match=r"a.txt: \d+ of \d+ rows read.*not valid UTF-8"):
        rows.check(final=True)
    report = rows.report(steps=100, batch_size=4)
    assert report[str(tmp_path / "a.txt")]["passes"] == counts.passes


def test_the_first_records_name_the_missing_field_and_a_source_too_small(tmp_path):
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"body": f"x{i}"}) + "\n"
                                              for i in range(5)))
    with pytest.raises(read_errors.DataError) as info:
        stream_batches(streamed(str(tmp_path / "a.jsonl")), ("sentence",), 2)
    assert str(info.value) == (
        f"{tmp_path / 'a.jsonl'}: none of the 5 row(s) read holds the columns ['text']: 5 lack "
        "the field 'text' (its records have the fields ['body']).")
    (tmp_path / "b.txt").write_text("same\nsame\nsame\nother\n")
    small = streamed(str(tmp_path / "b.txt"))
    with pytest.raises(read_errors.DataError, match="fewer than one batch of 5"):
        stream_batches(small, ("sentence",), 5)
    with pytest.raises(read_errors.DataError, match="2 distinct usable row.s., fewer than one "
                       "batch of 3 with no text twice"):
        stream_batches(small, ("sentence",), 3, no_duplicates=True)
    stream_batches(small, ("sentence",), 3)  # duplicates allowed: 4 rows make a batch


def test_the_check_reads_a_bounded_head_of_a_large_source(tmp_path):
    for f in range(3):
        (tmp_path / f"part-{f}.txt").write_text("".join(f"row {f} {i}\n" for i in range(400)))
    (tmp_path / "part-3.txt").write_bytes(b"\x00not read")
    counts, distinct, whole = stream_checks.head_counts(
        TextFiles(str(tmp_path / "part-*.txt")), ("sentence",), 8)
    assert not whole and stream_checks.CHECK_RECORDS <= counts.read < 400 and distinct >= 8


def test_a_file_gone_or_cut_short_is_one_line_naming_it(tmp_path):
    for f in range(2):
        (tmp_path / f"part-{f}.txt").write_text("a\nb\n")
    source = streamed(str(tmp_path / "part-*.txt"))
    (tmp_path / "part-1.txt").unlink()  # gone between listing and reading
    with pytest.raises(read_errors.DataError, match=r"cannot read .*part-1.txt: the file is gone "
                       r"\(No such file or directory\)$"):
        stream_batches(source, ("sentence",), 2)
    packed = gzip.compress(b"".join(b"line %d\n" % i for i in range(5000)))
    (tmp_path / "cut.txt.gz").write_bytes(packed[: len(packed) // 2])
    rows = TextFiles(str(tmp_path / "cut.txt.gz")).rows(("sentence",))
    with pytest.raises(tf.errors.OpError) as info:
        list(rows.as_numpy_iterator())
    assert str(read_errors.read_error(info.value, "x")) == (
        f"cannot read {tmp_path / 'cut.txt.gz'}: the gzip data ends before its end marker "
        "(the file is truncated)")
    (tmp_path / "whole.txt.gz").write_bytes(gzip.compress(b"a\n") + gzip.compress(b"b\n"))
    assert [r["sentence"] for r in TextFiles(str(tmp_path / "whole.txt.gz")).rows(
        ("sentence",)).as_numpy_iterator()] == [b"a", b"b"]


@pytest.mark.parametrize("error, reason", [
    (tf.errors.FailedPreconditionError(
        None, None, "Error executing an HTTP request: libcurl code 6 meaning 'Could not resolve "
        "hostname', error details: Could not resolve host: storage.googleapis.com\n\twhen "
        "reading gs://b/"), "cannot resolve the host storage.googleapis.com (no network?)"),
    (tf.errors.FailedPreconditionError(None, None, "libcurl code 7 meaning 'x', error "
                                       "details: Failed to connect to host: h.example"),
     "cannot connect to h.example (no network?)"),
    (tf.errors.PermissionDeniedError(None, None, "Error executing an HTTP request: HTTP "
                                     "response code 403"), "permission denied (no credentials"),
    (tf.errors.NotFoundError(None, None, "Error executing an HTTP request: HTTP response code "
                             "404 with body 'The specified bucket does not exist.'"),
     "not found (no such bucket, folder or file)"),
    (tf.errors.UnimplementedError(None, None, "File system scheme 's3' not implemented"),
     "this TensorFlow has no s3:// file system (TensorFlow reads it through tensorflow-io"),
])
def test_remote_paths_that_cannot_be_listed_are_one_line(error, reason, monkeypatch):
    def fail(path):
        raise error

    monkeypatch.setattr(tf.io.gfile, "glob", fail)
    with pytest.raises(read_errors.DataError) as info:
        expand_files("s3://bucket/part-*.txt")
    assert str(info.value).startswith(f"cannot list s3://bucket/part-*.txt: {reason}")
    assert "\n" not in str(info.value)


def test_errors_that_do_not_come_from_reading_data_pass_through():
    assert read_errors.read_error(ValueError("x"), "f") is None
    assert read_errors.read_error(tf.errors.InvalidArgumentError(
        None, None, "Incompatible shapes: [2] vs. [3] [[{{node add}}]]"), "f") is None
    with pytest.raises(tf.errors.InvalidArgumentError):
        with read_errors.reading("f"):
            raise tf.errors.InvalidArgumentError(None, None, "Incompatible shapes")
    wrapped = tf.errors.InvalidArgumentError(None, None, (
        "Graph execution error:\n\nDetected at node IteratorGetNext defined at:\n  File \"x\"\n"
        "\nValueError: a reader failed\nTraceback (most recent call last):\n\n"
        "keras_sentemb.data.read_errors.DataError: cannot read a.txt.gz: cut short\n"
        "\t [[{{node IteratorGetNext}}]] [Op:__inference_step_1]"))
    assert str(read_errors.read_error(wrapped, "x")) == "cannot read a.txt.gz: cut short"


def test_skipped_rows_are_told_by_file(tmp_path):
    for f in range(3):
        broken = "{broken\n" * (5 * f)
        (tmp_path / f"part-{f}.jsonl").write_text(
            broken + "".join(json.dumps({"text": f"f{f} {i}"}) + "\n" for i in range(20)))
    source = TextFiles(str(tmp_path / "part-*.jsonl"))
    rows, counts = counted(source, ("sentence",))
    assert len(rows) == 60 and counts.skipped == {ra.BROKEN: 15}
    assert counts.worst_files == ((str(tmp_path / "part-2.jsonl"), 10),
                                  (str(tmp_path / "part-1.jsonl"), 5))
    assert ra.why_skipped(source, ("sentence",), counts) == (
        f"15 are broken records; the most in {tmp_path / 'part-2.jsonl'} (10), "
        f"{tmp_path / 'part-1.jsonl'} (5)")
