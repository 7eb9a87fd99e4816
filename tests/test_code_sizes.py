"""No function or class of the package grows past a readable size.

Size is counted in lines of code: the lines from the `def` / `class` line to
the end of its body that are neither blank nor comments (a line whose first
character is `#`), leaving out every docstring inside (the object's own and
those of nested functions and classes). A function or method has at most
`MAX_FUNCTION_LINES` of them, a class at most `MAX_CLASS_LINES`. The files are
parsed, never imported: the check is cheap.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "keras_sentemb"
MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 400
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def docstring_lines(tree):
    """The line numbers (1-based) of every docstring in the parsed `tree`."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, *_SCOPES)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def code_sizes(source):
    """`[(kind, qualified name, lines of code)]` of every function and class in `source`.

    `kind` is `"function"` (methods and nested functions included) or
    `"class"`; a nested object's name is dotted (`Outer.method.inner`).
    """
    tree = ast.parse(source)
    text = source.splitlines()
    docstrings = docstring_lines(tree)

    def size(node):
        return sum(
            1 for number in range(node.lineno, node.end_lineno + 1)
            if number not in docstrings
            and text[number - 1].strip()
            and not text[number - 1].strip().startswith("#")
        )

    sizes = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _SCOPES):
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                sizes.append((kind, prefix + child.name, size(child)))
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return sizes


def oversized(source, where):
    """One line per function or class of `source` over its limit, naming `where`."""
    limits = {"function": MAX_FUNCTION_LINES, "class": MAX_CLASS_LINES}
    return [
        f"{where}: {kind} {name} has {lines} lines of code (at most {limits[kind]})"
        for kind, name, lines in code_sizes(source)
        if lines > limits[kind]
    ]


PLANTED = '''"""A module docstring."""


def outer(x):
    """Docstring of outer,

    on three lines.
    """
    # a comment line

    y = x + 1  # a trailing comment counts as code

    def inner():
        """Docstring of inner."""
        return y

    text = """a string
    that is no docstring"""
    return inner(), text


class Holder:
    """Docstring of Holder."""

    size = 2

    async def method(self):
        # comment
        return self.size
'''


def test_the_counter_counts_a_planted_example():
    assert sorted(code_sizes(PLANTED)) == [
        ("class", "Holder", 4),  # class line, `size = 2`, def, return
        ("function", "Holder.method", 2),
        ("function", "outer", 7),  # def, y =, def inner, return y, text = (2 lines), return
        ("function", "outer.inner", 2),
    ]


def test_a_function_or_class_over_the_limit_is_named():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    function = f'def long():\n    """Not counted."""\n\n    # not counted\n{body}'
    assert oversized(function, "planted.py") == [
        f"planted.py: function long has {MAX_FUNCTION_LINES + 1} lines of code "
        f"(at most {MAX_FUNCTION_LINES})"
    ]
    assert oversized(function.replace("    x0 = 0\n", ""), "planted.py") == []
    methods = "".join(
        f"    def m{i}(self):\n" + "".join(f"        y{j} = {j}\n" for j in range(9))
        for i in range(MAX_CLASS_LINES // 10)
    )
    assert oversized(f"class Big:\n{methods}", "planted.py") == [
        f"planted.py: class Big has {MAX_CLASS_LINES + 1} lines of code "
        f"(at most {MAX_CLASS_LINES})"
    ]


def test_no_function_or_class_of_the_package_is_over_its_limit():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50, f"expected the package's modules under {PACKAGE}"
    problems = []
    for path in files:
        where = path.relative_to(PACKAGE.parent).as_posix()
        problems += oversized(path.read_text(encoding="utf-8"), where)
    assert not problems, "\n".join(problems)
