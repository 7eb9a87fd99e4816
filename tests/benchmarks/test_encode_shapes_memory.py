"""benchmarks/encode_shapes_memory.py: the shape grid it walks, and one tiny run end to end."""

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.helpers.processes import load_benchmark


@pytest.fixture(scope="module")
def shapes_memory():
    return load_benchmark("encode_shapes_memory")


def test_spans_and_the_grid(shapes_memory):
    assert list(shapes_memory.span("1-7:3")) == [1, 4, 7]
    assert list(shapes_memory.span("5")) == [5]
    assert list(shapes_memory.span("2-4")) == [2, 3, 4]
    grid = shapes_memory.shapes(range(1, 3), range(4, 6))
    assert grid == [(1, 4), (2, 4), (1, 5), (2, 5)]
    assert len(set(grid)) == len(grid)


def test_a_tiny_run_writes_its_table_and_numbers(tmp_path):
    from tests.conftest import make_tiny_encoder

    make_tiny_encoder().save(tmp_path / "tiny")
    out = tmp_path / "shapes.json"
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "encode_shapes_memory.py"), "--model",
         str(tmp_path / "tiny"), "--rows", "1-3", "--widths", "1-4", "--every", "4",
         "--settings", "onednn", "--precision", "float32", "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "| onednn float32 | float32 | 12 |" in run.stdout
    record = json.loads(out.read_text())
    result = record["results"]["onednn float32"]
    assert result["precision"] == "float32"
    assert result["shapes"] == 12
    assert [n for n, _, _ in result["samples"]] == [0, 4, 8, 12]
    assert all(heap > 0 for _, _, heap in result["samples"])
    assert str(tmp_path) not in record["command"]
