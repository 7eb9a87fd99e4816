"""BEIR retrieval: reading the layout, metrics computed by hand, the command line."""

import json

import numpy as np
import pytest

from keras_sentemb import cli
from keras_sentemb.evaluation.beir import BeirFormatError
from keras_sentemb.evaluation.beir import evaluate_retrieval
from keras_sentemb.evaluation.beir import load_beir
from keras_sentemb.evaluation.beir import retrieval_metrics
from tests.conftest import make_tiny_encoder

pytest.importorskip("pytrec_eval")

# Documents and queries as fixed vectors, so every ranking is known:
#   q1 = e1: d1 (1.0), d2 (0.8), d3 (0), d4 (< 0); relevant d2 -> rank 2.
#   q2 = e2: d3 (1.0), d2 (0.6), d4 (> 0), d1 (0); relevant d3, d4 -> ranks 1 and 3.
VECTORS = {
    "alpha": [1.0, 0.0, 0.0],
    "beta gamma": [0.8, 0.6, 0.0],
    "gamma": [0.0, 1.0, 0.0],
    "delta": [-0.1, 0.1, 0.99],
    "query one": [1.0, 0.0, 0.0],
    "query two": [0.0, 1.0, 0.0],
}
CORPUS = [
    {"_id": "d1", "title": "", "text": "alpha"},
    {"_id": "d2", "title": "beta", "text": "gamma"},
    {"_id": "d3", "text": "gamma"},
    {"_id": "d4", "title": "", "text": "delta"},
]
QUERIES = [{"_id": "q1", "text": "query one"}, {"_id": "q2", "text": "query two"},
           {"_id": "q3", "text": "alpha"}]
TEST_QRELS = [("q1", "d2", 1), ("q2", "d3", 1), ("q2", "d4", 1)]
# By hand: nDCG@10 q1 = 1/log2(3), q2 = (1 + 1/log2(4)) / (1 + 1/log2(3));
# MRR@10 (1/2 + 1)/2; AP q1 = 1/2, q2 = (1 + 2/3)/2; R@1 q1 = 0, q2 = 1/2.
NDCG = (1 / np.log2(3) + 1.5 / (1 + 1 / np.log2(3))) / 2
EXPECTED = {
    "ndcg@10": 100 * NDCG, "mrr@10": 75.0, "map@100": 100 * (0.5 + 5 / 6) / 2,
    "recall@1": 25.0, "recall@10": 100.0, "recall@100": 100.0,
}


class TableEncoder:
    """Looks each text up in `VECTORS`; records what it was asked to encode."""

    def __init__(self):
        self.seen = []

    def encode(self, sentences, batch_size=128, show_progress=None, truncate_dim=None):
        self.seen.extend(sentences)
        out = np.array([VECTORS[s.split(": ")[-1]] for s in sentences], np.float32)
        return out if truncate_dim is None else out[:, :truncate_dim]


def write_beir(folder, corpus=CORPUS, queries=QUERIES, test=TEST_QRELS, dev=(("q3", "d1", 1),)):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "qrels").mkdir(exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    for split, rows in (("test", test), ("dev", dev)):
        lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{s}" for q, d, s in rows]
        (folder / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture
def beir_dir(tmp_path):
    return write_beir(tmp_path / "toy")


def test_metrics_match_the_hand_computed_values(beir_dir):
    result = evaluate_retrieval(TableEncoder(), beir_dir)
    for name, value in EXPECTED.items():
        assert result[name] == pytest.approx(value, rel=1e-6), name
    assert result["queries"] == 2 and result["documents"] == 4
    assert result["protocol"]["split"] == "test" and result["protocol"]["similarity"] == "cosine"


def test_retrieval_metrics_on_a_hand_made_run():
    qrels = {"a": {"x": 1, "y": 0}, "b": {"z": 2, "x": 1}}
    # a: x at rank 3; b: z at rank 1, x at rank 2 (graded relevance for nDCG).
    run = {"a": {"y": 3.0, "w": 2.0, "x": 1.0}, "b": {"z": 5.0, "x": 4.0}}
    result = retrieval_metrics(qrels, run)
    assert result["mrr@10"] == pytest.approx(100 * (1 / 3 + 1) / 2)
    assert result["map@100"] == pytest.approx(100 * (1 / 3 + 1) / 2)
    assert result["recall@1"] == pytest.approx(100 * (0 + 1 / 2) / 2)  # b has two relevant
    ndcg_a = 1 / np.log2(4)  # gain 1 at rank 3 over the ideal gain 1 at rank 1
    assert result["ndcg@10"] == pytest.approx(100 * (ndcg_a + 1) / 2)
    # A query missing from the run counts as zero.
    assert retrieval_metrics({"a": {"x": 1}, "c": {"x": 1}}, {"a": {"x": 1.0}})["mrr@10"] == 50.0


def test_mrr_is_cut_at_ten():
    run = {"q": {f"d{i:02d}": float(100 - i) for i in range(20)}}
    assert retrieval_metrics({"q": {"d10": 1}}, run)["mrr@10"] == 0.0
    assert retrieval_metrics({"q": {"d09": 1}}, run)["mrr@10"] == pytest.approx(10.0)


def test_titles_prompts_and_dev_split(beir_dir):
    encoder = TableEncoder()
    result = evaluate_retrieval(encoder, beir_dir, split="dev", query_prompt="query: ",
                                corpus_prompt="passage: ")
    assert "query: alpha" in encoder.seen and "passage: beta gamma" in encoder.seen
    assert "passage: gamma" in encoder.seen  # d3 has no title
    assert result["queries"] == 1 and result["protocol"]["query_prompt"] == "query: "


def test_a_query_never_finds_itself(tmp_path):
    # The query "d1" is also document d1; its relevant document is d2.
    folder = write_beir(tmp_path / "self", queries=QUERIES + [{"_id": "d1", "text": "alpha"}],
                        test=[("d1", "d2", 1)])
    assert evaluate_retrieval(TableEncoder(), folder)["mrr@10"] == 100.0
    kept = evaluate_retrieval(TableEncoder(), folder, ignore_identical_ids=False)
    assert kept["mrr@10"] == 50.0


def test_chunk_sizes_and_approximate_search_do_not_change_the_result(beir_dir):
    base = evaluate_retrieval(TableEncoder(), beir_dir)
    small = evaluate_retrieval(TableEncoder(), beir_dir, query_chunk_size=1, corpus_chunk_size=1)
    assert {k: small[k] for k in EXPECTED} == {k: base[k] for k in EXPECTED}
    pytest.importorskip("faiss")
    approx = evaluate_retrieval(TableEncoder(), beir_dir, approximate=True)
    assert approx["approximate_recall@100"] == 100.0  # 4 documents: the index finds them all
    assert approx["approximate"]["ndcg@10"] == pytest.approx(base["ndcg@10"])


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (lambda f: (f / "corpus.jsonl").write_text('{"_id": "d1", "text": "alpha"}\n{oops\n'),
         "corpus.jsonl line 2: not valid JSON"),
        (lambda f: (f / "queries.jsonl").write_text('{"text": "no id"}\n'),
         "queries.jsonl line 1: expected a JSON object with an '_id'"),
        (lambda f: (f / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tnope\t1\n"),
         "test.tsv line 2: corpus id 'nope' is not in corpus.jsonl"),
        (lambda f: (f / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nqx\td1\t1\n"),
         "test.tsv line 2: query id 'qx' is not in queries.jsonl"),
        (lambda f: (f / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n"),
         "test.tsv: no judged query"),
        (lambda f: (f / "qrels" / "test.tsv").write_text("h\th\th\nq1\td1\n"),
         "test.tsv line 2: expected 3 tab-separated fields"),
        (lambda f: (f / "qrels" / "test.tsv").unlink(), "BEIR file not found"),
    ],
)
def test_malformed_files_name_the_file_and_line(beir_dir, corrupt, message):
    corrupt(beir_dir)
    with pytest.raises((BeirFormatError, FileNotFoundError), match=message.replace("(", r"\(")):
        load_beir(beir_dir)


def test_bad_arguments(beir_dir):
    with pytest.raises(ValueError, match="split"):
        load_beir(beir_dir, split="validation")
    with pytest.raises(ValueError, match="truncate_dim"):
        evaluate_retrieval(TableEncoder(), beir_dir, truncate_dim=0)
    with pytest.raises(ValueError, match="similarity"):
        evaluate_retrieval(TableEncoder(), beir_dir, similarity="euclidean")


# ------------------------------------------------------- a real (tiny) encoder
WORD_CORPUS = [
    {"_id": "c1", "title": "guitar", "text": "a man is playing a guitar ."},
    {"_id": "c2", "title": "", "text": "the cat sits on the mat ."},
    {"_id": "c3", "title": "park", "text": "a dog runs in the park !"},
    {"_id": "c4", "title": "", "text": "the woman plays the piano ."},
]
WORD_QUERIES = [{"_id": "w1", "text": "man playing guitar"}, {"_id": "w2", "text": "cat on mat"}]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("beir") / "tiny"
    make_tiny_encoder(normalize=True).save(folder)
    return str(folder)


@pytest.fixture
def word_dir(tmp_path):
    return write_beir(tmp_path / "words", corpus=WORD_CORPUS, queries=WORD_QUERIES,
                      test=[("w1", "c1", 1), ("w2", "c2", 1)], dev=[("w1", "c1", 1)])


def test_tiny_encoder_end_to_end_with_truncation(tiny_model, word_dir):
    from keras_sentemb.models import SentenceEncoder

    encoder = SentenceEncoder.from_preset(tiny_model)
    full = evaluate_retrieval(encoder, word_dir)
    cut = evaluate_retrieval(encoder, word_dir, truncate_dim=8)
    assert cut["protocol"]["dim"] == 8 and full["protocol"]["dim"] == 32
    for result in (full, cut):
        assert 0 <= result["ndcg@10"] <= 100 and result["recall@10"] == 100.0
    # The same run by hand: encode, truncate, renormalise, rank.
    docs = encoder.encode([(d["title"] + " " + d["text"]).strip() for d in WORD_CORPUS],
                          truncate_dim=8, precision="float32")
    queries = encoder.encode([q["text"] for q in WORD_QUERIES], truncate_dim=8,
                             precision="float32")
    ranks = [int(np.sum(queries[i] @ docs.T > queries[i] @ docs[i])) for i in range(2)]
    assert cut["mrr@10"] == pytest.approx(100 * np.mean([1 / (r + 1) for r in ranks]), rel=1e-5)


def test_cli_json_markdown_output_and_card(tiny_model, word_dir, tmp_path, capsys):
    assert cli.main(["evaluate", "retrieval", "--model", tiny_model, "--data", str(word_dir),
                     "--truncate-dim", "16", "--query-prompt", "q: ", "--update-card",
                     "--output", str(tmp_path / "report")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    result = json.loads(out[0])
    assert result["protocol"]["dim"] == 16 and result["model"] == tiny_model
    assert json.loads((tmp_path / "report").read_text())["ndcg@10"] == result["ndcg@10"]
    card = json.loads(open(f"{tiny_model}/model_card.json").read())
    entries = {e["name"]: e for e in card["evaluation"]}
    assert entries["retrieval ndcg@10"]["value"] == result["ndcg@10"]
    assert "dim 16" in entries["retrieval ndcg@10"]["protocol"]
    assert cli.main(["evaluate", "retrieval", "--model", tiny_model, "--data", str(word_dir),
                     "--split", "dev", "--format", "markdown"]) == 0
    text = capsys.readouterr().out
    assert "| exact |" in text and "(dev)" in text


def test_cli_output_writes_exactly_the_file_in_its_format(tiny_model, word_dir, tmp_path, capsys):
    base = ["evaluate", "retrieval", "--model", tiny_model, "--data", str(word_dir)]
    assert cli.main(base + ["--output", str(tmp_path / "r.json")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert json.loads((tmp_path / "r.json").read_text())["ndcg@10"] == result["ndcg@10"]
    assert cli.main(base + ["--output", str(tmp_path / "r.md")]) == 0
    assert (tmp_path / "r.md").read_text().startswith("## Retrieval")
    capsys.readouterr()
    assert cli.main(base + ["--output", str(tmp_path / "table"), "--format", "markdown"]) == 0
    table = (tmp_path / "table").read_text()
    assert "| exact |" in table and table.strip() == capsys.readouterr().out.strip()
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["r.json", "r.md", "table"]
    # A format that contradicts the extension is refused before any work.
    assert cli.main(base + ["--output", str(tmp_path / "x.json"), "--format", "markdown"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "x.json names a json file but --format is markdown" in err[0]
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--truncate-dim", "64"], "truncate_dim` must be an int in [1, 32]"),
        (["--split", "train"], "--split for retrieval must be test or dev"),
        (["--seed", "3"], "--seed does not apply"),
    ],
)
def test_cli_refuses_bad_input_in_one_line(tiny_model, word_dir, extra, message, capsys):
    assert cli.main(["evaluate", "retrieval", "--model", tiny_model, "--data", str(word_dir)]
                    + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_cli_names_the_bad_file_and_line(tiny_model, word_dir, capsys):
    (word_dir / "queries.jsonl").write_text('{"_id": "w1", "text": "x"}\nnot json\n')
    assert cli.main(["evaluate", "retrieval", "--model", tiny_model, "--data", str(word_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert "queries.jsonl line 2: not valid JSON" in err and len(err.splitlines()) == 1
