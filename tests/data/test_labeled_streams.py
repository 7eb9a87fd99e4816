"""Streamed labels and scores, NLI triplets as labelled pairs, telling the two apart."""

import pytest
import tensorflow as tf

from keras_sentemb.data import labeled_streams as ls
from keras_sentemb.data import stream_batches as sb


def test_label_and_score_parsers_read_what_the_in_memory_readers_read():
    texts = tf.constant(["1", " 2.0 ", "entailment", "Contradiction", "-1", "1.5", "x", ""])
    value, ok = ls.class_labels()(texts)
    assert ok.numpy().tolist() == [True, True, True, True, False, False, False, False]
    assert value.numpy()[:4].tolist() == [1, 2, 0, 2]
    scores = tf.constant(["4.2", "0", "5.0", "5.01", "-0.5", "nan", "3e0", "score"])
    value, ok = ls.score_labels(0.0, 5.0)(scores)
    assert ok.numpy().tolist() == [True, True, True, False, False, False, True, False]
    assert value.numpy()[[0, 6]].tolist() == pytest.approx([4.2, 3.0])


def test_labelled_batches_skip_bad_labels_and_keep_rows_together():
    rows = {"a": [f"a{i}" for i in range(12)], "b": [f"b{i}" for i in range(12)],
            "label": ["1", "0", "junk"] * 4}
    source = sb.streamed(tf.data.Dataset.from_tensor_slices(rows), columns=("a", "b", "label"))
    batch = next(iter(sb.stream_batches(source, ("a", "b"), 8, seed=0, no_duplicates=True,
                                        labels={"label": ls.class_labels()})))
    assert batch["label"].dtype == tf.int32
    for a, label in zip(batch["a"].numpy(), batch["label"].numpy()):
        assert int(a.decode()[1:]) % 3 != 2  # the junk rows are gone
        assert label == (1 if int(a.decode()[1:]) % 3 == 0 else 0)


def test_triplets_become_two_labelled_pairs_and_the_kind_is_told(tmp_path):
    (tmp_path / "nli.csv").write_text("sent0,sent1,hard_neg\np1,e1,c1\np2,e2,c2\n")
    (tmp_path / "pairs.tsv").write_text("s1\ts2\t1\nt1\tt2\t0\n")
    triplets, pairs = sb.streamed(str(tmp_path / "nli.csv")), sb.streamed(
        str(tmp_path / "pairs.tsv"))
    assert ls.supervised_kind(triplets) == "triplets"
    assert ls.supervised_kind(pairs) == "labeled_pairs"
    wrapped = ls.as_labeled_pairs(triplets)
    rows = [tuple(r[k].decode() for k in ("p", "h", "y"))
            for r in wrapped.rows(("p", "h", "y")).as_numpy_iterator()]
    assert rows == [("p1", "e1", "0"), ("p1", "c1", "2"), ("p2", "e2", "0"), ("p2", "c2", "2")]
    with pytest.raises(ValueError, match="both NLI triplets and labelled pairs"):
        ls.supervised_kind(sb.Mixture({"a": triplets, "b": pairs}))
    with pytest.raises(ValueError, match=r"first 100 records holds the columns"):
        ls.check_rows(pairs, ("s1", "s2"), {"label": ls.score_labels(2.0, 5.0)})
