"""`keras-sentemb encode --precision bfloat16`: built in bfloat16 once; float32 without native support."""

import numpy as np
import pytest

from keras_sentemb import cli
from keras_sentemb.models import SentenceEncoder, native_bfloat16
from tests.conftest import make_tiny_encoder

LINES = ["a man plays the guitar", "the cat sits on the mat", "hello"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli_precision") / "tiny"
    make_tiny_encoder().save(folder)
    return str(folder)


def encode(tiny_model, tmp_path, *extra):
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    assert cli.main(["encode", "--model", tiny_model, "--input", str(tmp_path / "in.txt"),
                     "--output", str(out), *extra]) == 0
    return np.load(out)


def cosines(a, b):
    return np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_bfloat16_where_native_float32_elsewhere(tiny_model, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(native_bfloat16, "has_native_bfloat16", lambda flags=None: True)
    bf16 = encode(tiny_model, tmp_path, "--precision", "bfloat16")
    fp32 = SentenceEncoder.from_preset(tiny_model).encode(LINES)
    assert bf16.dtype == np.float32 and not np.array_equal(bf16, fp32)
    assert np.all(cosines(bf16, fp32) > 0.99)
    monkeypatch.setattr(native_bfloat16, "has_native_bfloat16", lambda flags=None: False)
    monkeypatch.setattr(native_bfloat16, "_notified", False)
    monkeypatch.delenv("KERAS_SENTEMB_BFLOAT16", raising=False)
    capsys.readouterr()
    fallback = encode(tiny_model, tmp_path, "--precision", "bfloat16")
    np.testing.assert_allclose(fallback, fp32, rtol=1e-5, atol=1e-6)
    assert "no native bfloat16" in capsys.readouterr().err
