"""benchmarks' `--max-isa avx2`: the environment both sides start with, recorded in every result."""

import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.helpers.processes import load_benchmark


def test_capped_run_restarts_with_every_library_capped(monkeypatch):
    common = load_benchmark("_common")
    calls = []
    monkeypatch.setattr(common.os, "execve", lambda exe, argv, env: calls.append((argv, env)))
    monkeypatch.delenv(common.MAX_ISA_MARK, raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    common.apply_max_isa("avx2")
    (argv, env), = calls
    assert env[common.MAX_ISA_MARK] == "avx2"
    for key in ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY"):
        assert env[key].lower() == "avx2"
    assert env["XLA_FLAGS"] == "--xla_dump_to=/tmp/x --xla_cpu_max_isa=AVX2"  # added, not replaced
    # Already capped (the restarted process), or no cap asked: runs on.
    monkeypatch.setenv(common.MAX_ISA_MARK, "avx2")
    common.apply_max_isa("avx2")
    common.apply_max_isa(None)
    assert len(calls) == 1
    assert common.cpu_info()["max_isa"] == "avx2"
    monkeypatch.delenv(common.MAX_ISA_MARK)
    assert common.cpu_info()["max_isa"] is None


@pytest.mark.parametrize("script", ["ct_train_vs_st", "encode_process"])
def test_the_speed_scripts_take_the_cap(script):
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / f"{script}.py"), "--help"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "--max-isa {avx2}" in out.stdout


def _assembled_disassembly(tmp_path, instruction):
    import shutil

    if not (shutil.which("as") and shutil.which("objdump")):
        pytest.skip("needs binutils (as, objdump)")
    (tmp_path / "k.s").write_text(f"{instruction}\n")
    subprocess.run(["as", "-o", str(tmp_path / "k.o"), str(tmp_path / "k.s")], check=True)
    return subprocess.run(["objdump", "-d", str(tmp_path / "k.o")], capture_output=True,
                          text=True, check=True).stdout


def test_the_register_scan_tells_avx512_from_avx2_code(tmp_path):
    common = load_benchmark("_common")
    assert common.widest_vector_registers(
        _assembled_disassembly(tmp_path, "vaddps %zmm1, %zmm2, %zmm3")) == "zmm"
    assert common.widest_vector_registers(
        _assembled_disassembly(tmp_path, "vfmadd231ps %ymm1, %ymm2, %ymm3")) == "ymm"
    assert common.widest_vector_registers("nop") is None


def test_xla_code_under_the_avx2_cap_has_no_avx512_registers():
    # On an AVX-512 CPU this is what fails if the cap stops reaching XLA's code
    # generation; on an AVX2-only CPU the code is AVX2 with or without it.
    import shutil

    if shutil.which("objdump") is None:
        pytest.skip("needs binutils' objdump")
    common = load_benchmark("_common")
    env = dict(__import__("os").environ)
    env["XLA_FLAGS"] = common.MAX_ISA_ENV["avx2"]["XLA_FLAGS"]
    assert common.xla_vector_registers(env) in ("ymm", "xmm")
