"""`keras-sentemb encode --precision auto|float32|bfloat16|int8`.

bfloat16 is built in bfloat16 once and computes float32 without native
support; auto is bfloat16 exactly where the CPU has it; int8 calibrates on
`--calibration`.
"""

import numpy as np
import pytest

from keras_sentemb import cli
from keras_sentemb.kernels import cpu_threads, native_bfloat16, precision
from keras_sentemb.models import SentenceEncoder
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
    fp32 = SentenceEncoder.from_preset(tiny_model).encode(LINES, precision="float32")
    assert bf16.dtype == np.float32 and not np.array_equal(bf16, fp32)
    assert np.all(cosines(bf16, fp32) > 0.99)
    monkeypatch.setattr(native_bfloat16, "has_native_bfloat16", lambda flags=None: False)
    monkeypatch.setattr(native_bfloat16, "_notified", False)
    monkeypatch.delenv("KERAS_SENTEMB_BFLOAT16", raising=False)
    capsys.readouterr()
    fallback = encode(tiny_model, tmp_path, "--precision", "bfloat16")
    np.testing.assert_allclose(fallback, fp32, rtol=1e-5, atol=1e-6)
    assert "no native bfloat16" in capsys.readouterr().err


def test_auto_is_the_default_and_follows_the_cpu(tiny_model, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(precision.PIN_ENV, raising=False)
    monkeypatch.setattr(cpu_threads, "has_accelerator", lambda: False)
    monkeypatch.setattr(native_bfloat16, "has_native_bfloat16", lambda flags=None: True)
    monkeypatch.setattr(native_bfloat16, "cpu_flags", lambda path=None: frozenset({"avx512_bf16"}))
    default = encode(tiny_model, tmp_path, "--verbose")
    assert "bfloat16 auto: the CPU computes bfloat16 natively (avx512_bf16)" in (
        capsys.readouterr().err)
    np.testing.assert_array_equal(default, encode(tiny_model, tmp_path, "--precision", "bfloat16"))
    monkeypatch.setattr(native_bfloat16, "cpu_flags", lambda path=None: frozenset({"avx2"}))
    fp32 = SentenceEncoder.from_preset(tiny_model).encode(LINES, precision="float32")
    np.testing.assert_allclose(encode(tiny_model, tmp_path), fp32, rtol=1e-5, atol=1e-6)
    monkeypatch.setenv(precision.PIN_ENV, "float32")
    monkeypatch.setattr(native_bfloat16, "cpu_flags", lambda path=None: frozenset({"avx512_bf16"}))
    np.testing.assert_allclose(encode(tiny_model, tmp_path), fp32, rtol=1e-5, atol=1e-6)


def test_int8_with_a_calibration_file(tiny_model, tmp_path, capsys):
    calibration = tmp_path / "calibration.txt"
    calibration.write_text("the dog runs in the park\nhello world\n", encoding="utf-8")
    int8 = encode(tiny_model, tmp_path, "--precision", "int8", "--calibration", str(calibration))
    encoder = SentenceEncoder.from_preset(tiny_model)
    encoder.int8_calibration = ["the dog runs in the park", "hello world"]
    np.testing.assert_allclose(int8, encoder.encode(LINES, precision="int8"), rtol=1e-5, atol=1e-6)
    assert np.all(cosines(int8, encoder.encode(LINES, precision="float32")) > 0.99)


@pytest.mark.parametrize("flags,message", [
    (["--calibration", "CAL"], "--calibration applies to --precision int8"),
    (["--precision", "int8", "--calibration", "EMPTY"], "holds no sentence"),
    (["--precision", "int8", "--calibration", "MISSING"], "input file not found"),
    (["--precision", "float16"], "invalid choice: 'float16'"),
])
def test_precision_usage_errors(tiny_model, tmp_path, capsys, flags, message):
    (tmp_path / "CAL").write_text("hello\n", encoding="utf-8")
    (tmp_path / "EMPTY").write_text("\n \n", encoding="utf-8")
    flags = [str(tmp_path / f) if f in ("CAL", "EMPTY", "MISSING") else f for f in flags]
    (tmp_path / "in.txt").write_text("hello\n", encoding="utf-8")
    with pytest.raises(SystemExit) if "invalid choice" in message else _no_exit():
        code = cli.main(["encode", "--model", tiny_model, "--input", str(tmp_path / "in.txt"),
                         "--output", str(tmp_path / "out.npy"), *flags])
        assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out.npy").exists()


def _no_exit():
    import contextlib

    return contextlib.nullcontext()
