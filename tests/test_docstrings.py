"""The docstring examples run (or, for fenced usage sketches, are valid calls).

- `>>>` examples are doctests: run with NumPy, TensorFlow and Keras imported
  and the module's own names in scope. They use the packaged data or files
  they write themselves, so they run on any checkout.
- Fenced ```python examples are usage sketches that name user files; each must
  parse, and every call of a public keras_sentemb function or class in it must
  use keyword arguments that the callee accepts.
"""

import ast
import doctest
import importlib
import importlib.util
import inspect
import pkgutil
import re

import numpy as np
import pytest

import keras_sentemb
from tests.conftest import REPO

FENCE = re.compile(r"```python\n(.*?)```", re.S)


def _modules():
    names = []
    for info in pkgutil.walk_packages(keras_sentemb.__path__, "keras_sentemb."):
        if info.name.endswith("__main__") or ".export.standalone" in info.name:
            continue
        if info.name.startswith("keras_sentemb.beam.") and importlib.util.find_spec(
            "apache_beam"
        ) is None:
            continue  # the optional extra keras_sentemb[beam] (CI installs it)
        names.append(info.name)
    return sorted(names)


MODULES = _modules()


def _doctest_modules():
    out = []
    for name in MODULES:
        path = REPO / (name.replace(".", "/") + ".py")
        if path.is_file() and ">>>" in path.read_text(encoding="utf-8"):
            out.append(name)
    return out


@pytest.mark.parametrize("name", _doctest_modules())
def test_doctests(name):
    import keras
    import tensorflow as tf

    module = importlib.import_module(name)
    globs = {"np": np, "tf": tf, "keras": keras, **vars(module)}
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = finder.find(module, name, globs=globs)
    assert tests, f"{name} has '>>>' but no doctest was found"
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} doctest example(s) failed in {name}"


def _public_callables():
    table = {}
    for name in keras_sentemb.__all__:
        table[name] = getattr(keras_sentemb, name)
    for name in MODULES:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if attr.startswith("_") or not callable(value):
                continue
            if getattr(value, "__module__", "").startswith("keras_sentemb"):
                table.setdefault(attr, value)
    return table


def _accepts(callee, keyword):
    try:
        target = callee.__init__ if inspect.isclass(callee) else callee
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return True
    return keyword in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


def _fenced_examples():
    out = []
    for name in MODULES:
        module = importlib.import_module(name)
        for obj_name, obj in [(name, module)] + list(vars(module).items()):
            doc = inspect.getdoc(obj) if (obj is module or getattr(obj, "__module__", None) == name) else None
            for i, code in enumerate(FENCE.findall(doc or "")):
                out.append(pytest.param(code, id=f"{name}:{obj_name if obj is not module else ''}:{i}"))
    return out


@pytest.mark.parametrize("code", _fenced_examples())
def test_fenced_examples_parse_and_call_real_arguments(code):
    import textwrap

    tree = ast.parse(textwrap.dedent(code))
    table = _public_callables()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        callee = table.get(name)
        if callee is None:
            continue
        for keyword in node.keywords:
            if keyword.arg is not None:
                assert _accepts(callee, keyword.arg), (
                    f"{name}(...) in a docstring example passes {keyword.arg}=, "
                    f"which {name} does not accept"
                )


def test_readme_python_examples_call_real_arguments():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = FENCE.findall(readme)
    assert blocks
    for code in blocks:
        test_fenced_examples_parse_and_call_real_arguments(code)


def test_the_fenced_check_can_fail():
    with pytest.raises(AssertionError, match="does not accept"):
        test_fenced_examples_parse_and_call_real_arguments("keras_sentemb.fit_ct('x', stepz=3)")

