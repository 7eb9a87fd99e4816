"""The Quora -> BEIR converter: duplicate sets, no query finds itself, a split by set."""

import sys

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import quora_beir  # noqa: E402

from keras_sentemb.evaluation.beir import load_beir  # noqa: E402

ROWS = [
    ("How do I learn Python?", "What is the best way to learn Python?", 1),
    ("What is the best way to learn Python?", "How can I learn Python fast?", 1),
    ("How do I learn Python?", "How do I cook rice?", 0),
    ("Why is the sky blue?", "What makes the sky blue?", 1),
    ("Is coffee healthy?", "How do I cook rice?", 0),
    ("Where is Paris?", "Where is Paris?", 1),  # a question paired with itself: no link
]


def test_sets_queries_and_qrels(tmp_path):
    corpus, queries, qrels = quora_beir.convert(ROWS, dev_fraction=0.5, seed=0)
    texts = {d["_id"]: d["text"] for d in corpus}
    assert len(corpus) == 8  # every distinct question
    assert {q["text"] for q in queries} == {
        "How do I learn Python?", "What is the best way to learn Python?",
        "How can I learn Python fast?", "Why is the sky blue?", "What makes the sky blue?"}
    rows = qrels["dev"] + qrels["test"]
    assert all(q != d for q, d, _ in rows)  # no query is its own answer
    python = {q for q, d, _ in rows if "Python" in texts[q]}
    # Transitive: "How do I learn Python?" finds "How can I learn Python fast?".
    first = next(d["_id"] for d in corpus if d["text"] == "How do I learn Python?")
    assert {texts[d] for q, d, _ in rows if q == first} == {
        "What is the best way to learn Python?", "How can I learn Python fast?"}
    # A duplicate set lies in one split only.
    for split in ("dev", "test"):
        in_split = {q for q, _, _ in qrels[split]}
        assert not in_split & python or python <= in_split
    assert quora_beir.convert(ROWS, 0.5, 0) == (corpus, queries, qrels)  # seeded
    quora_beir.write_beir(tmp_path / "q", corpus, queries, qrels)
    loaded = load_beir(tmp_path / "q", split="test")
    assert len(loaded.corpus) == 8 and loaded.qrels


def test_train_split_leaves_test_unchanged(tmp_path):
    rows = [(f"question {i} a", f"question {i} b", 1) for i in range(20)]
    _, _, plain = quora_beir.convert(rows, dev_fraction=0.5, seed=0)
    corpus, queries, qrels = quora_beir.convert(rows, dev_fraction=0.5, seed=0, train_fraction=0.25)
    assert qrels["test"] == plain["test"]
    assert len(qrels["train"]) == 10 and len(qrels["dev"]) == 10  # 5 and 5 sets of 2 questions
    assert set(qrels["train"]) | set(qrels["dev"]) == set(plain["dev"])
    quora_beir.write_beir(tmp_path / "q", corpus, queries, qrels)
    assert len(load_beir(tmp_path / "q", split="train").qrels) == 10
    with pytest.raises(ValueError, match="train-fraction"):
        quora_beir.convert(rows, dev_fraction=0.3, train_fraction=0.3)


def test_small_dev_set_is_deterministic_readable_and_keeps_away_from_test(tmp_path):
    rows = [(f"question {i} a", f"question {i} b", 1) for i in range(40)]
    rows += [(f"lone {i}", f"other lone {i}", 0) for i in range(30)]
    corpus, queries, qrels = quora_beir.convert(rows, dev_fraction=0.5, seed=0)
    small = quora_beir.small_dev(corpus, queries, qrels, n_queries=6, distractors=10, seed=1)
    assert small == quora_beir.small_dev(corpus, queries, qrels, 6, 10, seed=1)
    assert small != quora_beir.small_dev(corpus, queries, qrels, 6, 10, seed=2)
    small_corpus, small_queries, small_qrels = small
    assert len(small_queries) == 6 and set(small_qrels) == {"dev"}
    assert set(small_qrels["dev"]) <= set(qrels["dev"])
    test_side = {x for q, d, _ in qrels["test"] for x in (q, d)}
    ids = {d["_id"] for d in small_corpus}
    assert not ids & test_side
    judged = {q["_id"] for q in small_queries} | {d for _, d, _ in small_qrels["dev"]}
    assert len(ids) == len(judged) + 10  # the queries, their duplicates and 10 distractors
    quora_beir.write_small_dev(tmp_path / "small", *small, {"seed": 1})
    loaded = load_beir(tmp_path / "small", split="dev")
    assert len(loaded.queries) == 6 and len(loaded.corpus) == len(ids)
    with pytest.raises(ValueError, match="exists"):
        quora_beir.write_small_dev(tmp_path / "small", *small, {"seed": 1})
    with pytest.raises(ValueError, match="more than the"):
        quora_beir.small_dev(corpus, queries, qrels, n_queries=500)
