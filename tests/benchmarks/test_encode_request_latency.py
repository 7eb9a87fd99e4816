"""benchmarks/encode_request_latency.py: the requests it sends and what it times."""

import pytest

from tests.helpers.processes import load_benchmark


@pytest.fixture(scope="module")
def latency():
    return load_benchmark("encode_request_latency")


def test_requests_take_every_sentence_before_repeating_one(latency):
    import random

    sentences = [f"s{i}" for i in range(10)]
    source = latency.requests(sentences, 3, random.Random(0))
    first = [next(source) for _ in range(3)]
    assert all(len(r) == 3 for r in first)
    assert len({s for r in first for s in r}) == 9  # one pass: no sentence twice


def test_time_requests_reaches_the_minimum_count_and_reports_the_quantiles(latency):
    seen = []
    row = latency.time_requests(seen.append, 2, ["a", "b", "c", "d", "e"], warmup=2,
                                min_requests=7, min_seconds=0.0)
    assert len(seen) == 9 and all(len(batch) == 2 for batch in seen)
    assert row["batch_size"] == 2 and row["requests"] == 7
    assert 0 <= row["median_ms"] <= row["p90_ms"]
    assert latency.percentile([1, 2, 3, 4, 5], 0.9) == pytest.approx(4.6)


@pytest.mark.integration
def test_the_benchmark_runs_end_to_end(latency, tmp_path, capsys):
    out = tmp_path / "latency.json"
    latency.main(["--model", "default", "--precisions", "float32,auto", "--batch-sizes", "1",
                  "--min-requests", "3", "--min-seconds", "0", "--warmup", "1",
                  "--json", str(out)])
    import json

    result = json.loads(out.read_text())
    assert [r["precision"] for r in result["rows"]] == ["float32", "auto"]
    assert all(r["requests"] == 3 and r["median_ms"] > 0 for r in result["rows"])
    assert "| float32 (float32) | 1 |" in capsys.readouterr().out
