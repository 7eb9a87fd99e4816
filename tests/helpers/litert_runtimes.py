"""The stand-alone LiteRT runtimes (`ai_edge_litert`, MediaPipe's TextEmbedder), each run in a
process of its own through tests/export/litert_runtime.py."""

import json
import subprocess
import sys

import numpy as np

from tests.conftest import REPO

RUNTIME = REPO / "tests" / "export" / "litert_runtime.py"


def runtimes():
    """`{"litert": bool, "mediapipe": bool}`: which runtimes import here (empty on failure)."""
    out = subprocess.run([sys.executable, str(RUNTIME), "check"], capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else {}


def runtimes_installed():
    found = runtimes()
    return bool(found) and all(found.values())


def run_runtime(mode, model, request, tmp_path):
    """`(stdout, vectors)` of `mode` ("litert" on ids, "mediapipe" on sentences) on `request`."""
    (tmp_path / "request.json").write_text(json.dumps(request), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(RUNTIME), mode, str(model), str(tmp_path / "request.json"),
         str(tmp_path / "out.npy")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout, np.load(tmp_path / "out.npy")
