"""benchmarks' `--max-isa avx2`: the environment both sides start with, recorded in every result."""

import subprocess
import sys

import pytest

from tests.benchmarks.test_methods_table import REPO, load


def test_capped_run_restarts_with_every_library_capped(monkeypatch):
    common = load("_common")
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
