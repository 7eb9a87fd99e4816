"""Private TensorFlow / Keras / keras-hub internals are reached through `keras_sentemb.compat` only.

`compat.py` names each internal it uses, and `tests/test_compat.py` checks each
one on the installed releases; an internal used anywhere else would break
unseen on an upgrade. This reads every other module of the package (its
syntax only, nothing is run) for:

- imports of private modules (`tensorflow.python`, `tensorflow.core`,
  `tensorflow.lite.python`, `tensorflow.compiler`, `keras.src`, `keras_hub.src`);
- attributes of `tf` / `keras` / `keras_hub` that are private (`tf.__internal__`,
  `keras.src`, `keras._x`);
- the names of TensorFlow's private ops and graph attributes (`"_XlaMustCompile"`,
  `"_MklLayerNorm"`, ...);
- private methods and attributes of Keras' and keras-hub's classes (`Model`,
  `Layer`, `Optimizer`, `Variable`, `MultiHeadAttention`, keras-hub's
  `TransformerEncoder`): read, overridden, or named in `getattr` / `hasattr` /
  `setattr`. A private name the package gives its own objects (assigned or
  defined in it) is the package's, not Keras'.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "keras_sentemb"
ALLOWED = {PACKAGE / "compat.py"}
PRIVATE_MODULES = ("tensorflow.python", "tensorflow.core", "tensorflow.lite.python",
                   "tensorflow.compiler", "tensorflow.tsl", "keras.src", "keras_hub.src",
                   "tf_keras")
ROOTS = ("tf", "tensorflow", "keras", "keras_hub")
PRIVATE_COMPONENTS = ("src", "python", "__internal__")
# TensorFlow's private ops and graph attributes are CamelCase names with a leading underscore.
TF_PRIVATE_PREFIXES = ("_Xla", "_Mkl", "_Quantized", "_Fused", "_Onednn")
NAME_FUNCTIONS = ("getattr", "hasattr", "setattr", "delattr")


def keras_private_names():
    """The private (single-underscore) attribute names of Keras' and keras-hub's classes."""
    import keras
    import keras_hub

    classes = [keras.Model, keras.layers.Layer, keras.optimizers.Optimizer, keras.Variable,
               keras.layers.MultiHeadAttention, keras_hub.layers.TransformerEncoder]
    names = {name for cls in classes for name in dir(cls)}
    layer = keras_hub.layers.TransformerEncoder(8, 2)
    layer.build([None, None, 4])
    names |= set(vars(layer)) | set(vars(vars(layer)["_self_attention_layer"]))
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return list(reversed(parts))
    return None


def own_private_names(trees):
    """Private names the package gives its own objects: `x._n = ...`, `def _n`, `class _N`."""
    names = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return {n for n in names if n.startswith("_")}


def _keras_bases(cls):
    return any((_dotted(base) or [""])[0] in ROOTS for base in cls.bases)


def findings(trees, keras_private, own):
    """`["path:line: what", ...]` for every private internal used in `trees` (path -> AST)."""
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            line = f"{path}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                           else [node.module or ""])
                for module in modules:
                    if module.startswith(PRIVATE_MODULES) or (
                            module.split(".")[0] in ("tensorflow", "keras", "keras_hub")
                            and any(p.startswith("_") for p in module.split(".")[1:])):
                        found.append(f"{line}: imports {module}")
            elif isinstance(node, ast.Attribute):
                dotted = _dotted(node)
                if dotted and dotted[0] in ROOTS and len(dotted) > 1 and (
                        dotted[1] in PRIVATE_COMPONENTS
                        or (dotted[1].startswith("_") and not dotted[1].endswith("__"))):
                    found.append(f"{line}: reads {'.'.join(dotted[:2])}")
                if node.attr in keras_private and node.attr not in own:
                    found.append(f"{line}: reads Keras' private .{node.attr}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value.startswith(TF_PRIVATE_PREFIXES):
                    found.append(f"{line}: names TensorFlow's private {node.value!r}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if (node.func.id in NAME_FUNCTIONS and len(node.args) > 1
                        and isinstance(node.args[1], ast.Constant)
                        and node.args[1].value in keras_private
                        and node.args[1].value not in own):
                    found.append(f"{line}: {node.func.id} of Keras' private {node.args[1].value}")
            if isinstance(node, ast.ClassDef) and _keras_bases(node):
                for item in node.body:
                    if (isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                            and item.name in keras_private):
                        found.append(f"{path}:{item.lineno}: overrides Keras' private "
                                     f"{node.name}.{item.name}")
    return found


def package_trees():
    return {path.relative_to(PACKAGE.parent): ast.parse(path.read_text(encoding="utf-8"))
            for path in sorted(PACKAGE.rglob("*.py")) if path not in ALLOWED}


@pytest.fixture(scope="module")
def keras_private():
    return keras_private_names()


def test_no_private_internal_outside_compat(keras_private):
    trees = package_trees()
    found = findings(trees, keras_private, own_private_names(trees))
    assert not found, ("reach these through keras_sentemb.compat (with a test in "
                       "tests/test_compat.py):\n" + "\n".join(found))


PLANTED = '''
import keras
import tensorflow as tf
from tensorflow.python.framework import ops
from keras.src import backend


class Trainer(keras.Model):
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        pass


def f(layer, graph_def):
    tf.__internal__.distribute.strategy_supports_no_merge_call()
    layer._flatten_layers()
    getattr(layer, "_self_attention_layer")
    return graph_def.attr["_XlaMustCompile"]
'''


def test_the_check_sees_planted_private_internals(keras_private):
    """Each kind of access above is found when it is planted in a module."""
    found = "\n".join(findings({"planted.py": ast.parse(PLANTED)}, keras_private, set()))
    for what in ("imports tensorflow.python.framework", "imports keras.src",
                 "overrides Keras' private Trainer._maybe_symbolic_build",
                 "reads tf.__internal__", "reads Keras' private ._flatten_layers",
                 "getattr of Keras' private _self_attention_layer",
                 "names TensorFlow's private '_XlaMustCompile'"):
        assert what in found, (what, found)
