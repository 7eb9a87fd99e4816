"""A full disk is one line naming the path and the cause, and nothing half-written stays.

The disk is "filled" with a file-size limit (`ulimit -f`, RLIMIT_FSIZE) in a
child process that ignores SIGXFSZ, so that a write past the limit fails
with EFBIG ("file too large") as a full disk fails with ENOSPC.
"""

import errno
import json
import os
import subprocess
import sys

import pytest

from keras_sentemb import cli
from keras_sentemb import io_utils
from keras_sentemb.io_utils import check_room
from keras_sentemb.io_utils import disk_full_cause
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(not hasattr(os, "statvfs"), reason="POSIX only")


@pytest.mark.parametrize("error, cause", [
    (OSError(errno.ENOSPC, "No space left on device"), "no space left on device"),
    (OSError(errno.EFBIG, "File too large", "v.npy"), "file too large"),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), "disk quota exceeded"),
    # TensorFlow's SaveV2 / GFile (an OpError subclass, by message).
    (RuntimeError("OUT_OF_RANGE: /x/variables/variables.data-00000-of-00001.tempstate; "
                  "File too large [Op:SaveV2]"), "file too large"),
    (RuntimeError("RESOURCE_EXHAUSTED: x; No space left on device"), "no space left on device"),
    # h5py and safetensors.
    (OSError("Unable to synchronously write (file write failed: time = ..., filename = 'a.h5', "
             "file descriptor = 4, errno = 28, error message = 'No space left on device')"),
     "no space left on device"),
    (Exception("Error while serializing: I/O error: File too large (os error 27)"), "file too large"),
])
def test_disk_full_errors_are_recognised_whoever_raises_them(error, cause):
    assert disk_full_cause(error) == cause


def test_a_wrapped_disk_full_error_is_recognised():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise ValueError("could not save the model") from inner
    except ValueError as outer:
        assert disk_full_cause(outer) == "no space left on device"


@pytest.mark.parametrize("error", [
    ValueError("shapes (2, 3) and (4,) do not match"),
    KeyError("kernel"),
    OSError(errno.EACCES, "Permission denied"),
    RuntimeError("errno = 270, something else"),
])
def test_other_errors_are_not_disk_full(error):
    assert disk_full_cause(error) is None


def test_bugs_stay_tracebacks_and_disk_full_names_the_output():
    args = cli.build_parser().parse_args(["encode", "--model", "m", "--input", "s.txt",
                                          "--output", "v.npy"])
    assert cli.one_line_error(KeyError("kernel"), args) is None
    assert cli.one_line_error(TypeError("unsupported operand"), args) is None
    assert cli.one_line_error(OSError(errno.EFBIG, "File too large", "v.npy.tmp-1"), args) == (
        "cannot write v.npy: file too large")


def test_check_room_refuses_what_cannot_fit(tmp_path, monkeypatch):
    import resource

    check_room(tmp_path / "small.h5", 1000)  # fits
    monkeypatch.setattr(resource, "getrlimit", lambda which: (5000, resource.RLIM_INFINITY))
    with pytest.raises(OSError) as info:
        check_room(tmp_path / "big.h5", 6000)
    assert info.value.errno == errno.EFBIG and info.value.filename == str(tmp_path / "big.h5")
    monkeypatch.setattr(resource, "getrlimit",
                        lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    free = os.statvfs(tmp_path)
    with pytest.raises(OSError) as info:
        check_room(tmp_path / "huge.h5", (free.f_blocks + 1) * free.f_frsize)
    assert info.value.errno == errno.ENOSPC
    assert not list(tmp_path.iterdir())


def test_h5_size_bound_holds_for_a_saved_encoder(tmp_path, tiny_encoder):
    tiny_encoder.save(tmp_path / "m")
    actual = (tmp_path / "m" / "model.weights.h5").stat().st_size
    bound = io_utils.h5_weights_size(tiny_encoder.backbone.weights)
    assert actual <= bound <= 3 * actual


# The child: builds a tiny model and the inputs, then runs each command under
# the file-size limit, in this one process (TensorFlow starts once).
CHILD = """
import contextlib, io, json, os, resource, signal, sys, traceback
sys.path.insert(0, {repo!r})
from keras_sentemb import cli
from tests.conftest import make_tiny_encoder

os.chdir({root!r})
make_tiny_encoder().save("model")
make_tiny_encoder(pooling="max").save("old")
with open("s.txt", "w", encoding="utf-8") as f:
    f.write("a man plays the guitar .\\n" * 4000)
LIMIT = 60000  # the tiny model's weights take about 90 kB, its vectors 512 kB
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
COMMANDS = {{
    "encode": ["encode", "--model", "model", "--input", "s.txt", "--output", "v.npy"],
    "shards": ["encode", "--model", "model", "--input", "s.txt", "--output", "shards/",
               "--shard-size", "3000"],
    "export": ["export", "--model", "model", "--output", "sm"],
    "export_st": ["export", "--model", "model", "--output", "st",
                  "--format", "sentence-transformers"],
    "train": ["train", "ct", "--model", "model", "--train-file", "s.txt", "--output", "old",
              "--overwrite", "--steps", "2", "--batch-size", "8", "--max-length", "16",
              "--dev", "none", "--verbose", "0"],
    "train_no_resume": ["train", "ct", "--model", "model", "--train-file", "s.txt",
                        "--output", "old", "--overwrite", "--no-resume", "--steps", "2",
                        "--batch-size", "8", "--max-length", "16", "--dev", "none",
                        "--verbose", "0"],
}}
results = {{}}
_, HARD = resource.getrlimit(resource.RLIMIT_FSIZE)
for name, argv in COMMANDS.items():
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, HARD))
    err = io.StringIO()
    raised = None
    try:
        with contextlib.redirect_stderr(err):
            code = cli.main(argv)
    except BaseException:
        code, raised = None, traceback.format_exc()
    resource.setrlimit(resource.RLIMIT_FSIZE, (HARD, HARD))
    results[name] = {{"code": code, "stderr": err.getvalue(), "raised": raised,
                     "files": sorted(os.listdir("."))}}
from keras_sentemb.models import SentenceEncoder
results["old_pooling"] = SentenceEncoder.from_preset("old").declared_pooling
print(json.dumps(results))
"""


def _error_lines(stderr):
    return [line for line in stderr.splitlines() if "keras-sentemb: error:" in line]


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_leaves_nothing_half_written(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    child = subprocess.run([sys.executable, "-c", CHILD.format(repo=str(REPO), root=str(tmp_path))],
                           capture_output=True, text=True, env=env, timeout=900)
    assert child.returncode == 0, child.stderr[-5000:]
    results = json.loads(child.stdout.strip().splitlines()[-1])
    for name, path in (("encode", "v.npy"), ("shards", "shards/"), ("export", "sm"),
                       ("export_st", "st"), ("train", "old"), ("train_no_resume", "old")):
        result = results[name]
        assert result["raised"] is None, (name, result["raised"])
        assert result["code"] == 2, (name, result)
        assert "Traceback" not in result["stderr"], (name, result["stderr"])
        lines = _error_lines(result["stderr"])
        assert len(lines) == 1, (name, result["stderr"])
        assert lines[0].endswith(f"keras-sentemb: error: cannot write {path}: file too large"), (
            name, lines)
        # Nothing half-written: no vectors, no export folders, no temporary files.
        files = result["files"]
        assert not {"v.npy", "sm", "st"} & set(files), (name, files)
        assert not [f for f in files if ".tmp" in f], (name, files)
    assert not [f for f in os.listdir(tmp_path / "shards") if ".tmp" in f or f.startswith("embeddings")]
    # The model --overwrite would have replaced is still there, whole.
    assert results["old_pooling"] == "max"
