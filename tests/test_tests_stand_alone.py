"""Every module under tests/ stands alone: none imports a test module.

Tests share data and helpers through `tests/helpers/` or a conftest, never by
importing another test module (a module whose file name starts with `test_`):
such an import runs the other module's module-level code, hands its fixtures
over by name and ties the two files together (moving or renaming one breaks
the other). The check covers import statements and the code in string
literals (scripts that a test runs in a child process). The files are parsed,
never imported: the check is cheap.
"""

import ast
import re
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent
_IMPORT_LINE = re.compile(r"^\s*(from|import)\s", re.MULTILINE)


def _is_test_module(dotted):
    """Whether the dotted module name names a test module (a part starts with `test_`)."""
    return any(part.startswith("test_") for part in dotted.split("."))


def _absolute(node, package):
    """The absolute module name of an `ImportFrom`, relative to `package` (dotted)."""
    if not node.level:
        return node.module or ""
    parts = package.split(".") if package else []
    base = parts[: len(parts) - node.level + 1] if node.level <= len(parts) else []
    return ".".join(base + ([node.module] if node.module else []))


def _imported_modules(node, package):
    """The dotted names of the modules an `Import` / `ImportFrom` node may load."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    module = _absolute(node, package)
    # `from tests.trainers import test_simcse` loads the module tests.trainers.test_simcse.
    return [module] + [f"{module}.{alias.name}".lstrip(".") for alias in node.names]


def _code_in_string(text):
    """The parsed code of a string literal that holds Python imports, or None.

    A whole script parses as one tree; a template that does not parse (a
    `str.format` script with `{name!r}` fields) is read import line by line.
    """
    if not re.search(r"(^|;)\s*(from|import)\s", text, re.MULTILINE):
        return None
    try:
        return ast.parse(textwrap.dedent(text))
    except SyntaxError:
        pass
    body = []
    for line in text.splitlines():
        for statement in line.split(";"):
            if _IMPORT_LINE.match(statement):
                try:
                    body.extend(ast.parse(statement.strip()).body)
                except SyntaxError:
                    continue
    return ast.Module(body=body, type_ignores=[]) if body else None


def _strings(tree):
    """The text of every string literal of `tree`; an f-string's fields read as `_`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(part.value if isinstance(part, ast.Constant) else "_"
                           for part in node.values)
            yield node.lineno, text


def imports_of_test_modules(source, package="tests"):
    """`[(line, imported module, statement)]`: each import of a test module in `source`.

    `package`: the dotted package of the module that holds `source`, for
    relative imports. Imports in the code of string literals count (and in
    the strings of that code), at the line where the outermost string starts.
    """
    found = set()

    def scan(tree, line=None):
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for module in _imported_modules(node, package):
                    if _is_test_module(module):
                        found.add((line or node.lineno, module, ast.unparse(node)))
                        break
        for start, text in _strings(tree):
            code = _code_in_string(text)
            if code is not None:
                scan(code, line or start)

    scan(ast.parse(source))
    return sorted(found)


def offences(path):
    """One line per import of a test module in the file at `path`, naming both."""
    relative = path.relative_to(TESTS.parent)
    package = ".".join(relative.parent.parts)
    return [
        f"{relative}:{line}: imports the test module {module} ({statement}); "
        "move what it shares to tests/helpers/ or a conftest"
        for line, module, statement in imports_of_test_modules(path.read_text(), package)
    ]


BAD = '''
import numpy as np
from tests.helpers.corpora import CORPUS
from tests.trainers.TEST_contrastive_tension import DEV
from tests.trainers import TEST_simcse
from .TEST_forward import make_tiny_roberta
import tests.models.TEST_kernels as kernels_tests


def test_in_a_child_process(tmp_path):
    script = """
import sys
from tests.trainers.TEST_multitask import WORDS
print(sys.argv)
subprocess.run([sys.executable, "-c", "from tests.losses.TEST_self_guided import ref_opt3"])
"""
    template = """
root = Path({root!r})
from tests.data.TEST_parallel import make_pairs
"""
    code = f"from tests.evaluation.TEST_sts import write_stsb; write_stsb({tmp_path!r})"
    note = "the import in tests/trainers/TEST_simcse.py is fine in prose"
'''.replace("TEST_", "test_")  # spelled apart: this file's own strings pass the check


def test_the_check_names_each_import_of_a_test_module():
    found = {(line, module) for line, module, _ in imports_of_test_modules(BAD, "tests.models")}
    assert found == {
        (4, "tests.trainers.test_contrastive_tension"),
        (5, "tests.trainers.test_simcse"),
        (6, "tests.models.test_forward"),
        (7, "tests.models.test_kernels"),
        (11, "tests.trainers.test_multitask"),
        (11, "tests.losses.test_self_guided"),
        (17, "tests.data.test_parallel"),
        (21, "tests.evaluation.test_sts"),
    }


def test_the_check_passes_helpers_and_package_imports():
    good = ("import numpy as np\nfrom tests.helpers.corpora import CORPUS\n"
            "from tests import process_guard\nfrom .conftest import make_batch\n"
            "script = 'from tests.helpers.files import write_stsb'\n")
    assert imports_of_test_modules(good, "tests.augment") == []


def test_no_module_under_tests_imports_a_test_module():
    problems = [line for path in sorted(TESTS.rglob("*.py")) for line in offences(path)]
    assert not problems, "\n".join(problems)
