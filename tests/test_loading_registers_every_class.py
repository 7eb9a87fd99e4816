"""What a saved encoder names, its loading path registers with Keras.

The package imports its modules lazily, so a class a saved model names
(`keras_sentemb>GlowFlow`, `keras_sentemb>Whitening`) is registered with
Keras only if something imports its module first; the loading path must do
it. A model of every method, trained through the command line, loads in a
fresh interpreter in tests/test_fits_in_one_process.py; here, every module
that registers a class a saved encoder can name is one the loader imports.
"""

import ast

from keras_sentemb import cli
from keras_sentemb.methods.registry import BUILTIN_METHODS
from keras_sentemb.models import loading
from tests.conftest import REPO

PACKAGE = REPO / "keras_sentemb"

# Every registered method; its folder's `testing.py` says what data its --train-file takes
# and the options that keep it tiny (`keras_sentemb.methods.testing.MethodTest`).
RUNS = list(BUILTIN_METHODS)


def test_the_runs_cover_every_method():
    assert set(RUNS) == set(cli.METHODS)


def _registering_modules(areas):
    """The modules of `areas` (sub-packages) that register a class with Keras."""
    found = set()
    for area in areas:
        for path in (PACKAGE / area).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr == "register_keras_serializable" or (
                        isinstance(node, ast.Name) and node.id == "register_keras_serializable"):
                    parts = path.relative_to(REPO).with_suffix("").parts
                    found.add(".".join(parts))
                    break
    return found


def test_loading_registers_every_class_a_saved_encoder_can_name():
    # A saved encoder's config names layers, views and losses (models,
    # augment, losses); a class added there without its module in
    # SERIALIZABLE_MODULES would load only when something else imported it.
    assert _registering_modules(("models", "augment", "losses")) == set(loading.SERIALIZABLE_MODULES)
