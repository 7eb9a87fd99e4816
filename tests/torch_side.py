"""Talks to `tests/torch_worker.py`: the PyTorch side of a check, in its own process.

The test process holds TensorFlow; sentence-transformers, transformers and
torch run in one long-lived worker interpreter per test process (started on
first use), and arrays cross through `.npz` files. See `process_guard` for
why the two never share a process.
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

WORKER = Path(__file__).resolve().parent / "torch_worker.py"
PACKAGES = ("torch", "transformers", "sentence_transformers")


def missing_packages():
    """The PyTorch-side packages this environment lacks (found without importing them)."""
    return [name for name in PACKAGES if importlib.util.find_spec(name) is None]


class TorchWorkerError(RuntimeError):
    """The worker failed a request or died; the message carries its traceback."""


class TorchWorker:
    """A PyTorch interpreter that answers requests (see `tests/torch_worker.py`)."""

    def __init__(self, timeout=600):
        self.timeout = timeout
        self.folder = Path(tempfile.mkdtemp(prefix="torch-worker-"))
        self._stderr = open(self.folder / "stderr.txt", "w+", encoding="utf-8")
        env = dict(os.environ, USE_TF="0", TOKENIZERS_PARALLELISM="false")
        self._process = subprocess.Popen(
            [sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, text=True, env=env)
        self._count = 0

    def _stderr_tail(self):
        self._stderr.flush()
        return (self.folder / "stderr.txt").read_text(encoding="utf-8", errors="replace")[-4000:]

    def request(self, op, **fields):
        """Runs `op` in the worker; returns `(answer, arrays)` with the `.npz` arrays loaded."""
        self._count += 1
        out = self.folder / f"{op}-{self._count}.npz"
        fields = {k: (str(v) if isinstance(v, Path) else v) for k, v in fields.items()}
        self._process.stdin.write(json.dumps({"op": op, "out": str(out), **fields}) + "\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            code = self._process.wait(timeout=30)
            raise TorchWorkerError(f"the PyTorch worker exited ({code}):\n{self._stderr_tail()}")
        answer = json.loads(line)
        if answer.pop("tensorflow_loaded"):
            raise TorchWorkerError("the PyTorch worker imported TensorFlow")
        if not answer.pop("ok"):
            raise TorchWorkerError(answer["error"])
        with np.load(out) as arrays:
            loaded = {name: arrays[name] for name in arrays.files}
        out.unlink()
        return answer, loaded

    def save_inputs(self, **arrays):
        """Writes arrays for a request that takes an `inputs` file; returns its path."""
        self._count += 1
        path = self.folder / f"inputs-{self._count}.npz"
        np.savez(path, **arrays)
        return path

    def st_encode(self, folder, sentences, batch_size=8):
        """`SentenceTransformer(folder).encode(sentences)` as float32 `[n, dim]`."""
        _, arrays = self.request("st_encode", folder=folder, sentences=list(sentences),
                                 batch_size=batch_size)
        return arrays["vectors"]

    def call(self, path, function, **fields):
        """`function(request)` from the Python file `path`, in the worker: `(answer, arrays)`."""
        return self.request("call", path=Path(path), function=function, **fields)

    def close(self):
        if self._process.poll() is None:
            self._process.stdin.close()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._stderr.close()
        for path in self.folder.iterdir():
            path.unlink()
        self.folder.rmdir()
