"""`paper_row`: the papers' table row (STS 'all' aggregation, STS-B / SICK-R test, average)."""

import json

import numpy as np
import pytest

from keras_sentemb.evaluation.paper_row import STSB_ONLY, paper_row, write_row
from keras_sentemb.evaluation.readers import load_stsb_pairs
from keras_sentemb.evaluation.sts import evaluate_sts
from tests.helpers.models import FakeEncoder


def test_row_holds_the_papers_tasks_with_all_aggregation(downstream):
    encoder = FakeEncoder()
    row = paper_row(encoder, "A paper, Table 1", protocol={"name": "paper", "steps": 3},
                    sts_data=downstream, pooling="cls")
    reference = evaluate_sts(FakeEncoder(), downstream, split="test", aggregation="all")
    assert row["paper"] == "A paper, Table 1"
    assert list(row["tasks"]) == ["STS12", "STS-B", "SICK-R"]
    assert row["tasks"]["STS12"] == pytest.approx(reference["STS12"]["all"]["spearman"], abs=0.005)
    assert row["tasks"]["STS-B"] == pytest.approx(
        reference["STSBenchmark"]["test"]["spearman"], abs=0.005)
    assert row["tasks"]["SICK-R"] == pytest.approx(
        reference["SICKRelatedness"]["test"]["spearman"], abs=0.005)
    # STS13-16 are missing: no 7-task average, and the row says why.
    assert row["avg"] is None
    evaluation = row["protocol"]["evaluation"]
    assert evaluation["sts_missing"] == ["STS13", "STS14", "STS15", "STS16"]
    assert "not computed" in evaluation["avg"] and evaluation["pooling"] == "cls"
    assert row["protocol"]["name"] == "paper" and row["protocol"]["steps"] == 3
    assert {c["pooling"] for c in encoder.calls} == {"cls"}
    json.dumps(row)


def test_average_over_the_papers_tasks(downstream):
    row = paper_row(FakeEncoder(), "p", sts_data=downstream,
                    sts_tasks=["STS12", "STSBenchmark", "SICKRelatedness"],
                    avg_tasks=["STS12", "SICKRelatedness"])
    expected = (row["tasks"]["STS12"] + row["tasks"]["SICK-R"]) / 2
    assert row["avg"] == pytest.approx(expected, abs=0.006)
    assert row["protocol"]["evaluation"]["avg_over"] == ["STS12", "SICK-R"]


def test_default_is_stsb_test_only_and_says_so():
    row = paper_row(FakeEncoder(), "p", stsb_limit=40, sts_tasks=["STSBenchmark"],
                    transfer_tasks=["MR", "TREC"])
    assert list(row["tasks"]) == ["STS-B"] and row["avg"] == row["tasks"]["STS-B"]
    evaluation = row["protocol"]["evaluation"]
    assert evaluation["sts"].startswith(STSB_ONLY) and "first 40 pairs" in evaluation["sts"]
    assert "not run" in evaluation["transfer"] and "transfer_avg" not in row
    pairs = load_stsb_pairs("stsb", "test")[:40]
    from keras_sentemb.pipelines.callbacks import sts_spearman

    assert row["tasks"]["STS-B"] == pytest.approx(sts_spearman(FakeEncoder(), pairs), abs=0.005)


def test_bad_tasks_and_missing_data(tmp_path):
    with pytest.raises(ValueError, match="Unknown STS tasks"):
        paper_row(FakeEncoder(), "p", sts_tasks=["STS11"])
    with pytest.raises(ValueError, match="Unknown transfer tasks"):
        paper_row(FakeEncoder(), "p", transfer_tasks=["GLUE"])
    (tmp_path / "empty" / "STS" / "STSBenchmark").mkdir(parents=True)
    with pytest.raises(FileNotFoundError):
        paper_row(FakeEncoder(), "p", sts_data=tmp_path / "empty")


def test_write_row_prints_one_line_and_writes_file_or_folder(tmp_path, capsys):
    row = {"paper": "p", "protocol": {}, "tasks": {"STS-B": 1.0}, "avg": 1.0}
    assert write_row(row, tmp_path / "run") == tmp_path / "run" / "row.json"
    assert write_row(row, tmp_path / "x.json") == tmp_path / "x.json"
    assert write_row(row) is None
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and all(json.loads(line) == row for line in lines)
    assert json.loads((tmp_path / "run" / "row.json").read_text()) == row
    assert np.isclose(json.loads((tmp_path / "x.json").read_text())["avg"], 1.0)


def test_transfer_tasks_beside_the_sts_tasks(tmp_path):
    from tests.helpers.files import write_downstream

    root = write_downstream(tmp_path / "downstream", n=20)
    (root / "MR" / "rt-polarity.pos").unlink()  # MR incomplete: reported missing
    row = paper_row(FakeEncoder(), "p", sts_tasks=["STSBenchmark"], stsb_limit=20,
                    transfer_data=root, transfer_tasks=["MR", "SST2", "TREC"],
                    transfer_config="fast")
    assert set(row["tasks"]) == {"STS-B", "SST2", "TREC"}
    assert all(0 <= row["tasks"][t] <= 100 for t in ("SST2", "TREC"))
    assert row["protocol"]["evaluation"]["transfer_missing"] == ["MR"]
    assert row["transfer_avg"] is None  # the paper's transfer average needs every task
    complete = paper_row(FakeEncoder(), "p", sts_tasks=["STSBenchmark"], stsb_limit=20,
                         transfer_data=root, transfer_tasks=["SST2", "TREC"],
                         transfer_config="fast")
    expected = (complete["tasks"]["SST2"] + complete["tasks"]["TREC"]) / 2
    assert complete["transfer_avg"] == pytest.approx(expected, abs=0.006)
