"""The table of methods in docs/guides/training.md is what the registry generates."""

import subprocess
import sys

from tests.conftest import REPO

SCRIPT = REPO / "docs" / "_ext" / "method_table.py"


def test_the_committed_method_table_is_the_generated_one():
    # A new interpreter: this process may hold methods that tests registered.
    result = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                            text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_table_has_a_row_per_built_in_method_with_its_defaults():
    spec = __import__("importlib.util").util.spec_from_file_location("method_table", SCRIPT)
    module = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from keras_sentemb.methods.registry import BUILTIN_METHODS

    rows = module.table().splitlines()[2:]
    assert [row.split("|")[1].strip(" `") for row in rows] == list(BUILTIN_METHODS)
    ct = next(row for row in rows if row.startswith("| `ct` "))
    assert "`fit_ct`" in ct and "| 500 | 16 |" in ct and "`negatives`" in ct
    page = (REPO / "docs" / "guides" / "training.md").read_text(encoding="utf-8")
    assert module.page_with(page, "X\n").count("X\n") == 1
