"""Every method fitted twice in one process: the first model stays as it was, the second equals it.

Compiled optimizer kernels and traced functions live as long as the
process; a run must never reach another run's variables through them
(the fused optimizer kernels once did: a static trainer's second run
called a kernel traced over the first run's table). One fresh interpreter
fits every registered method once (each run seeded alike), keeps the
models, then fits every method again in the reverse order: each first
model still encodes as it did, each second run gives the first run's
vectors, and the second round adds no function to TensorFlow's global graph.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import keras_sentemb
from keras_sentemb.methods.registry import BUILTIN_METHODS
from tests.conftest import REPO
from tests.helpers.every_method import RUNS

SCRIPT = """
import json, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
import keras_sentemb
from tests.helpers.every_method import PROBE, fit_tiny, write_every_method_data

import inspect

import tensorflow as tf


def global_graph_functions():
    return len(tf.compat.v1.get_default_graph().as_graph_def().library.function)


def vectors(model):  # in float32 where the model computes in a chosen precision
    takes = "precision" in inspect.signature(model.encode).parameters
    return model.encode(PROBE, **({{"precision": "float32"}} if takes else {{}})).tolist()


root = write_every_method_data(Path({root!r}))
methods = keras_sentemb.list_methods()
first, seen, second = {{}}, {{}}, {{}}
for method in methods:
    first[method] = fit_tiny(method, root)
    seen[method] = vectors(first[method])
functions = [global_graph_functions()]
for method in reversed(methods):
    second[method] = vectors(fit_tiny(method, root))
functions.append(global_graph_functions())
after = {{m: vectors(first[m]) for m in methods}}
print(json.dumps({{"first": seen, "after": after, "second": second,
                  "global_graph_functions": functions}}))
"""


def _close(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and np.linalg.norm(a - b) <= 1e-5 * max(np.linalg.norm(a), 1e-12)


def test_the_runs_cover_every_builtin_method():
    assert set(RUNS) == set(BUILTIN_METHODS)
    assert set(BUILTIN_METHODS) <= set(keras_sentemb.list_methods())


@pytest.mark.slow
def test_every_method_fits_twice_in_one_process(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(repo=str(REPO), root=str(tmp_path))],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=1800)
    assert result.returncode == 0, result.stderr[-5000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(out["first"]) == set(RUNS)
    changed = [m for m in RUNS if not _close(out["first"][m], out["after"][m])]
    differ = [m for m in RUNS if not _close(out["first"][m], out["second"][m])]
    assert not changed, f"a later fit changed these first models: {changed}"
    assert not differ, f"a second fit differs from the first: {differ}"
    # Nothing a run traces outlives it in TensorFlow's global graph (tf.data's scan and
    # counter datasets would leave one function per run there).
    after_first, after_second = out["global_graph_functions"]
    assert after_second == after_first, out["global_graph_functions"]
