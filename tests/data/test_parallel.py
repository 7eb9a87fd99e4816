"""Translation pairs: reading TSV / lists / datasets, and the leak-free held-out split."""

import pytest
import tensorflow as tf

from keras_sentemb.data.parallel import load_parallel_pairs
from keras_sentemb.data.parallel import split_pairs
from tests.helpers.corpora import make_pairs


def test_load_pairs_tsv_with_extra_columns_list_and_dataset(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("Hi.\t嗨。\tCC-BY attribution\nRun.\t跑。\n\nbad line\n", encoding="utf-8")
    assert load_parallel_pairs(str(path)) == [("Hi.", "嗨。"), ("Run.", "跑。")]
    assert load_parallel_pairs(path, limit=1) == [("Hi.", "嗨。")]
    assert load_parallel_pairs([("a", "b"), ["c", "d", "x"]]) == [("a", "b"), ("c", "d")]
    assert load_parallel_pairs([(b"a", "  b "), ("", "dropped")]) == [("a", "b")]
    ds = tf.data.Dataset.from_tensor_slices((["a", "c"], ["b", "d"]))
    assert load_parallel_pairs(ds) == [("a", "b"), ("c", "d")]
    assert load_parallel_pairs(ds, limit=1) == [("a", "b")]
    ds = tf.data.Dataset.from_tensor_slices({"source": ["a"], "target": ["b"]})
    assert load_parallel_pairs(ds) == [("a", "b")]


def test_load_pairs_errors(tmp_path):
    with pytest.raises(ValueError, match="tuple"):
        load_parallel_pairs(["ab"])
    with pytest.raises(FileNotFoundError):
        load_parallel_pairs(str(tmp_path / "missing.tsv"))
    with pytest.raises(ValueError, match="'source' and 'target'"):
        load_parallel_pairs(tf.data.Dataset.from_tensor_slices({"en": ["a"], "zh": ["b"]}))
    with pytest.raises(ValueError, match="no pair"):
        load_parallel_pairs([("", "b"), ("a", " ")])
    with pytest.raises(ValueError, match="TSV path"):
        load_parallel_pairs(42)


def test_split_is_deterministic_and_leak_free():
    pairs = make_pairs(200)
    pairs += [(pairs[0][0], "another translation"), ("new source", pairs[1][1])]
    train, held = split_pairs(pairs, eval_size=20, seed=0)
    train2, held2 = split_pairs(list(reversed(pairs)), eval_size=20, seed=0)
    assert held == held2 and sorted(train) == sorted(train2)
    assert len(held) == 20
    held_src = {a for a, _ in held}
    held_tgt = {b for _, b in held}
    assert not any(a in held_src or b in held_tgt for a, b in train)
    # Only pairs sharing a side with a held-out pair leave the training set.
    assert len(train) == len(pairs) - 20 - sum(
        1 for a, b in pairs if (a, b) not in held and (a in held_src or b in held_tgt))
    assert split_pairs(pairs, eval_size=20, seed=1)[1] != held


def test_split_edge_cases():
    pairs = make_pairs(10)
    assert split_pairs(pairs, eval_size=0) == (pairs, [])
    with pytest.raises(ValueError, match="leaves no training pair"):
        split_pairs(pairs, eval_size=10)
    with pytest.raises(ValueError, match="eval_size"):
        split_pairs(pairs, eval_size=-1)
