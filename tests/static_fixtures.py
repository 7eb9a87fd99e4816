"""Shared by the static encoder's tests: a tiny distilled encoder, the consumers' side."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

CONSUMERS = Path(__file__).resolve().parent / "static_consumers.py"
# Sentences whose words are all in the tiny vocabulary (no [UNK]: model2vec drops it).
TINY_SENTENCES = [
    "the man is playing a guitar .", "a woman plays the piano !", "the dog runs in the park",
    "a cat sits on the mat", "hello world", "the man and the woman are playing .",
]


def tiny_static(dims=8, **kwargs):
    """A static encoder distilled from the tiny random BERT of `tests.conftest`."""
    from keras_sentemb.methods.static.distill import distill_static
    from tests.conftest import make_tiny_encoder

    teacher = make_tiny_encoder(pooling="mean", normalize=True)
    return distill_static(teacher, dims=dims, **kwargs), teacher


def consumer_python():
    """The interpreter with sentence-transformers and model2vec (`ST_PYTHON`), or None."""
    candidates = [os.environ.get("ST_PYTHON"), sys.executable]
    return next((c for c in candidates if c and os.path.isfile(c)), None)


def consumer_vectors(fmt, folder, sentences):
    """`[n, d]` vectors of `folder` encoded by its real consumer, in a PyTorch interpreter.

    Skips the test when that interpreter lacks the consumer's package.
    """
    python = consumer_python()
    with tempfile.TemporaryDirectory() as tmp:
        inputs, out = Path(tmp) / "sentences.json", Path(tmp) / "vectors.npy"
        inputs.write_text(json.dumps(list(sentences)), encoding="utf-8")
        env = dict(os.environ, HF_HUB_OFFLINE="1", USE_TF="0")
        env.pop("PYTHONPATH", None)
        result = subprocess.run([python, str(CONSUMERS), fmt, str(folder), str(inputs), str(out)],
                                capture_output=True, text=True, timeout=600, env=env)
        if result.returncode == 3:
            pytest.skip(result.stderr.strip())
        assert result.returncode == 0, result.stderr[-3000:]
        return np.load(out)


def cosines(a, b):
    """Row-wise cosine of two `[n, d]` arrays."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
