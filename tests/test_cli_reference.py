"""docs/cli.md is what docs/_ext/cli_reference.py generates from the real parser."""

import importlib.util
import re
import subprocess
import sys

from tests.conftest import REPO


def _generator():
    spec = importlib.util.spec_from_file_location(
        "cli_reference", REPO / "docs" / "_ext" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_cli_reference_is_the_generated_one():
    # Generated in a new interpreter: this process may hold methods that tests registered.
    committed = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    result = subprocess.run([sys.executable, str(REPO / "docs" / "_ext" / "cli_reference.py"),
                             "--print"], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    generated = result.stdout
    assert committed == generated, (
        "docs/cli.md differs from the parser: run `python docs/_ext/cli_reference.py` and "
        "commit docs/cli.md")


def test_the_reference_lists_every_command_method_and_flag():
    from keras_sentemb import cli

    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, command in sub.choices.items():
        assert f"## `keras-sentemb {name}`" in page
        for action in command._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in page, (name, flag)
    for method in cli.METHODS:
        assert f"### `train {method}`" in page
        options, _ = cli.method_option_parser(method)
        section = page.split(f"### `train {method}`")[1].split("\n### ")[0]
        for action in options._actions:
            for flag in action.option_strings:
                assert f"`{flag}`" in section, (method, flag)


def test_the_reference_documents_both_meanings_of_verbose_and_the_exit_codes():
    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert "train METHOD --verbose LEVEL" in page and "TF_CPP_MIN_LOG_LEVEL" in page
    table = page.split("## Exit status")[1].split("\n## ")[0]
    from keras_sentemb import cli

    documented = set(re.findall(r"^\| `(\d+)` \|", table, re.M))
    assert documented == {"0", str(cli.EXIT_USER_ERROR), str(cli.EXIT_INTERNAL_ERROR)}
