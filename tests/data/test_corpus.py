import pytest
import tensorflow as tf

from keras_sentemb.data.corpus import load_corpus, read_pairs_tsv


def test_list_strips_and_drops_empty_lines():
    assert load_corpus([" a ", "", "b", b"caf\xc3\xa9"]) == ["a", "b", "café"]
    assert load_corpus(["a", "b", "c"], limit=2) == ["a", "b"]


def test_text_file_with_invalid_utf8(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"first\n\nsecond \xff line\r\nthird\n")
    assert load_corpus(str(path)) == ["first", "second \ufffd line", "third"]
    assert load_corpus(path) == ["first", "second \ufffd line", "third"]


def test_tf_data_datasets():
    ds = tf.data.Dataset.from_tensor_slices(["x", " ", "y"])
    assert load_corpus(ds) == ["x", "y"]
    dicts = tf.data.Dataset.from_tensor_slices({"text": ["u", "v"], "label": [0, 1]})
    assert load_corpus(dicts) == ["u", "v"]
    numbers = tf.data.Dataset.from_tensor_slices([1, 2])
    with pytest.raises(ValueError, match="must yield strings"):
        load_corpus(numbers)


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="no non-empty sentence"):
        load_corpus(["", "  "])
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="no non-empty sentence"):
        load_corpus(str(empty))
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        load_corpus(str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match="item 1 is int"):
        load_corpus(["a", 3])
    with pytest.raises(ValueError, match="must be a list of str"):
        load_corpus(42)
    with pytest.raises(ValueError, match="no_such_tfds_dataset_xyz"):
        load_corpus("no_such_tfds_dataset_xyz")


def test_read_pairs_tsv_skips_malformed_rows(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("a\tb\tattribution\nonly one column\n\t\nc\td\n", encoding="utf-8")
    assert read_pairs_tsv(str(path)) == [("a", "b"), ("c", "d")]
