"""bfloat16 falls back to float32 on CPUs without native bfloat16."""

import numpy as np
import pytest

from keras_sentemb.kernels import native_bfloat16
from tests.conftest import make_tiny_encoder

AVX2_ONLY = "fpu sse sse2 avx avx2 fma f16c"
AVX512_BF16 = AVX2_ONLY + " avx512f avx512bw avx512_vnni avx512_bf16"


@pytest.fixture
def cpu(monkeypatch, tmp_path):
    """Pretend the host is CPU-only with the given /proc/cpuinfo flags."""

    def set_flags(flags, key="flags"):
        path = tmp_path / "cpuinfo"
        path.write_text(f"processor\t: 0\nmodel name\t: Test CPU\n{key}\t\t: {flags}\n\n")
        monkeypatch.setattr(native_bfloat16, "CPUINFO", str(path))
        monkeypatch.setattr(native_bfloat16, "has_accelerator", lambda: False)
        monkeypatch.setattr(native_bfloat16, "_notified", False)
        monkeypatch.delenv("KERAS_SENTEMB_BFLOAT16", raising=False)

    return set_flags


def test_flags_decide(cpu):
    cpu(AVX2_ONLY)
    assert "avx2" in native_bfloat16.cpu_flags()
    assert not native_bfloat16.has_native_bfloat16()
    cpu(AVX512_BF16)
    assert native_bfloat16.has_native_bfloat16()
    cpu(AVX2_ONLY + " amx_bf16 amx_tile")
    assert native_bfloat16.has_native_bfloat16()
    cpu("fp asimd bf16 sve", key="Features")  # Arm
    assert native_bfloat16.has_native_bfloat16()
    assert not native_bfloat16.has_native_bfloat16(flags=["avx512f"])


def test_unreadable_cpuinfo_keeps_the_choice(monkeypatch, tmp_path):
    monkeypatch.setattr(native_bfloat16, "has_accelerator", lambda: False)
    assert native_bfloat16.cpu_flags(str(tmp_path / "missing")) is None
    monkeypatch.setattr(native_bfloat16, "CPUINFO", str(tmp_path / "missing"))
    assert native_bfloat16.has_native_bfloat16()


def test_fallback_with_one_notice(cpu, capsys, monkeypatch):
    cpu(AVX2_ONLY)
    assert native_bfloat16.effective_precision("bfloat16") == "float32"
    assert native_bfloat16.effective_precision("bfloat16") == "float32"
    assert native_bfloat16.effective_precision("float32") == "float32"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "float32" in err and "bfloat16" in err
    monkeypatch.setenv("KERAS_SENTEMB_BFLOAT16", "force")
    assert native_bfloat16.effective_precision("bfloat16") == "bfloat16"
    cpu(AVX512_BF16)
    assert native_bfloat16.effective_precision("bfloat16") == "bfloat16"
    assert capsys.readouterr().err == ""


def test_encode_in_bfloat16_computes_float32_without_native_support(cpu):
    encoder = make_tiny_encoder()
    sentences = ["the cat sat", "a dog ran far away"]
    fp32 = encoder.encode(sentences, precision="float32")
    cpu(AVX2_ONLY)
    np.testing.assert_array_equal(encoder.encode(sentences, precision="bfloat16"), fp32)
    assert not encoder._precision_twins  # no bfloat16 copy was built
    cpu(AVX512_BF16)
    bf16 = encoder.encode(sentences, precision="bfloat16")
    assert "bfloat16" in encoder._precision_twins
    cosine = np.sum(bf16 * fp32, 1) / np.linalg.norm(bf16, axis=1) / np.linalg.norm(fp32, axis=1)
    assert np.all(cosine > 0.99) and not np.array_equal(bf16, fp32)
