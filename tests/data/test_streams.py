"""Stream sources: every file format, globs, datasets; rows read lazily, errors in one line."""

import json

import pytest
import tensorflow as tf

from keras_sentemb.data.stream_batches import streamed
from keras_sentemb.data.streams import IN_MEMORY_LIMIT
from keras_sentemb.data.streams import DatasetSource
from keras_sentemb.data.streams import TextFiles
from keras_sentemb.data.streams import stream_source

PAIRS = [(f"anchor {i}", f"positive {i}") for i in range(6)]


def _rows(source, names, n):
    """The first `n` rows (file order: no seed), as tuples of str."""
    out = []
    for row in source.rows(names).take(n):
        out.append(tuple(row[k].numpy().decode() for k in names))
    return out


def test_text_files_from_a_glob_skip_empty_lines(tmp_path):
    (tmp_path / "part-0.txt").write_text(" one \n\ntwo\n")
    (tmp_path / "part-1.txt").write_text("three\n")
    (tmp_path / "other.txt").write_text("not matched\n")
    source = TextFiles(str(tmp_path / "part-*.txt"))
    assert source.format == "txt" and source.size is None and len(source.files) == 2
    rows = [r[0] for r in _rows(source, ("sentence",), 6)]
    assert sorted(rows) == ["one", "three", "two"]  # one pass


def test_jsonl_tsv_csv_tfrecord_and_parquet_pairs(tmp_path):
    with open(tmp_path / "p.jsonl", "w") as f:
        for a, b in PAIRS:
            f.write(json.dumps({"sent0": a, "sent1": b, "id": 1}) + "\n")
        f.write("not json\n")
    (tmp_path / "p.tsv").write_text("q\tp\n" + "".join(f"{a}\t{b}\n" for a, b in PAIRS) + "short\n")
    (tmp_path / "p.csv").write_text(
        "sent0,sent1\n" + "".join(f'"{a}, quoted",{b}\n' for a, b in PAIRS))
    with tf.io.TFRecordWriter(str(tmp_path / "p.tfrecord")) as w:
        for a, b in PAIRS:
            feature = {k: tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
                       for k, v in (("sent0", a), ("sent1", b))}
            w.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    names = ("sent0", "sent1")
    n = len(PAIRS)
    assert _rows(TextFiles(str(tmp_path / "p.jsonl")), names, n) == PAIRS
    assert _rows(TextFiles(str(tmp_path / "p.tsv"), columns=("q", "p")), names, n) == PAIRS
    assert _rows(TextFiles(str(tmp_path / "p.tsv"), columns=(1, 0)), names, n + 1)[1:] == [
        (b, a) for a, b in PAIRS]  # by number: the header line is a row
    assert _rows(TextFiles(str(tmp_path / "p.csv")), names, n) == [
        (f"{a}, quoted", b) for a, b in PAIRS]
    assert _rows(TextFiles(str(tmp_path / "p.tfrecord")), names, n) == PAIRS
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.table({"text": [a for a, _ in PAIRS]}), str(tmp_path / "t.parquet"))
    assert [r[0] for r in _rows(TextFiles(str(tmp_path / "t.parquet")), ("sentence",), n)] == [
        a for a, _ in PAIRS]


def test_jsonl_text_column_defaults_to_text_or_sentence(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n{"sentence": "y"}\n[1]\n')
    assert [r[0] for r in _rows(TextFiles(str(tmp_path / "a.jsonl")), ("sentence",), 2)] == [
        "x", "y"]


def test_datasets_stream_strings_dicts_and_tuples():
    strings = DatasetSource(tf.data.Dataset.from_tensor_slices(["a", " ", "b"]))
    assert strings.size == 3
    assert [r[0] for r in _rows(strings, ("sentence",), 3)] == ["a", "b"]
    dicts = DatasetSource(tf.data.Dataset.from_tensor_slices({"text": ["u"], "label": [0]}))
    assert _rows(dicts, ("sentence",), 1) == [("u",)]
    tuples = DatasetSource(tf.data.Dataset.from_tensor_slices((["a"], ["b"])))
    assert _rows(tuples, ("sent0", "sent1"), 1) == [("a", "b")]
    endless = DatasetSource(tf.data.Dataset.from_tensor_slices(["a"]).repeat())
    assert endless.size is None


def test_what_streams_and_what_stays_in_memory(tmp_path):
    small = tmp_path / "small.txt"
    small.write_text("a\nb\n")
    assert stream_source(["a", "b"]) is None
    assert stream_source(str(small)) is None  # today's exact batches
    assert stream_source("imdb_reviews") is None  # a TFDS name, unless asked for
    assert isinstance(stream_source(str(tmp_path / "*.txt")), TextFiles)
    big = tmp_path / "big.txt"
    with open(big, "wb") as f:
        f.truncate(IN_MEMORY_LIMIT + 1)
    assert isinstance(stream_source(str(big)), TextFiles)
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    assert isinstance(stream_source(str(tmp_path / "a.jsonl")), TextFiles)
    assert isinstance(stream_source(tf.data.Dataset.from_tensor_slices(["a"])), DatasetSource)


@pytest.mark.parametrize("make, match", [
    (lambda p: TextFiles(str(p / "none-*.txt")), "No training file matches"),
    (lambda p: TextFiles(str(p / "missing.txt")), "Training file not found"),
    (lambda p: TextFiles([str(p / "a.txt"), str(p / "a.jsonl")]), "mix formats"),
    (lambda p: TextFiles(str(p / "a.bin")), "Cannot tell the format"),
    (lambda p: TextFiles(str(p / "a.tsv"), columns="nope").rows(("sentence",)),
     r"no column\(s\) \['nope'\]; its header is \['q', 'p'\]"),
    (lambda p: TextFiles(str(p / "a.txt")).rows(("sent0", "sent1")), "one sentence a line"),
    (lambda p: TextFiles(str(p / "a.tsv"), columns=("q",)).rows(("sent0", "sent1")),
     r"names 1 column"),
    (lambda p: DatasetSource(tf.data.Dataset.from_tensor_slices([1])).rows(("sentence",)),
     "must yield strings"),
    (lambda p: streamed(str(p / "a.txt"), shuffle_buffer=0), "shuffle_buffer"),
])
def test_bad_sources_fail_in_one_line(tmp_path, make, match):
    for name, text in (("a.txt", "x\n"), ("a.jsonl", "{}\n"), ("a.tsv", "q\tp\n"), ("a.bin", "")):
        (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=match) as info:
        make(tmp_path)
    assert "\n" not in str(info.value)


def test_parquet_without_pyarrow_names_the_extra(monkeypatch, tmp_path):
    import sys

    from keras_sentemb.missing_dependency import MissingDependencyError

    (tmp_path / "t.parquet").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(MissingDependencyError, match=r'\.\[parquet\]'):
        TextFiles(str(tmp_path / "t.parquet")).rows(("sentence",))
