"""The recipes (the README's main job among them) start as quietly as the command line.

TensorFlow's C++ start-up notices (absl's "All log messages before
absl::InitializeLog()", oneDNN, "Could not find cuda drivers", cuInit) are
dropped unless `--verbose`; see `keras_sentemb.quiet_startup`.
"""

import ast
import os
import subprocess
import sys

import pytest

from keras_sentemb.quiet_startup import NOISE
from tests.conftest import REPO

RECIPES = sorted(p for p in (REPO / "recipes").glob("*.py") if not p.name.startswith("_"))
STARTUP_WORDS = ("absl::InitializeLog", "oneDNN", "cuda drivers", "cuInit", "I0000", "E0000",
                 "This TensorFlow binary is optimized")


def _main_block(tree):
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return ast.unparse(node)
    return ""


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_every_recipe_starts_through_run_quietly(recipe):
    source = recipe.read_text(encoding="utf-8")
    tree = ast.parse(source)
    assert "run_quietly(main)" in _main_block(tree), recipe.name
    # A level set by the recipe would read as the user's choice and turn the filter off.
    assert "TF_CPP_MIN_LOG_LEVEL" not in source, recipe.name


def test_every_recipe_takes_verbose():
    sys.path.insert(0, str(REPO / "recipes"))
    try:
        import importlib.util

        for recipe in RECIPES:
            spec = importlib.util.spec_from_file_location(f"quiet_{recipe.stem}", recipe)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            parse = getattr(module, "parse_args", None)
            if parse is None:  # main_job and baselines build their parser in main
                assert "add_verbose_flag(" in recipe.read_text(encoding="utf-8"), recipe.name
                continue
            assert parse(["--verbose"]).verbose is True, recipe.name
    finally:
        sys.path.remove(str(REPO / "recipes"))


def _run(recipe, *args):
    """A recipe's run that starts TensorFlow and then stops at a bad argument (exit 2)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "_KERAS_SENTEMB_SET_TF_LOG_LEVEL", "PYTHONPATH")}
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run([sys.executable, str(REPO / "recipes" / recipe), *args,
                             "--steps", "not-a-number"],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 2, result.stderr
    assert "invalid int value: 'not-a-number'" in result.stderr
    return result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["main_job.py", "ct.py"])
def test_a_recipe_prints_no_tensorflow_startup_lines(recipe):
    err = _run(recipe)
    for word in STARTUP_WORDS:
        assert word not in err, err
    # What is left is the recipe's own usage error.
    assert all(line.startswith(("usage:", " ", f"{recipe}: error:")) for line in err.splitlines()), err


@pytest.mark.slow
def test_verbose_lets_the_startup_lines_through():
    err = _run("main_job.py", "--verbose")
    if not any(NOISE.match(line) for line in err.splitlines()):
        pytest.skip("this TensorFlow build prints no start-up notices to hide")
    assert "main_job.py: error:" in err
