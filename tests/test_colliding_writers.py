"""Writers that collide, with real processes: one line or a consistent result, never a mix.

A training run holds its output folder's lock (`.NAME.lock`) from before
it reads its backup until its model is saved; saves and exports hold the
lock of the folder they write, and an export holds the folder it reads for
reading. The tests pause a real writer process at a chosen moment (right
after its first backup, right before an export's rename) and run the
colliding commands in another process:

- a resume of the same command while the first run writes the backup,
- an export of the folder the run is writing, and an export into it,
- a second export to the same target,
- the next run after the first was killed with `kill -9`: it takes the
  stale lock over with a one-line notice and resumes from the backup.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, make_tiny_encoder
from tests.helpers.corpora import CORPUS

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX file locks")]

# A writer that stops at one moment until the test lets it go on (`GO` exists).
PAUSED = """
import os, sys, time
sys.path.insert(0, {repo!r})
from keras_sentemb import cli


def wait():
    open({ready!r}, "w").close()
    deadline = time.time() + 600
    while not os.path.exists({go!r}) and time.time() < deadline:
        time.sleep(0.05)


if {where!r} == "backup":  # after the training run's first backup
    from keras_sentemb.pipelines import backup

    original = backup.TrainingBackup.on_epoch_end

    def on_epoch_end(self, epoch, logs=None):
        original(self, epoch, logs)
        if epoch == 0:
            wait()

    backup.TrainingBackup.on_epoch_end = on_epoch_end
else:  # an export, written and verified, just before its rename into place
    from keras_sentemb.export import saved_model

    swap_in = saved_model._swap_in

    def paused_swap_in(*args):
        wait()
        return swap_in(*args)

    saved_model._swap_in = paused_swap_in
sys.exit(cli.main({argv!r}))
"""

# The colliding commands, one after another in one process: exit code and stderr of each.
COMMANDS = """
import contextlib, io, json, logging, sys
sys.path.insert(0, {repo!r})
from keras_sentemb import cli


class CurrentStderr:
    def write(self, text):
        sys.stderr.write(text)

    def flush(self):
        sys.stderr.flush()


logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=CurrentStderr())
results = []
for argv in {commands!r}:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    results.append({{"code": code, "stderr": err.getvalue()}})
print(json.dumps(results))
"""


def _env():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def _paused(tmp_path, argv, where):
    """A writer process paused at `where`; returns (process, go file) once it is there."""
    ready, go = tmp_path / f"ready-{where}", tmp_path / f"go-{where}"
    script = PAUSED.format(repo=str(REPO), ready=str(ready), go=str(go), where=where,
                           argv=[str(a) for a in argv])
    process = subprocess.Popen([sys.executable, "-c", script], env=_env(), cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 600
    while not ready.exists():
        if process.poll() is not None or time.time() > deadline:
            process.kill()
            out, err = process.communicate()
            pytest.fail(f"the writer never reached {where}: {err[-3000:]}")
        time.sleep(0.1)
    return process, go


def _commands(tmp_path, commands):
    script = COMMANDS.format(repo=str(REPO), commands=[[str(a) for a in c] for c in commands])
    done = subprocess.run([sys.executable, "-c", script], env=_env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-5000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _error_lines(stderr):
    return [line for line in stderr.splitlines() if "keras-sentemb: error:" in line]


def _refused(result, *parts):
    lines = _error_lines(result["stderr"])
    assert result["code"] == 2 and len(lines) == 1, result
    assert "Traceback" not in result["stderr"], result["stderr"]
    for part in parts:
        assert part in lines[0], lines[0]


@pytest.fixture
def data(tmp_path):
    make_tiny_encoder().save(tmp_path / "tiny")
    (tmp_path / "corpus.txt").write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    return tmp_path


def _train_argv(root, extra=()):
    return ["train", "simcse", "--model", root / "tiny", "--train-file", root / "corpus.txt",
            "--output", root / "out", "--steps", "8", "--eval-every", "2", "--batch-size", "8",
            "--max-length", "16", "--dev", "none", "--verbose", "0", *extra]


def test_a_training_run_holds_its_folder_against_resumes_exports_and_a_kill(data):
    root = data
    make_tiny_encoder(pooling="max").save(root / "out")  # an earlier model, trained over
    train = _train_argv(root, ["--overwrite"])
    writer, _ = _paused(root, train, "backup")
    assert (root / "out.backup" / "training_metadata.json").is_file()
    results = _commands(root, [
        train,  # the same command again: a resume while the run writes the backup
        ["export", "--model", root / "out", "--output", root / "saved" / "out"],
        ["export", "--model", root / "tiny", "--format", "sentence-transformers",
         "--output", root / "out", "--overwrite"],
    ])
    busy = f"{root / 'out'} is being written by another training run (pid {writer.pid})"
    for result in results:
        _refused(result, busy)
    assert not (root / "saved").exists()
    # The earlier model is still whole; the run's backup was neither read nor cleared.
    assert json.loads((root / "out.backup" / "training_metadata.json").read_text())["epoch"] == 1
    assert (root / "out" / "sentemb_config.json").is_file()

    os.kill(writer.pid, signal.SIGKILL)  # the run dies holding the lock
    writer.communicate()
    assert "pid" in (root / ".out.lock").read_text()
    (after,) = _commands(root, [train])
    assert after["code"] == 0, after["stderr"][-3000:]
    notices = [line for line in after["stderr"].splitlines() if "taking over the lock" in line]
    assert len(notices) == 1 and f"pid {writer.pid}" in notices[0], after["stderr"]
    assert "no longer running" in notices[0]
    assert "resuming the interrupted run" in after["stderr"]
    assert not (root / ".out.lock").exists() and not (root / "out.backup").exists()
    assert (root / "out" / "training_report.json").is_file()  # the resumed run's model, whole
    assert not [p for p in root.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_two_exports_to_one_target(data):
    root = data
    export = ["export", "--model", root / "tiny", "--output", root / "saved" / "tiny"]
    first, go = _paused(root, export, "export")
    (second,) = _commands(root, [export])
    _refused(second, f"{root / 'saved' / 'tiny'} is being written by another export "
                     f"(pid {first.pid})")
    go.touch()
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-3000:]
    assert sorted(p.name for p in (root / "saved" / "tiny").iterdir()) == ["1"]
    assert (root / "saved" / "tiny" / "1" / "saved_model.pb").is_file()
    assert not (root / "saved" / ".tiny.lock").exists()
    (again,) = _commands(root, [export])  # the lock went with its holder: version 2
    assert again["code"] == 0, again["stderr"][-3000:]
    assert sorted(p.name for p in (root / "saved" / "tiny").iterdir()) == ["1", "2"]
