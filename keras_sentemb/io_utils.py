"""Writing files and model folders so that a crash or a full disk never leaves half of one.

Writers of one folder never meet: a training run, a save and an export each
hold the folder's lock (`folder_lock`, `.NAME.lock` beside it) while they
write, and a second writer is refused in one line; an export reading a
folder that another process is writing is refused the same way
(`reading_folder`). A lock left by a process killed with `kill -9` is taken
over by the next writer with a one-line notice.
"""

import contextlib
import errno
import logging
import os
import shutil
import tempfile
import threading
import uuid
from pathlib import Path

logger = logging.getLogger(__name__)

# Files that mark a folder as a model (keras_sentemb, Hugging Face or keras-hub).
MODEL_MARKERS = ("sentemb_config.json", "config.json", "saved_model.pb", "sentemb_static.json",
                 "modules.json")


def looks_like_model(folder):
    folder = Path(folder)
    return any((folder / name).is_file() for name in MODEL_MARKERS)


def check_new_folder(path, overwrite=True, what="output"):
    """Raise unless `path` can become a model folder (without writing anything).

    A missing path needs a writable existing ancestor; an existing one must be
    a folder that is empty or already a model (replaced only with
    `overwrite`). Never a file, never a folder of other things.
    """
    path = Path(os.fspath(path)).absolute()
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"{what} {str(path)!r} exists and is a file, not a folder.")
        if any(path.iterdir()):
            if not looks_like_model(path):
                raise ValueError(
                    f"{what} {str(path)!r} is a folder holding other files, not a model; "
                    "choose a new or empty folder."
                )
            if not overwrite:
                raise FileExistsError(
                    f"{what} {str(path)!r} already holds a model (pass overwrite to replace it)."
                )
    parent = path if path.exists() else path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"{what} {str(path)!r} cannot be created: {parent} is a file.")
    try:  # a real probe: permission bits say nothing for root or odd filesystems
        os.rmdir(tempfile.mkdtemp(prefix=".sentemb-probe-", dir=parent))
    except OSError as e:
        raise ValueError(
            f"{what} {str(path)!r} cannot be written: creating a folder in {parent} "
            f"failed ({e.strerror or e})."
        ) from None
    return path


class FolderBusyError(ValueError):
    """Another process is writing the folder (one line: the folder, the process, what to do)."""


# Locks this process holds: folder path -> [lock file, shared, depth, what, nested_training].
_HELD = {}
_HELD_GUARD = threading.Lock()


def lock_file(path):
    """`.NAME.lock` beside the folder `path` (which need not exist)."""
    path = os.path.abspath(os.fspath(path))
    return os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.lock")


def _holder(text):
    """`(pid, what)` of a lock file's text `pid N WHAT`, or `(None, text)`."""
    parts = text.split(maxsplit=2)
    if len(parts) >= 2 and parts[0] == "pid" and parts[1].isdigit():
        return int(parts[1]), parts[2] if len(parts) > 2 else "process"
    return None, text or "process"


def process_alive(pid):
    """Whether process `pid` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _busy(path, text):
    pid, what = _holder(text)
    who = f"another {what} (pid {pid})" if pid is not None else f"another {what}"
    return FolderBusyError(
        f"{path} is being written by {who}; wait for it to finish or choose another folder."
    )


def _take_over(path, handle, text):
    """The notice and the clean-up when the lock's last holder ended without releasing it."""
    pid, what = _holder(text)
    if pid is None or pid == os.getpid():
        return
    alive = process_alive(pid)
    logger.warning("taking over the lock of %s left by pid %d (%s, %s)", path, pid, what,
                   "still running but no longer holding it" if alive
                   else "no longer running: killed?")
    if alive:
        return
    parent, name = os.path.dirname(path), os.path.basename(path)
    with contextlib.suppress(OSError):  # its half-written folders (`atomic_folder`)
        for other in os.listdir(parent):
            if other.startswith((f".{name}.tmp-{pid}-", f".{name}.old-{pid}-")):
                shutil.rmtree(os.path.join(parent, other), ignore_errors=True)


@contextlib.contextmanager
def folder_lock(path, what="writer", shared=False, nested_training=False):
    """Hold the lock of the folder `path` while the block writes (or, `shared`, reads) it.

    The lock is `flock` on `.NAME.lock` beside the folder, which the
    operating system releases when the process ends however it ends. The
    file names the holder (`pid N WHAT`) while it is held and is emptied
    when released, so a holder that was killed (`kill -9`) left its pid
    there: the next writer takes the lock over and says so in one line (a
    warning naming that pid), removing that process's half-written folders.
    Writers exclude each other and readers; readers (`shared`) exclude
    writers only. Within one process the lock is re-entrant (a training run
    saves its model into the folder it holds), except that a second training
    run into a folder is refused there too.

    Args:
        path: str or path. The folder.
        what: str. What the holder does, as messages name it (`"training
            run"`, `"export"`).
        shared: bool. Take the lock for reading.
        nested_training: bool. A training run of this process may take the
            lock again inside the block (the command line holds the folder
            from before its backup is read, then runs the training).

    Raises:
        FolderBusyError: another process holds the lock (a `ValueError`).
    """
    try:
        import fcntl  # POSIX only: elsewhere folders are written without the lock
    except ImportError:
        fcntl = None
    if path is None or fcntl is None:
        yield
        return
    path = os.path.abspath(os.fspath(path))
    with _HELD_GUARD:
        held = _HELD.get(path)
        if held is not None:
            if what == "training run" and not held[4]:  # one training run per folder
                raise _busy(path, f"pid {os.getpid()} {held[3]}")
            held[2] += 1
    if held is not None:
        try:
            yield
        finally:
            with _HELD_GUARD:
                held[2] -= 1
        return
    lock = lock_file(path)
    if shared and not os.path.exists(lock):
        yield  # no writer holds it (a writer's lock file exists while it writes)
        return
    try:
        os.makedirs(os.path.dirname(lock), exist_ok=True)
        handle = _acquire(fcntl, lock, path, shared)
    except FolderBusyError:
        raise
    except OSError:  # a folder nobody can write: the write itself says why, in one line
        yield
        return
    try:
        if not shared:
            handle.seek(0)
            _take_over(path, handle, handle.read().strip())
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()} {what}")
            handle.flush()
        with _HELD_GUARD:
            _HELD[path] = [handle, shared, 0, what, nested_training]
        try:
            yield
        finally:
            with _HELD_GUARD:
                _HELD.pop(path, None)
            if not shared:  # removed while still held: a clean end leaves no lock file
                with contextlib.suppress(OSError):
                    os.remove(lock)
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()


def _acquire(fcntl, lock, path, shared):
    """The open lock file `lock`, locked (`flock`, not waiting); `FolderBusyError` if held.

    A writer removes the file when it releases it, so a lock taken on a file
    that was removed (or replaced) meanwhile is let go and taken again.
    """
    while True:
        handle = open(lock, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as e:
            handle.seek(0)
            text = handle.read().strip()
            handle.close()
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise _busy(path, text) from None
        try:
            mine = os.fstat(handle.fileno())
            current = os.stat(lock)
            same = (mine.st_ino, mine.st_dev) == (current.st_ino, current.st_dev)
        except FileNotFoundError:
            same = False
        if same:
            return handle
        handle.close()
        if shared and not os.path.exists(lock):
            return open(os.devnull, encoding="utf-8")  # the writer finished meanwhile


def reading_folder(path, what="export"):
    """`folder_lock(path, shared=True)` for a local model folder (else nothing): a reader
    of a folder that another process is writing is refused in one line."""
    if path is None or not os.path.isdir(os.fspath(path)):
        return contextlib.nullcontext()
    return folder_lock(path, what, shared=True)


@contextlib.contextmanager
def atomic_folder(path, overwrite=True):
    """Yield a temporary sibling folder; move it to `path` once complete.

    Everything is written into `.NAME.tmp-*` next to `path`. Only when the
    block finishes is it renamed into place (replacing an earlier model at
    `path` with `overwrite`: the old folder is renamed aside first and
    deleted after). A crash or a kill inside the block leaves `path` as it
    was: the earlier model, if any, stays loadable.

    Args:
        path: str or path. The final folder.
        overwrite: bool. Replace an existing model folder. Defaults to `True`.
    """
    final = check_new_folder(path, overwrite, what="folder")
    final.parent.mkdir(parents=True, exist_ok=True)
    with folder_lock(final, "save"):
        tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp = final.parent / f".{final.name}.tmp-{tag}"
        tmp.mkdir()
        try:
            yield tmp
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if final.exists():
            old = final.parent / f".{final.name}.old-{tag}"
            os.rename(final, old)
            os.rename(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, final)


# Why a write failed for lack of room, by errno.
DISK_FULL_CAUSES = {
    errno.ENOSPC: "no space left on device",
    errno.EFBIG: "file too large",
    errno.EDQUOT: "disk quota exceeded",
}


def _disk_full_patterns():
    """(pattern, cause) pairs for the messages that wrap a disk-full errno.

    TensorFlow's file system (`OutOfRangeError` / `ResourceExhaustedError`
    from `SaveV2` or `GFile`), h5py (`errno = 27, error message = 'File too
    large'`) and safetensors (`File too large (os error 27)`) keep the
    operating system's text or number in their own exception types.
    """
    patterns = []
    for number, cause in DISK_FULL_CAUSES.items():
        text = os.strerror(number)
        patterns.append((text.lower(), cause))
        patterns.append((f"errno = {number},", cause))
        patterns.append((f"os error {number})", cause))
    return patterns


def disk_full_cause(error):
    """Why `error` says a write failed for lack of room, or None when it does not.

    Recognises an `OSError` whose errno is ENOSPC (no space left), EFBIG (a
    file larger than the system allows, e.g. `ulimit -f`) or EDQUOT (quota),
    and the exceptions TensorFlow, h5py and safetensors raise for them (by
    their message), also where another exception wraps one (`__cause__`,
    `__context__`). Anything else, a bug included, is not one of them.

    Args:
        error: BaseException. The exception a write raised.

    Returns:
        str or None. `"no space left on device"`, `"file too large"` or
        `"disk quota exceeded"`.

    Examples:

    >>> import errno
    >>> disk_full_cause(OSError(errno.ENOSPC, "No space left on device"))
    'no space left on device'
    >>> disk_full_cause(RuntimeError("Error while serializing: File too large (os error 27)"))
    'file too large'
    >>> disk_full_cause(ValueError("shapes do not match")) is None
    True
    """
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in DISK_FULL_CAUSES:
            return DISK_FULL_CAUSES[error.errno]
        text = str(error).lower()
        for pattern, cause in _disk_full_patterns():
            if pattern in text:
                return cause
        error = error.__cause__ or error.__context__
    return None


def write_file_atomic(path, write, mode="wb", encoding=None):
    """Write `path` whole or not at all: a temporary sibling, renamed when complete.

    `write(f)` writes the content to the open temporary file. If it raises
    (a full disk, an interruption), the temporary file is removed and `path`
    is left as it was.

    Args:
        path: str or path. The file to write.
        write: callable. Called with the open file.
        mode: str. `"wb"` or `"w"`. Defaults to `"wb"`.
        encoding: str or None. The text encoding in mode `"w"`. Defaults to
            None.

    Examples:

    ```python
    write_file_atomic("report.json", lambda f: f.write(text), mode="w", encoding="utf-8")
    ```
    """
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, mode, encoding=encoding) as f:
            write(f)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


# An upper bound of what an HDF5 weights file (Keras' `.weights.h5`) adds to
# its tensors' bytes: about 2.5 KiB of metadata per variable was measured.
H5_BYTES_PER_VARIABLE = 4096
H5_BASE_BYTES = 65536


def h5_weights_size(variables):
    """An upper bound of the size of the `.weights.h5` file that holds `variables`.

    Args:
        variables: list of Keras variables (anything with `shape` and `dtype`).

    Returns:
        int. Bytes.
    """
    import numpy as np

    data = sum(int(np.prod(v.shape)) * np.dtype(getattr(v.dtype, "name", v.dtype)).itemsize
               for v in variables)
    return data + H5_BYTES_PER_VARIABLE * len(variables) + H5_BASE_BYTES


def check_room(path, nbytes):
    """Raise the operating system's error now when `nbytes` cannot be written to `path`.

    h5py may crash the process (a segmentation fault) when the disk fills up,
    or the file-size limit (`ulimit -f`) is reached, in the middle of writing
    a weights file; this check, made before the write, turns the foreseeable
    cases into an `OSError` with errno EFBIG (larger than the file-size
    limit) or ENOSPC (larger than the free space of the file system).

    Args:
        path: str or path. The file about to be written.
        nbytes: int. Its size, or an upper bound of it.

    Raises:
        OSError: errno EFBIG or ENOSPC, naming `path`.
    """
    path = os.fspath(path)
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    except (ImportError, OSError, ValueError):  # not POSIX
        soft = None
    if soft is not None and soft != resource.RLIM_INFINITY and nbytes > soft:
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG), path)
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    try:
        stats = os.statvfs(folder)
    except (AttributeError, OSError):  # no statvfs here, or a file system without one
        return
    blocks = stats.f_bfree if hasattr(os, "geteuid") and os.geteuid() == 0 else stats.f_bavail
    if nbytes > blocks * stats.f_frsize:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


class _StreamOnly:
    """A file seen only through `write`, so that numpy writes it with Python's I/O.

    `np.save` on a real file writes with C `fwrite`, whose short write on a
    full disk is reported without its errno ("N requested and M written");
    through Python's file object the `OSError` keeps it (ENOSPC, EFBIG).
    """

    def __init__(self, f):
        self._f = f

    def write(self, data):
        return self._f.write(data)


def save_npy(f, array):
    """`np.save(f, array)` whose write errors keep their errno (see `_StreamOnly`).

    Args:
        f: an open binary file.
        array: the array to write in `.npy` format.
    """
    import numpy as np

    np.save(_StreamOnly(f), array)
