"""The documentation site builds with `mkdocs build --strict`; the README keeps its contract."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site"),
         "--config-file", str(REPO / "mkdocs.yml")],
        capture_output=True, text=True, cwd=REPO, timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    warnings = [line for line in result.stderr.splitlines() if not line.startswith("INFO")]
    assert result.returncode == 0, "\n".join(warnings)
    assert (tmp_path / "site" / "api" / "index.html").exists()
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    assert "fit_ct" in api and "Contrastive" in api
    shutil.rmtree(tmp_path / "site")


def test_api_page_lists_every_public_name():
    import keras_sentemb

    text = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    listed = re.findall(r"^::: ([\w.]+)$", text, flags=re.M)
    expected = {f"{module}.{name}" for name, module in keras_sentemb._PUBLIC.items()}
    assert expected <= set(listed), sorted(expected - set(listed))


def test_readme_starts_with_the_two_commands_ci_runs():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    lines = readme.splitlines()
    assert len(lines) <= 200
    assert lines[:3] == ["# keras_sentemb", "", "```"]
    main_job, tests = lines[3], lines[4]
    assert main_job.endswith("python recipes/main_job.py")
    assert "pytest" in tests
    # .ci/run reads the command from the README and runs it in a new virtual environment.
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "python3 -m venv" in ci and 'bash -c "$test_command"' in ci
    extract = next(line for line in ci.splitlines() if line.startswith("test_command="))
    found = subprocess.run(["bash", "-c", f'cd "{REPO}" && {extract} && echo "$test_command"'],
                           capture_output=True, text=True, timeout=60)
    assert found.stdout.strip() == tests


def test_no_page_speaks_of_how_the_work_was_organized():
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    pattern = re.compile(r"\b(session|brief|issue \d+|issue's)\b", re.I)
    hits = [f"{p.relative_to(REPO)}:{i}" for p in pages
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if pattern.search(line)]
    assert not hits, hits
