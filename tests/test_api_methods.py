"""The method section of docs/api.md is what docs/_ext/api_methods.py generates from the registry."""

import importlib.util
import re
import subprocess
import sys

from tests.conftest import REPO

SCRIPT = REPO / "docs" / "_ext" / "api_methods.py"


def _generator():
    spec = importlib.util.spec_from_file_location("api_methods", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_method_section_is_the_generated_one():
    # A new interpreter: this process may hold methods that tests registered.
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                            text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:] + (
        "\nrun `python docs/_ext/api_methods.py` and commit docs/api.md")


def test_the_section_documents_every_method_once_with_its_fit_function():
    from keras_sentemb.methods.registry import BUILTIN_FIT_FUNCTIONS
    from keras_sentemb.methods.registry import BUILTIN_METHODS

    generator = _generator()
    page = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    section = page.split(generator.BEGIN)[1].split(generator.END)[0]
    rows = re.findall(r"^\| `([\w-]+)` \| `(fit_\w+)` \|", section, re.M)
    assert [name for name, _ in rows] == list(BUILTIN_METHODS)
    listed = re.findall(r"^::: ([\w.]+)$", page, re.M)
    for function, module in BUILTIN_FIT_FUNCTIONS.items():
        assert listed.count(f"{module}.{function}") == 1, function
        assert f"::: {module}.{function}" in section


def test_the_section_is_replaced_in_place():
    generator = _generator()
    page = f"# A\n\n{generator.BEGIN}\nold\n{generator.END}\n\n## B\n"
    assert generator.page_with(page, "new\n") == "# A\n\nnew\n\n## B\n"
