"""`benchmarks/gpu.py --smoke`: the GPU suite runs end to end on a CPU and writes JSONL."""

import json
import subprocess
import sys

from tests.conftest import REPO


def test_gpu_suite_smoke_writes_one_record_per_configuration(tmp_path):
    out = tmp_path / "gpu.jsonl"
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu.py"), "--smoke", "--output", str(out)],
        capture_output=True, text=True, timeout=1200, cwd=str(REPO),
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["task"], r["mode"]) for r in records] == [
        (task, mode) for task in ("encode", "train_mnrl", "train_ct")
        for mode in ("fp32", "mixed_xla")
    ]
    for r in records:
        assert r["smoke"] and r["batch"] == 8 and r["sequences_per_s"] > 0
        assert r["achieved_tflops"] > 0 and r["device"]
        # No peak is known for a CPU: no MFU is made up.
        assert (r["mfu"] is None) == (r["peak_tflops"] is None)
        if r["task"] != "encode":
            assert r["sequences_per_s"] == 2 * r["examples_per_s"] or abs(
                r["sequences_per_s"] - 2 * r["examples_per_s"]) < 0.2
