"""A model trained by every method (`keras-sentemb train METHOD`) loads back in a fresh interpreter.

The package imports its modules lazily, so a class a saved model names
(`keras_sentemb>GlowFlow`, `keras_sentemb>Whitening`) is registered with
Keras only if something imports its module first; the loading path must do
it. One interpreter trains and saves a tiny model with each method through
the command line, another one (which has imported nothing else) loads and
encodes each of them.
"""

import ast
import json
import os
import subprocess
import sys

import pytest

from keras_sentemb import cli
from keras_sentemb.methods.registry import BUILTIN_METHODS
from keras_sentemb.methods.testing import method_test
from keras_sentemb.models import loading
from tests.conftest import REPO

PACKAGE = REPO / "keras_sentemb"

# Every registered method; its folder's `testing.py` says what data its --train-file takes
# and the options that keep it tiny (`keras_sentemb.methods.testing.MethodTest`).
RUNS = list(BUILTIN_METHODS)

TRAIN = """
import json, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from keras_sentemb import cli
from tests.conftest import make_tiny_encoder
from keras_sentemb.methods.registry import BUILTIN_METHODS
from keras_sentemb.methods.testing import method_test
from tests.helpers.methods import TINY_FLAGS, write_tiny_data

root = Path({root!r})
make_tiny_encoder().save(root / "tiny")
codes = {{}}
for method in {runs!r}:
    spec = method_test(BUILTIN_METHODS[method])
    (root / "data" / method).mkdir(parents=True)
    path = write_tiny_data(spec.data, root / "data" / method)
    codes[method] = cli.main([
        "train", method, "--model", str(root / "tiny"), "--train-file", str(path),
        "--output", str(root / method), *TINY_FLAGS, *spec.flags()])
print(json.dumps(codes))
"""

LOAD = """
import json, sys
sys.path.insert(0, {repo!r})
import numpy as np
from keras_sentemb.models import SentenceEncoder

out = {{}}
for method in {methods!r}:
    encoder = SentenceEncoder.from_preset({root!r} + "/" + method)
    vectors = encoder.encode(["a man plays the guitar .", "the cat sits on the mat ."])
    out[method] = {{
        "shape": list(vectors.shape),
        "finite": bool(np.isfinite(vectors).all()),
        "postprocess": type(encoder.postprocess).__name__ if encoder.postprocess is not None else None,
    }}
print(json.dumps(out))
"""


def _run(script, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.setdefault("KERAS_BACKEND", "tensorflow")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=1200)
    assert result.returncode == 0, result.stderr[-5000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def test_the_runs_cover_every_method():
    assert set(RUNS) == set(cli.METHODS)


@pytest.mark.slow
def test_a_model_of_every_method_loads_in_a_fresh_interpreter(tmp_path):
    root = str(tmp_path)
    codes, log = _run(TRAIN.format(repo=str(REPO), root=root, runs=RUNS), tmp_path)
    assert codes == {method: 0 for method in RUNS}, [
        line for line in log.splitlines() if line.startswith("keras-sentemb: error:")]
    loaded, _ = _run(LOAD.format(repo=str(REPO), root=root, methods=sorted(RUNS)), tmp_path)
    for method, info in loaded.items():
        assert info["shape"][0] == 2 and info["finite"], (method, info)
        assert info["postprocess"] == method_test(BUILTIN_METHODS[method]).postprocess, method


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
