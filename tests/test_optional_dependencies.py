"""A missing optional dependency is one line with the pip command, never a traceback.

The packages are made missing as they are when not installed: `sys.modules`
maps the name to None, so that importing it raises `ModuleNotFoundError`.
"""

import os
import subprocess
import sys

import pytest

from keras_sentemb import cli
from keras_sentemb.missing_dependency import MissingDependencyError
from keras_sentemb.missing_dependency import import_optional
from keras_sentemb.missing_dependency import is_missing
from tests.conftest import REPO


@pytest.fixture
def beir_dir(tmp_path):
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "a cat"}\n')
    (folder / "queries.jsonl").write_text('{"_id": "q1", "text": "cat"}\n')
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return folder


@pytest.mark.parametrize("module, extra", [
    ("pytrec_eval", []),
    ("faiss", ["--approximate"]),
])
def test_evaluate_retrieval_without_the_extra_is_one_line(module, extra, beir_dir, monkeypatch,
                                                          capsys):
    monkeypatch.setitem(sys.modules, module, None)
    # The model is never loaded: the check comes first.
    code = cli.main(["evaluate", "retrieval", "--model", "no-such-model", "--data", str(beir_dir),
                     *extra])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("keras-sentemb: error: evaluate retrieval")
    assert f"needs {module}, which is not installed" in err[0]
    assert 'pip install -e ".[retrieval]"' in err[0]


def test_the_python_functions_raise_an_import_error_with_the_command(monkeypatch):
    import numpy as np

    from keras_sentemb.evaluation.beir import retrieval_metrics
    from keras_sentemb.evaluation.search import approximate_search

    monkeypatch.setitem(sys.modules, "pytrec_eval", None)
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(MissingDependencyError, match=r'pip install -e "\.\[retrieval\]"'):
        retrieval_metrics({"q": {"d": 1}}, {"q": {"d": 1.0}})
    with pytest.raises(ImportError, match="pip install faiss-cpu"):  # still an ImportError
        approximate_search(np.eye(2, dtype="float32"), np.eye(2, dtype="float32"), top_k=1)


def test_an_installed_package_that_fails_to_import_is_not_called_missing():
    broken = ModuleNotFoundError("No module named 'numpy._core._private'",
                                 name="numpy._core._private")
    assert not is_missing(broken, "faiss")
    assert is_missing(ModuleNotFoundError("x", name="faiss"), "faiss")
    assert is_missing(ModuleNotFoundError("x", name="faiss.swigfaiss"), "faiss")
    assert not is_missing(ImportError("DLL load failed", name="faiss"), "faiss")
    assert import_optional("json", "Reading JSON", "retrieval").__name__ == "json"


def test_the_beam_pipeline_without_apache_beam_is_one_line(tmp_path, monkeypatch):
    # Run as a program: one line and a non-zero exit, before TensorFlow is imported.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    script = ("import sys, runpy\n"
              f"sys.path.insert(0, {str(REPO)!r})\n"
              "sys.modules['apache_beam'] = None\n"
              "runpy.run_module('keras_sentemb.beam.encode_pipeline', run_name='__main__')\n")
    result = subprocess.run([sys.executable, "-c", script, "--model", "default", "--input", "x",
                             "--output", "y"], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=300)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "keras_sentemb.beam.encode_pipeline: error: The Beam pipeline needs apache_beam, which "
        'is not installed: pip install -e ".[beam]" in the keras_sentemb repository '
        "(or pip install apache-beam)"]
    # Imported as a module: an ImportError carrying the same line.
    monkeypatch.setitem(sys.modules, "apache_beam", None)
    monkeypatch.delitem(sys.modules, "keras_sentemb.beam.encode_pipeline", raising=False)
    with pytest.raises(MissingDependencyError, match=r'pip install -e "\.\[beam\]"'):
        import keras_sentemb.beam.encode_pipeline  # noqa: F401
