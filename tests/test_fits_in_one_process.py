"""Every method fitted twice in one process, then loaded in a fresh one.

Compiled optimizer kernels and traced functions live as long as the
process; a run must never reach another run's variables through them
(the fused optimizer kernels once did: a static trainer's second run
called a kernel traced over the first run's table). One fresh interpreter
fits every registered method once from Python (each run seeded alike),
keeps the models, then trains every method again in the reverse order
through the command line (`keras-sentemb train METHOD`, the method's own
flags): each first model still encodes as it did, each second run gives
the first run's vectors, and the second round adds no function to
TensorFlow's global graph.

The package imports its modules lazily, so a class a saved model names
(`keras_sentemb>GlowFlow`, `keras_sentemb>Whitening`) is registered with
Keras only if something imports its module first; the loading path must do
it. Another interpreter, which has imported nothing else, loads and encodes
the models the command line saved.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import keras_sentemb
from keras_sentemb.methods.registry import BUILTIN_METHODS
from keras_sentemb.methods.testing import method_test
from tests.conftest import REPO
from tests.helpers.every_method import RUNS

FIT_TWICE = """
import json, sys
from pathlib import Path
sys.path.insert(0, {repo!r})
import keras_sentemb
from keras_sentemb import cli
from keras_sentemb.models import SentenceEncoder
from tests.helpers.every_method import PROBE, RUNS, fit_tiny, write_every_method_data
from tests.helpers.methods import TINY_FLAGS, write_tiny_data

import inspect

import tensorflow as tf


def global_graph_functions():
    return len(tf.compat.v1.get_default_graph().as_graph_def().library.function)


def vectors(model):  # in float32 where the model computes in a chosen precision
    model = getattr(model, "encoder", model)  # a trainer-like result keeps its encoder
    takes = "precision" in inspect.signature(model.encode).parameters
    return model.encode(PROBE, **({{"precision": "float32"}} if takes else {{}})).tolist()


def train_from_the_command_line(method):
    output = root / "saved" / method
    code = cli.main(["train", method, "--model", str(root / "tiny"),
                     "--train-file", str(write_tiny_data(RUNS[method].data, root)),
                     "--output", str(output), "--seed", "0", *TINY_FLAGS,
                     *RUNS[method].flags()])
    return code, output


root = write_every_method_data(Path({root!r}))
methods = keras_sentemb.list_methods()
first, seen, second, codes = {{}}, {{}}, {{}}, {{}}
for method in methods:
    first[method] = fit_tiny(method, root)
    seen[method] = vectors(first[method])
functions = [global_graph_functions()]
for method in reversed(methods):
    codes[method], output = train_from_the_command_line(method)
    if codes[method] == 0:
        second[method] = vectors(SentenceEncoder.from_preset(str(output)))
functions.append(global_graph_functions())
after = {{m: vectors(first[m]) for m in methods}}
print(json.dumps({{"first": seen, "after": after, "second": second, "codes": codes,
                  "global_graph_functions": functions}}))
"""

LOAD = """
import json, sys
sys.path.insert(0, {repo!r})
import numpy as np
from keras_sentemb.models import SentenceEncoder

out = {{}}
for method in {methods!r}:
    encoder = SentenceEncoder.from_preset({root!r} + "/saved/" + method)
    vectors = encoder.encode(["a man plays the guitar .", "the cat sits on the mat ."])
    out[method] = {{
        "shape": list(vectors.shape),
        "finite": bool(np.isfinite(vectors).all()),
        "postprocess": type(encoder.postprocess).__name__ if encoder.postprocess is not None else None,
    }}
print(json.dumps(out))
"""


def _run(script, tmp_path):
    """The script's last stdout line (JSON) and its stderr, from a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.setdefault("KERAS_BACKEND", "tensorflow")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=1800)
    assert result.returncode == 0, result.stderr[-5000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def _close(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and np.linalg.norm(a - b) <= 1e-5 * max(np.linalg.norm(a), 1e-12)


def test_the_runs_cover_every_builtin_method():
    assert set(RUNS) == set(BUILTIN_METHODS)
    assert set(BUILTIN_METHODS) <= set(keras_sentemb.list_methods())


@pytest.mark.slow
def test_every_method_fits_twice_in_one_process_and_loads_in_a_fresh_one(tmp_path):
    out, log = _run(FIT_TWICE.format(repo=str(REPO), root=str(tmp_path)), tmp_path)
    assert out["codes"] == {method: 0 for method in RUNS}, [
        line for line in log.splitlines() if line.startswith("keras-sentemb: error:")]
    assert set(out["first"]) == set(RUNS)
    # No method's run makes oneDNN print its int64 error line ("E0000 ... DT_INT64"): the
    # input pipeline's ragged concat once did, and keras-hub's masked-LM head's gather.
    assert "DT_INT64" not in log, [line for line in log.splitlines() if "DT_INT64" in line]
    changed = [m for m in RUNS if not _close(out["first"][m], out["after"][m])]
    differ = [m for m in RUNS if not _close(out["first"][m], out["second"][m])]
    assert not changed, f"a later fit changed these first models: {changed}"
    assert not differ, f"a second fit (the command line's) differs from the first: {differ}"
    # Nothing a run traces outlives it in TensorFlow's global graph (tf.data's scan and
    # counter datasets would leave one function per run there).
    after_first, after_second = out["global_graph_functions"]
    assert after_second == after_first, out["global_graph_functions"]

    loaded, _ = _run(LOAD.format(repo=str(REPO), root=str(tmp_path), methods=sorted(RUNS)),
                     tmp_path)
    for method, info in loaded.items():
        assert info["shape"][0] == 2 and info["finite"], (method, info)
        assert info["postprocess"] == method_test(BUILTIN_METHODS[method]).postprocess, method
