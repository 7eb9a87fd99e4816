"""MultiWorkerMirroredStrategy: two worker processes on localhost equal one device.

Keras 3 `fit` under a multi-worker strategy fails on scalar step logs
(tensorflow/tensorflow#72388); `BaseTrainer` returns them in the shape that
reduction expects. These checks run the real cluster: two processes with a
TF_CONFIG each, one CPU replica per worker, gRPC collectives over localhost.
"""

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO
from tests.helpers.processes import free_ports, run_two_workers, worker_env
from tests.numeric import assert_moved_alike

SCRIPT = REPO / "tests" / "trainers" / "multi_worker_check.py"


def _run(case, tmp_path):
    single = tmp_path / "single.json"
    ref = subprocess.run([sys.executable, str(SCRIPT), case, str(single), "--single"],
                         env=worker_env(), capture_output=True, text=True, timeout=300)
    assert ref.returncode == 0, ref.stderr[-4000:]
    ports = ",".join(map(str, free_ports(2)))
    outs = [tmp_path / f"worker{i}.json" for i in range(2)]
    run_two_workers(lambda i: [sys.executable, str(SCRIPT), case, str(outs[i]), str(i), ports])
    load = lambda path: json.loads(path.read_text())  # noqa: E731
    return load(single), [load(o) for o in outs]


def _assert_same(one, other, rtol=1e-5, atol=1e-6):
    for a, b in zip(one["weights"], other["weights"]):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=rtol, atol=atol)


@pytest.mark.integration
def test_nan_in_one_workers_shard_skips_the_step_everywhere(tmp_path):
    single, workers = _run("quadratic", tmp_path)
    for run in [single] + workers:
        assert [step["nonfinite"] for step in run["logs"]] == [0.0, 1.0, 1.0]
    assert workers[0] == workers[1]  # the workers agree on logs and weights
    _assert_same(single, workers[0])


@pytest.mark.integration
def test_ct_in_batch_two_workers_equal_one_device(tmp_path):
    single, workers = _run("ct_in_batch", tmp_path)
    _assert_same(workers[0], workers[1], rtol=0, atol=0)
    # SGD on a random encoder: the step's size (not the test) sets the scale
    # of the summation-order differences, so compare them with how far it moved.
    assert_moved_alike(single["start"], single["weights"], workers[0]["weights"], rtol=1e-4,
                       min_moved=1e-4)
    losses = [[step["loss"] for step in run["logs"]] for run in (single, workers[0])]
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-4)
    assert all(step["nonfinite"] == 0.0 for step in workers[0]["logs"])
