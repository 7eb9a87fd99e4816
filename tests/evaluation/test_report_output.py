"""`evaluate ... --output FILE`: exactly FILE, in the format its extension or --format names."""

import json

import pytest

from keras_sentemb import cli
from keras_sentemb.data.resources import bundled_sts_dir
from tests.conftest import make_tiny_encoder


@pytest.mark.parametrize("output, fmt, kind, files", [
    ("r.json", None, "retrieval", [("r.json", "json")]),
    ("r.md", None, "retrieval", [("r.md", "markdown")]),
    ("r.MD", "markdown", "retrieval", [("r.MD", "markdown")]),
    ("r", None, "retrieval", [("r", "json")]),
    ("r.txt", "markdown", "retrieval", [("r.txt", "markdown")]),
    ("r.json", None, "sts", [("r.json", "json")]),
    ("r.md", "markdown", "all", [("r.md", "markdown")]),
    ("report", None, "all", [("report.json", "json"), ("report.md", "markdown")]),
    ("report", "markdown", "transfer", [("report.json", "json"), ("report.md", "markdown")]),
])
def test_report_files(output, fmt, kind, files):
    assert cli.report_files(output, fmt, kind) == files


def test_a_format_that_contradicts_the_extension_is_refused():
    with pytest.raises(cli.UsageError, match="r.md names a markdown file but --format is json"):
        cli.report_files("r.md", "json", "sts")


def test_evaluate_sts_writes_exactly_the_named_file(tmp_path, capsys):
    make_tiny_encoder().save(tmp_path / "tiny")
    base = ["evaluate", "sts", "--model", str(tmp_path / "tiny"), "--data", str(bundled_sts_dir()),
            "--tasks", "STSBenchmark", "--split", "dev"]
    assert cli.main(base + ["--output", str(tmp_path / "r.json")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert json.loads((tmp_path / "r.json").read_text()) == result
    assert not (tmp_path / "r.json.json").exists() and not (tmp_path / "r.json.md").exists()
    # A missing folder is reported before the model loads.
    assert cli.main(base + ["--output", str(tmp_path / "no" / "r.md")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--output folder does not exist" in err[0]
    (tmp_path / "taken.json").mkdir()
    assert cli.main(base + ["--output", str(tmp_path / "taken.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "taken.json is a folder; give a file path" in err[0]
