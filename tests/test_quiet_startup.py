"""The command line starts quietly: TensorFlow's C++ start-up notices are hidden, errors are not."""

import os
import subprocess
import sys

import numpy as np
import pytest

from keras_sentemb import quiet_startup
from keras_sentemb.quiet_startup import NOISE
from keras_sentemb.quiet_startup import take_verbose_flag
from tests.conftest import REPO
from tests.conftest import make_tiny_encoder

# Seen on a CPU-only machine with TensorFlow 2.21 (timestamps and thread ids vary).
STARTUP_LINES = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795618167.346535   19868 port.cc:153] oneDNN custom operations are on. "
    "You may see slightly different numerical results due to floating-point round-off errors "
    "from different computation orders. To turn them off, set the environment variable "
    "`TF_ENABLE_ONEDNN_OPTS=0`.",
    "I0000 00:00:1795618167.347281   19868 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.",
    "E0000 00:00:1795618184.207535   19868 cuda_platform.cc:52] failed call to cuInit: INTERNAL: "
    "CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
]
REAL_ERROR = ("E0000 00:00:1795618184.207535   19868 op_kernel.cc:1857] OP_REQUIRES failed at "
              "save_restore_v2_ops.cc:189 : NOT_FOUND: Key dense/kernel not found in checkpoint")


def _without_user_level(monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    monkeypatch.delenv(quiet_startup._OWN_LEVEL_MARK, raising=False)


@pytest.mark.parametrize("line", STARTUP_LINES)
def test_startup_notices_are_noise(line):
    assert NOISE.match(line)


@pytest.mark.parametrize("line", [
    REAL_ERROR,
    "keras-sentemb: error: input file not found: s.txt",
    "Traceback (most recent call last):",
    "F0000 00:00:1795618184.207535   19868 check.cc:12] Check failed: x",
])
def test_real_errors_are_not_noise(line):
    assert not NOISE.match(line)


def _stderr_of(body, env_level=None, verbose=False):
    """Stderr of a fresh Python process that runs `body` inside the filter.

    A process of its own: in the test process other threads (a previous
    test's TensorFlow or tf.data threads) may write to descriptor 2 while the
    filter owns it, and their lines would be counted here.
    """
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", quiet_startup._OWN_LEVEL_MARK)}
    if env_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = env_level
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    script = (
        "import os, sys\n"
        "from keras_sentemb.quiet_startup import quiet_tensorflow_startup\n"
        "def fd(text): os.write(2, text.encode())\n"
        f"LINES = {STARTUP_LINES!r}\n"
        f"REAL_ERROR = {REAL_ERROR!r}\n"
        f"{body}\n"
        "print('level', os.environ.get('TF_CPP_MIN_LOG_LEVEL'))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode in (0, 2), out.stderr
    return out.stderr, out.stdout


def test_the_filter_drops_notices_and_passes_everything_else():
    err, out = _stderr_of(
        "with quiet_tensorflow_startup():\n"
        "    assert os.environ['TF_CPP_MIN_LOG_LEVEL'] == '2'\n"
        "    fd('\\n'.join(LINES[:2]) + '\\n')\n"
        "    fd(REAL_ERROR + '\\n')\n"
        "    print('usage: from Python', file=sys.stderr)\n"
        "    fd(LINES[3] + '\\nno newline at the end')\n"
    )
    # Python's writes and the descriptor's are not ordered against each other.
    assert sorted(err.splitlines()) == sorted([REAL_ERROR, "usage: from Python", "no newline at the end"])
    assert out == "level 2\n"  # the command line's level stays for the rest of the run


def test_the_filter_ends_with_the_block():
    err, _ = _stderr_of(
        "try:\n"
        "    with quiet_tensorflow_startup():\n"
        "        raise SystemExit(2)\n"
        "except SystemExit:\n"
        "    pass\n"
        "fd(LINES[0] + '\\n')\n"
    )
    assert err == STARTUP_LINES[0] + "\n"


@pytest.mark.parametrize("verbose, level", [(True, None), (False, "0")])
def test_verbose_or_a_users_level_filters_nothing(verbose, level):
    err, out = _stderr_of(
        f"with quiet_tensorflow_startup(verbose={verbose}):\n"
        "    fd(LINES[3] + '\\n')\n",
        env_level=level,
    )
    assert err == STARTUP_LINES[3] + "\n"
    assert out == f"level {level}\n"


def test_verbose_flag_anywhere_but_trains_keras_verbosity_stays():
    assert take_verbose_flag(["--verbose", "encode", "--model", "m"]) == (["encode", "--model", "m"], True)
    assert take_verbose_flag(["encode", "--model", "m", "--verbose"]) == (["encode", "--model", "m"], True)
    assert take_verbose_flag(["train", "ct", "--verbose", "0"]) == (["train", "ct", "--verbose", "0"], False)
    assert take_verbose_flag(["train", "ct", "--verbose", "--steps", "3"]) == (
        ["train", "ct", "--steps", "3"], True)
    assert take_verbose_flag(["encode", "--model", "m"]) == (["encode", "--model", "m"], False)


def _encode(tmp_path, *extra, model=None):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    (tmp_path / "s.txt").write_text("A man plays a guitar.\nA woman reads.\n", encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "keras_sentemb", "encode", "--model", model or str(tmp_path / "tiny"),
         "--input", str(tmp_path / "s.txt"), "--output", str(tmp_path / "v.npy"), *extra],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )


@pytest.mark.slow
def test_encode_prints_no_tensorflow_chatter_unless_verbose(tmp_path):
    make_tiny_encoder().save(tmp_path / "tiny")
    quiet = _encode(tmp_path)
    assert quiet.returncode == 0, quiet.stderr
    assert np.load(tmp_path / "v.npy").shape[0] == 2
    for word in ("absl::InitializeLog", "oneDNN", "cuda drivers", "cuInit", "I0000", "E0000"):
        assert word not in quiet.stderr, quiet.stderr
    assert "wrote" in quiet.stderr + quiet.stdout

    missing = _encode(tmp_path, model=str(tmp_path / "no-such-model"))
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        line for line in missing.stderr.strip().splitlines() if line.startswith("keras-sentemb: error:")
    ] and "no-such-model" in missing.stderr

    loud = _encode(tmp_path, "--verbose")
    assert loud.returncode == 0, loud.stderr
    if not any(NOISE.match(line) for line in loud.stderr.splitlines()):
        pytest.skip("this TensorFlow build prints no start-up notices to hide")


@pytest.mark.slow
def test_training_prints_no_tensorflow_error_lines(tmp_path):
    # The input pipeline once framed ragged batches with a ragged concat,
    # whose int64 transpose made oneDNN print an "E0000 ... DT_INT64" line.
    make_tiny_encoder().save(tmp_path / "tiny")
    (tmp_path / "t.txt").write_text(
        "\n".join(f"sentence number {i} about a cat" for i in range(64)) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-m", "keras_sentemb", "train", "ct", "--model", str(tmp_path / "tiny"),
         "--train-file", str(tmp_path / "t.txt"), "--output", str(tmp_path / "out"),
         "--steps", "2", "--batch-size", "8", "--max-length", "16", "--dev", "none"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900,
    )
    assert out.returncode == 0, out.stderr
    for word in ("E0000", "DT_INT64", "oneDNN", "I0000"):
        assert word not in out.stderr, out.stderr
