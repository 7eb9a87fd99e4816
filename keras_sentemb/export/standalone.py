"""Run an exported SavedModel in a fresh process that cannot import Keras.

This is what a server has: TensorFlow and the tensorflow-text ops, none of
keras_sentemb, keras-hub or (in `strict` mode) Keras. The child process
installs an import hook that makes those packages look absent *before*
TensorFlow is imported, registers the tensorflow-text ops, loads the
SavedModel with `tf.saved_model.load`, runs `serving_default` and reports
back which modules it imported.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

# Packages the serving side must not need.
BLOCKED = ("keras_sentemb", "keras_hub", "keras_nlp")
# Also blocked in strict mode: the graph needs no Keras at all.
STRICT_BLOCKED = BLOCKED + ("keras", "tf_keras")

_SCRIPT = r'''
import importlib.machinery
import importlib.util
import glob
import json
import os
import sys

BLOCKED = tuple(json.loads(os.environ["SENTEMB_BLOCKED"]))


class _Absent:
    def create_module(self, spec):
        raise ModuleNotFoundError(f"No module named {spec.name!r}", name=spec.name)

    def exec_module(self, module):  # never reached
        pass


class _BlockFinder:
    """Makes the blocked packages look uninstalled (TensorFlow probes keras)."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            return importlib.machinery.ModuleSpec(name, _Absent(), origin=None)
        return None


sys.meta_path.insert(0, _BlockFinder())
saved_model, inputs_file, output_file, report_file, strict = sys.argv[1:6]

import tensorflow as tf

if strict == "1":
    # Register tensorflow-text's kernels without importing its Python package
    # (whose `keras` submodule would import Keras).
    spec = importlib.util.find_spec("tensorflow_text")
    root = spec.submodule_search_locations[0]
    for library in sorted(glob.glob(os.path.join(root, "python", "ops", "_*.so"))):
        tf.load_op_library(library)
else:
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

sentences = tf.io.parse_tensor(tf.io.read_file(inputs_file), tf.string)
model = tf.saved_model.load(saved_model)
signature = model.signatures["serving_default"]
_, input_specs = signature.structured_input_signature
out = signature(sentences=sentences)
embeddings = out["embeddings"].numpy()
import numpy as np

np.save(output_file, embeddings)
imported = sorted(
    name for name in sys.modules if name.split(".")[0] in BLOCKED
)
with open(report_file, "w") as f:
    json.dump(
        {
            "signatures": sorted(model.signatures),
            "inputs": sorted(input_specs),
            "outputs": sorted(out),
            "dtype": str(embeddings.dtype),
            "shape": list(embeddings.shape),
            "blocked_modules_imported": imported,
            "tensorflow": tf.__version__,
        },
        f,
    )
'''


class StandaloneRunError(RuntimeError):
    """The SavedModel failed to load or run outside keras_sentemb."""


def run_standalone(path, sentences, strict=False, timeout=600, return_report=False):
    """Run `serving_default` of a SavedModel in a clean child process.

    The child runs `python -E -s` (no PYTHON* variables, no user site) in
    an empty working folder, with keras_sentemb, keras-hub and keras-nlp made
    unimportable; in `strict` mode Keras as well, and the tensorflow-text
    ops are registered from their shared libraries instead of
    `import tensorflow_text`.

    Args:
        path: str or path. A SavedModel folder (one version).
        sentences: list of str or bytes.
        strict: bool. Block Keras too. Defaults to `False`.
        timeout: float. Seconds before the child is killed. Defaults to 600.
        return_report: bool. Also return the child's report (signatures,
            output keys, modules imported). Defaults to `False`.

    Returns:
        float32 numpy array `[len(sentences), dim]` (and the report dict
        when `return_report`).

    Raises:
        StandaloneRunError: if the child fails, or imported a blocked module.
    """
    import tensorflow as tf  # the parent's TensorFlow only (this module runs without it)

    blocked = STRICT_BLOCKED if strict else BLOCKED
    data = [s.encode("utf-8", errors="replace") if isinstance(s, str) else bytes(s)
            for s in sentences]
    with tempfile.TemporaryDirectory(prefix="sentemb-standalone-") as tmp:
        tmp = Path(tmp)
        tf.io.write_file(
            str(tmp / "inputs.pb"),
            tf.io.serialize_tensor(tf.constant(data, dtype=tf.string, shape=[len(data)])),
        )
        (tmp / "run.py").write_text(_SCRIPT, encoding="utf-8")
        env = {
            key: os.environ[key]
            for key in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")
            if key in os.environ
        }
        env.update(
            SENTEMB_BLOCKED=json.dumps(list(blocked)),
            TF_CPP_MIN_LOG_LEVEL="2",
            CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        )
        command = [
            sys.executable, "-E", "-s", str(tmp / "run.py"),
            str(Path(os.fspath(path)).resolve()),
            str(tmp / "inputs.pb"), str(tmp / "out.npy"), str(tmp / "report.json"),
            "1" if strict else "0",
        ]
        proc = subprocess.run(
            command, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout
        )
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise StandaloneRunError(
                f"The SavedModel failed in a clean process (exit {proc.returncode}):\n{tail}"
            )
        report = json.loads((tmp / "report.json").read_text())
        embeddings = np.load(tmp / "out.npy")
    if report["blocked_modules_imported"]:
        raise StandaloneRunError(
            "The clean process imported blocked modules: "
            f"{report['blocked_modules_imported']}"
        )
    return (embeddings, report) if return_report else embeddings
