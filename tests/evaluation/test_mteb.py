"""MTEB's own evaluators on keras_sentemb encoders (MTEB in a process of its own).

The bundled STS-B dev scored by MTEB's STS evaluator equals `evaluate sts`; a
local BEIR folder scored by MTEB's retrieval evaluator equals `evaluate
retrieval` and the closed-form metrics; prompts and the precision reach the
encoder; the results are written in MTEB's layout. No Hub download: every task
here is local (`data=`), its data read from files.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from keras_sentemb import cli
from keras_sentemb.evaluation.beir import evaluate_retrieval
from keras_sentemb.evaluation.mteb_evaluation import evaluate_mteb
from keras_sentemb.evaluation.sts import evaluate_sts
from keras_sentemb.evaluation.sts import load_sts_pairs
from keras_sentemb.missing_dependency import is_installed
from tests.conftest import REPO
from tests.conftest import make_tiny_encoder
from tests.helpers.files import write_beir_from_pairs

STS = REPO / "keras_sentemb" / "resources" / "STS"
needs_mteb = pytest.mark.skipif(not is_installed("mteb") or not is_installed("pytrec_eval"),
                                reason="the mteb extra is not installed")

# Fixed vectors, so every ranking is known:
#   q1 = e1: d1 (1.0), d2 (0.8), d3 (0), d4 (< 0); relevant d2 -> rank 2.
#   q2 = e2: d3 (1.0), d2 (0.6), d4 (> 0), d1 (0); relevant d3, d4 -> ranks 1 and 3.
VECTORS = {
    "alpha": [1.0, 0.0, 0.0], "beta gamma": [0.8, 0.6, 0.0], "gamma": [0.0, 1.0, 0.0],
    "delta": [-0.1, 0.1, 0.99], "query one": [1.0, 0.0, 0.0], "query two": [0.0, 1.0, 0.0],
}
CORPUS = [{"_id": "d1", "title": "", "text": "alpha"}, {"_id": "d2", "title": "beta", "text": "gamma"},
          {"_id": "d3", "title": "", "text": "gamma"}, {"_id": "d4", "title": "", "text": "delta"}]
QUERIES = [{"_id": "q1", "text": "query one"}, {"_id": "q2", "text": "query two"}]
QRELS = [("q1", "d2", 1), ("q2", "d3", 1), ("q2", "d4", 1)]
# By hand: nDCG@10 q1 = 1/log2(3), q2 = (1 + 1/log2(4)) / (1 + 1/log2(3)); MRR@10 (1/2 + 1)/2;
# AP q1 = 1/2, q2 = (1 + 2/3)/2; R@1 q1 = 0, q2 = 1/2.
EXPECTED = {
    "ndcg_at_10": (1 / np.log2(3) + 1.5 / (1 + 1 / np.log2(3))) / 2, "mrr_at_10": 0.75,
    "map_at_100": (0.5 + 5 / 6) / 2, "recall_at_1": 0.25, "recall_at_10": 1.0,
}


class TableEncoder:
    """Looks each text (after its prompt) up in `VECTORS`; records every call."""

    output_dim, max_length = 3, 16

    def __init__(self):
        self.calls = []

    def encode(self, texts, batch_size=128, precision=None, show_progress=None):
        self.calls.append((list(texts), precision))
        return np.array([VECTORS[t.split(": ")[-1]] for t in texts], np.float32)


def write_toy_beir(folder):
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in CORPUS))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUERIES))
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{s}" for q, d, s in QRELS]
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return folder


def result_files(output):
    return sorted(os.path.relpath(os.path.join(root, name), output)
                  for root, _, names in os.walk(output) for name in names)


@needs_mteb
@pytest.mark.slow
def test_retrieval_scores_are_the_closed_form_and_prompts_and_precision_reach_the_encoder(
        tmp_path):
    data = write_toy_beir(tmp_path / "toy")
    encoder = TableEncoder()
    result = evaluate_mteb(encoder, data=str(data), output=str(tmp_path / "results"),
                           precision="bfloat16", name="table",
                           prompts={"query": "query: ", "document": "passage: "})
    scores = result["tasks"]["local_toy"]["scores"]["test"][0]
    for metric, value in EXPECTED.items():  # MTEB rounds its retrieval metrics to 5 places
        assert scores[metric] == pytest.approx(value, abs=5e-6), metric
    assert result["tasks"]["local_toy"]["main_score"] == pytest.approx(
        100 * EXPECTED["ndcg_at_10"], abs=5e-4)
    # Queries and documents each arrive with their own prompt, in the precision asked for.
    texts = [t for batch, _ in encoder.calls for t in batch]
    assert sorted(texts) == sorted(["query: query one", "query: query two", "passage: alpha",
                                    "passage: beta gamma", "passage: gamma", "passage: delta"])
    assert {precision for _, precision in encoder.calls} == {"bfloat16"}
    # MTEB's results layout: the run's precision is an experiment of its own.
    files = result_files(tmp_path / "results")
    folder = "results/keras-sentemb__table/no_revision_available/experiments/precision_bfloat16"
    assert f"{folder}/local_toy.json" in files and f"{folder}/model_meta.json" in files, files
    saved = json.loads((tmp_path / "results" / folder / "local_toy.json").read_text())
    assert saved["scores"]["test"][0]["ndcg_at_10"] == scores["ndcg_at_10"]


@needs_mteb
@pytest.mark.slow
def test_bundled_stsb_dev_through_mteb_equals_evaluate_sts(default_encoder, tmp_path):
    ours = evaluate_sts(default_encoder, str(STS), split="dev", precision="float32",
                        show_progress=False)["STSBenchmark"]["dev"]["spearman"]
    result = evaluate_mteb(default_encoder, data=str(STS), split="dev", precision="float32",
                           output=str(tmp_path / "results"), name="default")
    theirs = result["tasks"]["local_STSBenchmark"]["scores"]["dev"][0]["cosine_spearman"]
    # The same float32 vectors up to summation order (MTEB asks for the first and the second
    # sentences apart, so the length-sorted batches differ): Spearman's rho over 1,500 pairs
    # moves only when two cosines swap places, well under 0.001 points.
    assert 100 * theirs == pytest.approx(ours, abs=1e-3)
    assert abs(ours - 86.72) < 0.05  # the published figure of the default model, 86.71-86.72
    saved = (tmp_path / "results" / "results" / "keras-sentemb__default" / "no_revision_available"
             / "experiments" / "precision_float32" / "local_STSBenchmark.json")
    # The results file holds MTEB's scores rounded to 5 places.
    saved_score = json.loads(saved.read_text())["scores"]["dev"][0]["cosine_spearman"]
    assert saved_score == pytest.approx(theirs, abs=5e-6)


@needs_mteb
@pytest.mark.slow
def test_local_beir_folder_through_the_command_line_equals_evaluate_retrieval(
        default_encoder, tmp_path, capsys):
    data = write_beir_from_pairs(tmp_path / "stsb-beir", load_sts_pairs(str(STS), "stsb", "dev"))
    ours = evaluate_retrieval(default_encoder, str(data), precision="float32", show_progress=False)
    code = cli.main(["evaluate", "mteb", "--model", "default", "--data", str(data),
                     "--output", str(tmp_path / "results")])
    assert code == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["precision"] == "float32" and line["mteb_model"] == "keras-sentemb/default"
    theirs = line["tasks"]["local_stsb-beir"]
    assert ours["queries"] > 100
    # Identical rankings but for the vectors' summation order: equal to the rounding (4 places).
    assert theirs["main_score"] == pytest.approx(ours["ndcg@10"], abs=1e-3)
    assert theirs["splits"] == {"test": theirs["main_score"]}


def test_mteb_model_refuses_a_process_that_holds_tensorflow():
    import tensorflow  # noqa: F401

    import keras_sentemb

    with pytest.raises(RuntimeError, match="evaluate_mteb"):
        keras_sentemb.mteb_model("default")


def test_without_mteb_the_command_is_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mteb", None)
    # Checked before the model loads.
    code = cli.main(["evaluate", "mteb", "--model", "no-such-model", "--tasks", "STS12"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "needs mteb, which is not installed" in err[0] and 'pip install -e ".[mteb]"' in err[0]


@pytest.mark.parametrize("argv, message", [
    ([], "needs --tasks"),
    (["--tasks", "STS12", "--split", "dev"], "--split applies to local data"),
    (["--tasks", "STS12", "--truncate-dim", "8"], "--truncate-dim does not apply"),
    (["--data", "no/such/folder"], "data folder not found"),
])
def test_bad_arguments_are_one_line(argv, message, capsys):
    code = cli.main(["evaluate", "mteb", "--model", "no-such-model", *argv])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@needs_mteb
@pytest.mark.slow
def test_mteb_model_in_a_process_without_tensorflow_encodes_as_encode(tmp_path):
    encoder = make_tiny_encoder(dropout=0.0)
    encoder.save(str(tmp_path / "tiny"))
    sentences = ["a man is playing a guitar .", "the cat sat", "hello world", ""]
    script = f"""
import json, sys
import numpy as np
import keras_sentemb
model = keras_sentemb.mteb_model({str(tmp_path / "tiny")!r}, precision="float32")
vectors = model.client.encode({sentences!r})
meta = model.mteb_model_meta
model.close()
np.save({str(tmp_path / "vectors.npy")!r}, vectors)
print(json.dumps({{"tf": "tensorflow" in sys.modules, "name": meta.name, "dim": meta.embed_dim}}))
"""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=900, cwd=str(REPO))
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer == {"tf": False, "name": "keras-sentemb/tiny", "dim": encoder.output_dim}
    theirs = np.load(tmp_path / "vectors.npy")
    ours = encoder.encode(sentences, precision="float32")
    cosine = np.sum(theirs * ours, 1) / (np.linalg.norm(theirs, axis=1) * np.linalg.norm(ours, axis=1))
    assert cosine.min() >= 0.99999
