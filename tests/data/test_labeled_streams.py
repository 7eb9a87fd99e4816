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
    with pytest.raises(ValueError, match=r"pairs.tsv: none of the 2 row\(s\) read holds the "
                       r"columns \[0, 1, 2\]: 2 have a label that does not parse"):
        ls.check_rows(pairs, ("s1", "s2"), {"label": ls.score_labels(2.0, 5.0)})


def test_multitask_streams_follow_the_schedule_and_pretrain_on_every_task():
    from keras_sentemb.data import multitask_streams as ms

    rows = {"sentiment": [(f"s{i}", i % 5) for i in range(8)],
            "paraphrase": [(f"p{i}", f"q{i}", i % 2) for i in range(8)],
            "similarity": [(f"a{i}", f"b{i}", i * 0.5) for i in range(8)] + [("x", "y", 9.0)]}
    streams = ms.task_streams(rows, "batch_round_robin")
    elements = list(ms.streamed_multitask_batches(streams, "batch_round_robin", 4, seed=0)
                    .take(6).as_numpy_iterator())
    for step, element in enumerate(elements):
        active = [t for t in ms.TASKS if element[t]["mask"].all()]
        assert active == [ms.TASKS[step % 3]]
        assert not any(element[t]["mask"].any() for t in ms.TASKS if t not in active)
    assert elements[0]["sentiment"]["label"].dtype == "int32"
    scores = [v for e in elements for v in e["similarity"]["label"] if e["similarity"]["mask"][0]]
    assert len(scores) == 8 and max(scores) <= 5.0  # the out-of-range row skipped
    resumed = next(ms.streamed_multitask_batches(streams, "batch_round_robin", 4, seed=0,
                                                 start_step=4).as_numpy_iterator())
    assert (resumed["paraphrase"]["sentence1"].tolist()
            == elements[4]["paraphrase"]["sentence1"].tolist())
    sentences = ms.TaskSentences(streams)
    texts = {r["sentence"].decode() for r in sentences.rows(("sentence",), seed=0)
             .as_numpy_iterator()}
    assert {"s0", "p0", "q0", "a0", "b0"} <= texts and len(texts) == 8 + 16 + 18
    with pytest.raises(ValueError, match="size a stream does not tell"):
        ms.task_streams(rows, "epoch_round_robin")
    with pytest.raises(ValueError, match=r"the data has no \['paraphrase', 'similarity'\]"):
        ms.task_streams({"sentiment": rows["sentiment"]}, "average")
