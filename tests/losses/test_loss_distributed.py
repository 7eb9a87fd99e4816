"""Losses under tf.distribute.MirroredStrategy on two logical CPU devices.

The checks run in a fresh Python process (`distributed_loss_check.py`):
logical devices must be configured before TensorFlow initializes, which other
test modules in the same pytest run will already have done.

Convention under test (see keras_sentemb.losses.distributed): each replica
computes the loss as the mean over its local anchors with candidates gathered
from all replicas, differentiates `loss / num_replicas_in_sync`, and the
gradients are summed across replicas; this equals single-device training on
the global batch.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
SCRIPT = HERE / "distributed_loss_check.py"

LOSSES = [
    "info_nce",
    "info_nce_hard_negatives",
    "info_nce_symmetric_dot",
    "nt_xent",
    "ct_in_batch",
    "ct_k_negatives",
]


@pytest.fixture(scope="module")
def results():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env["CUDA_VISIBLE_DEVICES"] = ""  # CPU replicas only, even on a GPU machine.
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["KERAS_BACKEND"] = "tensorflow"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)],
        cwd=str(REPO_ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (
        f"distributed check failed (exit {proc.returncode}):\n"
        f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _close(diff, scale, rtol=1e-5):
    return diff <= rtol * max(1.0, abs(scale))


@pytest.mark.parametrize("name", LOSSES)
def test_two_replicas_match_one_device(results, name):
    r = results[f"even/{name}"]
    assert _close(r["loss_diff"], r["loss"]), r
    assert _close(r["grad_diff"], r["grad_scale"]), r


@pytest.mark.parametrize("name", LOSSES)
def test_uneven_shards_gather_and_offsets_are_exact(results, name):
    r = results[f"uneven_sum/{name}"]
    assert _close(r["loss_diff"], r["loss"]), r
    assert _close(r["grad_diff"], r["grad_scale"]), r


def test_controls_detect_wrong_conventions(results):
    unscaled = results["control/unscaled"]
    assert unscaled["grad_diff"] > 0.1 * unscaled["grad_scale"], unscaled
    no_gather = results["control/no_gather"]
    assert no_gather["loss_diff"] > 1e-2, no_gather


@pytest.mark.parametrize("jit_compile", ["False", "auto"])
def test_keras_fit_train_step_convention(results, jit_compile):
    r = results[f"keras_fit/jit_compile={jit_compile}"]
    assert "error" not in r, r.get("error")
    assert _close(r["kernel_diff"], r["grad_scale"]), r
