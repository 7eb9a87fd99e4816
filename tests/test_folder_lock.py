"""The folder lock (`io_utils.folder_lock`): one writer, readers apart, stale locks taken over."""

import logging
import os
import subprocess
import sys
import time

import pytest

from keras_sentemb import io_utils
from keras_sentemb.io_utils import FolderBusyError
from keras_sentemb.io_utils import folder_lock
from keras_sentemb.io_utils import lock_file
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX file locks")

HOLDER = """
import sys, time
sys.path.insert(0, {repo!r})
from keras_sentemb.io_utils import folder_lock
with folder_lock({path!r}, {what!r}, shared={shared!r}):
    print("held", flush=True)
    sys.stdin.readline()
"""


def _holder(path, what="training run", shared=False):
    """Another process holding the lock of `path` until its stdin gets a line."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER.format(repo=str(REPO), path=str(path), what=what,
                                             shared=shared)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


def _release(process):
    process.stdin.write("\n")
    process.stdin.flush()
    assert process.wait(timeout=60) == 0


def _dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_writer_refuses_another_process_and_leaves_no_lock_file(tmp_path):
    out = tmp_path / "m"
    holder = _holder(out, "export")
    try:
        for what, shared in (("training run", False), ("save", False), ("export", True)):
            with pytest.raises(FolderBusyError) as info:
                with folder_lock(out, what, shared=shared):
                    pass
            assert str(info.value) == (f"{out} is being written by another export (pid "
                                       f"{holder.pid}); wait for it to finish or choose another "
                                       "folder.")
    finally:
        _release(holder)
    assert not os.path.exists(lock_file(out))
    with folder_lock(out, "training run"):
        assert open(lock_file(out)).read() == f"pid {os.getpid()} training run"


def test_readers_share_and_keep_writers_out(tmp_path):
    out = tmp_path / "m"
    open(lock_file(out), "w").close()  # readers lock only a folder that writers locked
    reader = _holder(out, "export", shared=True)
    try:
        with folder_lock(out, "export", shared=True):  # readers share
            pass
        with pytest.raises(FolderBusyError):
            with folder_lock(out, "save"):
                pass
    finally:
        _release(reader)


def test_within_a_process_saves_nest_but_a_second_training_run_is_refused(tmp_path):
    out = tmp_path / "m"
    with folder_lock(out, "training run"):
        with folder_lock(out, "save"), folder_lock(out, "export"):
            pass
        with pytest.raises(FolderBusyError, match=rf"another training run \(pid {os.getpid()}\)"):
            with folder_lock(out, "training run"):
                pass
    with folder_lock(out, "training run", nested_training=True):
        with folder_lock(out, "training run"):  # the command line's run, then its training
            pass


def test_a_stale_lock_is_taken_over_with_one_notice_and_its_leftovers_go(tmp_path, caplog):
    out = tmp_path / "m"
    pid = _dead_pid()
    with open(lock_file(out), "w") as f:
        f.write(f"pid {pid} training run")
    (tmp_path / f".m.tmp-{pid}-abcd1234").mkdir()  # its half-written save
    (tmp_path / ".m.tmp-1-abcd1234").mkdir()  # another process's: kept
    with caplog.at_level(logging.WARNING, logger=io_utils.__name__):
        with folder_lock(out, "training run"):
            pass
    notices = [r.getMessage() for r in caplog.records]
    assert notices == [f"taking over the lock of {out} left by pid {pid} (training run, no "
                       "longer running: killed?)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".m.tmp-1-abcd1234"]


def test_process_alive():
    assert io_utils.process_alive(os.getpid())
    assert not io_utils.process_alive(_dead_pid())
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.time() + 30
    while io_utils.process_alive(zombie.pid) and time.time() < deadline:
        time.sleep(0.05)  # killed and not reaped yet: a zombie counts as ended
    assert not io_utils.process_alive(zombie.pid)
    zombie.wait()
