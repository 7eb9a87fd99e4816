"""Batches from streams: no duplicates, mixing, CT groups, resume by skipping, shard policy."""

import collections

import pytest
import tensorflow as tf

from keras_sentemb.data import stream_batches as sb


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """3 files of 40 lines, each text 4 times within its file (many duplicates)."""
    root = tmp_path_factory.mktemp("corpus")
    for f in range(3):
        (root / f"part-{f}.txt").write_text("".join(f"f{f} s{j % 10}\n" for j in range(40)))
    return str(root / "part-*.txt")


def _texts(ds, n, key="sentence"):
    return [[t.decode() for t in b[key].numpy()] for b in ds.take(n)]


def test_no_duplicate_texts_in_a_batch_and_every_row_used(corpus):
    source = sb.streamed(corpus, shuffle_buffer=64)
    batches = _texts(sb.stream_batches(source, ("sentence",), 8, seed=3, no_duplicates=True), 15)
    assert all(len(b) == 8 == len(set(b)) for b in batches)
    counts = collections.Counter(t for b in batches for t in b)
    assert len(counts) == 30  # every distinct text shows up
    # Without the rule, the same shuffle puts some text twice in a batch.
    plain = sb.streamed(corpus, shuffle_buffer=64, no_duplicates=False)
    plain_batches = _texts(sb.stream_batches(plain, ("sentence",), 8, seed=3,
                                             no_duplicates=True), 15)
    assert any(len(set(b)) < 8 for b in plain_batches)


def test_pairs_hold_no_text_twice_across_columns():
    rows = tf.data.Dataset.from_tensor_slices(
        {"a": ["x", "y", "z", "x", "w", "v"], "b": ["p", "x", "q", "r", "s", "t"]})
    out = list(sb.unique_batches(rows, 2, ("a", "b")).as_numpy_iterator())
    for batch in out:
        texts = list(batch["a"]) + list(batch["b"])
        assert len(texts) == len(set(texts))
    # (y, x) waits until (x, p) has gone; (x, r) waits behind (y, x).
    assert [list(b["a"]) for b in out] == [[b"x", b"z"], [b"y", b"w"]]


def test_seeded_stream_resumes_with_the_same_next_batch(corpus):
    source = sb.streamed(corpus, shuffle_buffer=32)
    full = _texts(sb.stream_batches(source, ("sentence",), 4, seed=7), 9)
    again = _texts(sb.stream_batches(source, ("sentence",), 4, seed=7), 9)
    resumed = _texts(sb.stream_batches(source, ("sentence",), 4, seed=7, start_step=6), 3)
    assert again == full and resumed == full[6:]
    other = _texts(sb.stream_batches(source, ("sentence",), 4, seed=8), 9)
    assert other != full


def test_mixture_draws_each_batch_from_one_dataset(corpus):
    small = [f"small {i}" for i in range(20)]
    robin = sb.Mixture({"files": (corpus, 1.0), "list": (small, 5.0)}, mode="round_robin")
    batches = _texts(sb.stream_batches(robin, ("sentence",), 4, seed=0), 6)
    origin = ["list" if b[0].startswith("small") else "files" for b in batches]
    assert origin == ["files", "list"] * 3
    for b in batches:  # one dataset per batch
        assert len({t.startswith("small") for t in b}) == 1
    weighted = sb.Mixture({"files": (corpus, 1.0), "list": (small, 3.0)})
    drawn = _texts(sb.stream_batches(weighted, ("sentence",), 4, seed=1), 100)
    share = sum(b[0].startswith("small") for b in drawn) / len(drawn)
    assert 0.6 < share < 0.9  # 3 : 1


def test_ct_groups_from_a_stream(corpus):
    source = sb.streamed(corpus, shuffle_buffer=32)
    batch = next(iter(sb.ct_stream_batches(source, 8, 3, seed=0)))
    left, right = batch["left"].numpy(), batch["right"].numpy()
    assert list(batch["labels"].numpy()) == [1, 0, 0, 0] * 2
    assert left[0] == right[0] and left[4] == right[4]
    paper = next(iter(sb.ct_stream_batches(source, 8, 3, seed=0, layout="paper")))
    assert list(paper["right"].numpy()) == list(right)
    assert all(paper["left"].numpy()[g * 4 + i] == right[g * 4] for g in (0, 1) for i in range(4))
    in_batch = _texts(sb.ct_stream_batches(source, 8, 0, seed=0), 5, "left")
    assert all(len(set(b)) == 8 for b in in_batch)
    with pytest.raises(ValueError, match="multiple of K"):
        sb.ct_stream_batches(source, 6, 3)


def test_shard_policy_by_file_or_data_with_a_notice(corpus, caplog):
    policy = tf.data.experimental.AutoShardPolicy
    source = sb.streamed(corpus)
    assert sb.shard_policy(source, 1) == policy.AUTO
    assert sb.shard_policy(source, 3) == policy.FILE
    with caplog.at_level("WARNING"):
        assert sb.shard_policy(source, 4) == policy.DATA
    assert "4 worker(s) and 3 file(s): sharding by data" in caplog.text
    # By file, here: worker 1 of 2 reads file 1 only; tf.data's auto-sharding is off.
    ds = sb.stream_batches(source, ("sentence",), 4, workers=(2, 1))
    assert ds.options().experimental_distribute.auto_shard_policy == policy.OFF
    assert {t.split()[0] for b in _texts(ds, 10) for t in b} == {"f1"}
    ds = sb.stream_batches(source, ("sentence",), 4, workers=(4, 0))
    assert ds.options().experimental_distribute.auto_shard_policy == policy.DATA


def test_bad_mixtures_fail_in_one_line(corpus):
    with pytest.raises(ValueError, match="weight of dataset 'a' must be > 0"):
        sb.Mixture({"a": (corpus, 0.0)})
    with pytest.raises(ValueError, match="mode"):
        sb.Mixture({"a": corpus}, mode="zip")


def test_every_row_once_per_pass(corpus):
    source = sb.streamed(corpus, shuffle_buffer=16, no_duplicates=False)
    batches = _texts(sb.stream_batches(source, ("sentence",), 8, seed=5), 30)
    for epoch in (batches[:15], batches[15:]):  # 120 rows a pass
        counts = collections.Counter(t for b in epoch for t in b)
        assert set(counts.values()) == {4} and len(counts) == 30


def test_held_out_rows_are_left_out_and_the_head_is_read_in_file_order(tmp_path):
    (tmp_path / "pairs.tsv").write_text("".join(f"s{i}\tt{i}\n" for i in range(20)))
    source = sb.streamed(str(tmp_path / "pairs.tsv"), shuffle_buffer=8, no_duplicates=False)
    names = ("source", "target")
    assert sb.head_rows(source, names, 3) == [("s0", "t0"), ("s1", "t1"), ("s2", "t2")]
    ds = sb.stream_batches(source, names, 4, exclude={"source": ["s1"], "target": ["t2", "t9"]})
    seen = {t for b in ds.take(20).as_numpy_iterator() for t in b["source"]}
    assert seen == {f"s{i}".encode() for i in range(20)} - {b"s1", b"s2", b"s9"}


def test_making_batches_leaves_no_function_in_the_global_graph(corpus):
    """TensorFlow's scan dataset adds its function to the global graph even eagerly; a
    process that trains again and again would keep one per run. Batches made twice leave
    the global graph's function library as it was, and still run."""
    def library_size():
        return len(tf.compat.v1.get_default_graph().as_graph_def().library.function)

    before = library_size()
    for _ in range(2):
        rows = tf.data.Dataset.from_tensor_slices({"sentence": [f"s{i % 7}" for i in range(40)]})
        batches = _texts(sb.unique_batches(rows, 4, ["sentence"]), 3)
        assert all(len(set(b)) == 4 for b in batches)
    assert library_size() == before
