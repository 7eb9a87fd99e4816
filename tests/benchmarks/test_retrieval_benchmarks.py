"""benchmarks/quora_hard_negatives.py and retrieval_methods.py: what they train on and skip."""

import json

from keras_sentemb.evaluation.beir import BeirData
from tests.helpers.processes import load_benchmark

CORPUS = {f"d{i}": {"title": "", "text": f"question {i}"} for i in range(8)}


def test_training_pairs_are_each_duplicate_pair_once():
    module = load_benchmark("quora_hard_negatives")
    train = BeirData(corpus=CORPUS, queries={"d0": "question 0", "d1": "question 1",
                                             "d2": "question 2", "d3": "question 3"},
                     qrels={"d0": {"d1": 1, "d2": 1}, "d1": {"d0": 1, "d2": 1},
                            "d2": {"d0": 1, "d1": 1}, "d3": {"d4": 1}},
                     split="train")
    pairs = module.training_pairs(train)
    assert sorted(pairs) == [("question 0", "question 1"), ("question 0", "question 2"),
                             ("question 1", "question 2"), ("question 3", "question 4")]


def test_held_out_questions_are_queries_and_their_duplicates():
    module = load_benchmark("quora_hard_negatives")
    dev = BeirData(corpus=CORPUS, queries={"d5": "question 5"}, qrels={"d5": {"d6": 1}}, split="dev")
    test = BeirData(corpus=CORPUS, queries={"d7": "question 7"}, qrels={"d7": {"d5": 1}})
    assert module.held_out_ids(dev, test) == {"d5", "d6", "d7"}


def test_retrieval_methods_skips_rows_it_already_wrote(tmp_path):
    module = load_benchmark("retrieval_methods")
    out = tmp_path / "rows.jsonl"
    assert module.done_rows(out) == {}
    row = {"start": "untuned-minilm", "method": "simcse", "kept_step": 250, "sts_dev": 83.27,
           "sts_test": 78.68, "ndcg@10": 80.0, "mrr@10": 79.0, "recall@100": 98.0}
    out.write_text(json.dumps(row) + "\n")
    assert module.done_rows(out) == {("untuned-minilm", "simcse"): row}
    assert module.start_name("runs/untuned-minilm") == "untuned-minilm"
    assert module.start_name("default") == "default"
    assert "| untuned-minilm | SimCSE (unsup) | 250 | 83.27 | 78.68 | 80.00 |" in module.markdown([row])
    assert set(module.CHOSEN) == set(load_benchmark("methods_table").DEFAULT_RATES)
