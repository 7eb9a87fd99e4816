"""`precision="auto"` (the default of `encode`): bfloat16 where the CPU computes it natively.

These tests unset any pin a caller set and fake the CPU's flags, so each CPU
class is checked on any machine.
"""

import numpy as np
import pytest

from keras_sentemb.kernels import cpu_threads
from keras_sentemb.kernels import policy as kernels
from keras_sentemb.kernels.report import kernel_report
from keras_sentemb.kernels import native_bfloat16
from keras_sentemb.kernels import precision
from keras_sentemb.kernels.precision import auto_precision
from tests.numeric import cosines

SENTENCES = ["a man plays the guitar", "the cat sits on the mat", "hello world", "x"]
AVX2 = {"avx", "avx2", "fma"}
# Flags as /proc/cpuinfo writes them, per CPU class.
CPUS = {
    "AVX2-only (AMD Zen 3, Intel Skylake client)": (AVX2, "float32"),
    "AVX-512 without bfloat16 (Intel Skylake server)": (AVX2 | {"avx512f", "avx512_vnni"},
                                                        "float32"),
    "AVX512-BF16 (AMD Zen 4, Intel Cooper Lake)": (AVX2 | {"avx512f", "avx512_bf16"},
                                                   "bfloat16"),
    "AMX (Intel Sapphire Rapids)": (AVX2 | {"avx512f", "avx512_bf16", "amx_bf16", "amx_int8"},
                                    "bfloat16"),
    "Arm with BF16 (Graviton 3)": ({"fp", "asimd", "sve", "bf16"}, "bfloat16"),
    "Arm without BF16 (Graviton 2)": ({"fp", "asimd"}, "float32"),
}


@pytest.fixture(autouse=True)
def auto_unpinned(monkeypatch):
    monkeypatch.delenv(precision.PIN_ENV, raising=False)
    monkeypatch.delenv("KERAS_SENTEMB_BFLOAT16", raising=False)
    monkeypatch.setattr(cpu_threads, "has_accelerator", lambda: False)


def fake_cpu(monkeypatch, flags):
    monkeypatch.setattr(native_bfloat16, "cpu_flags", lambda path=None: frozenset(flags))


@pytest.mark.parametrize("cpu", sorted(CPUS))
def test_auto_is_bfloat16_exactly_where_the_cpu_computes_it(cpu, monkeypatch):
    flags, expected = CPUS[cpu]
    assert auto_precision(flags)[0] == expected
    fake_cpu(monkeypatch, flags)
    assert auto_precision()[0] == expected
    assert precision.resolve_encode_precision(None) == expected
    assert kernel_report()["precision"]["computes"] == expected


def test_auto_is_float32_on_accelerators_and_unknown_cpus(monkeypatch):
    fake_cpu(monkeypatch, AVX2 | {"avx512_bf16"})
    monkeypatch.setattr(cpu_threads, "has_accelerator", lambda: True)
    assert auto_precision() == ("float32", "a GPU or TPU computes float32 by default")
    monkeypatch.setattr(cpu_threads, "has_accelerator", lambda: False)
    monkeypatch.setattr(native_bfloat16, "cpu_flags", lambda path=None: None)
    assert auto_precision()[0] == "float32"


def test_the_pin_decides_auto_everywhere(monkeypatch):
    fake_cpu(monkeypatch, AVX2 | {"avx512_bf16"})
    monkeypatch.setenv(precision.PIN_ENV, "float32")
    assert auto_precision() == ("float32", "KERAS_SENTEMB_PRECISION=float32")
    monkeypatch.setenv(precision.PIN_ENV, "int8")
    assert precision.resolve_encode_precision("auto") == "int8"
    # An explicit precision is not pinned.
    assert precision.resolve_encode_precision("bfloat16") == "bfloat16"
    monkeypatch.setenv(precision.PIN_ENV, "fp16")
    with pytest.raises(ValueError, match="KERAS_SENTEMB_PRECISION='fp16'"):
        auto_precision()


def test_encode_defaults_to_auto(tiny_encoder, monkeypatch):
    fake_cpu(monkeypatch, AVX2 | {"avx512f", "avx512_bf16"})
    monkeypatch.setattr(native_bfloat16, "has_native_bfloat16", lambda flags=None: True)
    default = tiny_encoder.encode(SENTENCES)
    np.testing.assert_array_equal(default, tiny_encoder.encode(SENTENCES, precision="bfloat16"))
    assert not np.array_equal(default, tiny_encoder.encode(SENTENCES, precision="float32"))
    fake_cpu(monkeypatch, AVX2)
    np.testing.assert_array_equal(tiny_encoder.encode(SENTENCES),
                                  tiny_encoder.encode(SENTENCES, precision="float32"))
    with pytest.raises(ValueError, match="'auto', 'float32', 'bfloat16', 'int8'"):
        tiny_encoder.encode(SENTENCES, precision="float16")


def test_evaluation_encodes_in_float32_whatever_auto_is(tiny_encoder, monkeypatch):
    fake_cpu(monkeypatch, AVX2 | {"avx512f", "avx512_bf16"})
    monkeypatch.setattr(native_bfloat16, "has_native_bfloat16", lambda flags=None: True)
    assert precision.reproducible(tiny_encoder.encode, {"batch_size": 2}) == {
        "batch_size": 2, "precision": "float32"}
    assert precision.reproducible(tiny_encoder.encode, {"precision": "int8"}) == {
        "precision": "int8"}
    assert precision.reproducible(lambda sentences: None, {}) == {}


def test_bfloat16_stays_within_the_stated_cosine_of_float32(default_encoder, monkeypatch):
    # On the bundled STS-B sentences, bfloat16 computed as bfloat16 on any CPU.
    from keras_sentemb.data.resources import bundled_sts_dir
    from keras_sentemb.evaluation.sts import load_sts_pairs

    monkeypatch.setenv("KERAS_SENTEMB_BFLOAT16", "force")
    pairs = load_sts_pairs(bundled_sts_dir(), "stsb", "dev")
    sentences = sorted({s for a, b, _ in pairs for s in (a, b)})[:600]
    full = default_encoder.encode(sentences, precision="float32")
    half = default_encoder.encode(sentences, precision="bfloat16")
    assert cosines(half, full).min() >= precision.BFLOAT16_MIN_COSINE
