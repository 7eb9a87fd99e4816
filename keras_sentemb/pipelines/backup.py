"""Backups that survive a kill at any moment, and one training run per output folder.

`TrainingBackup` is a `keras.callbacks.BackupAndRestore` whose files are
written whole or not at all: each epoch's weights go to a new file that is
renamed into place, and the small metadata file that names them is replaced
last, with one atomic rename, so a kill leaves the previous backup intact.
A backup that is damaged anyway (a disk error, a file edited by hand) is
reported in one line and training starts over cleanly, never with a
traceback or with weights from one epoch and the data order of another.

`output_lock` keeps two training runs from writing the same output folder.
"""

import contextlib
import errno
import json
import logging
import os
import shutil
import uuid

import h5py
import keras

from keras_sentemb import compat
from keras_sentemb.io_utils import check_room
from keras_sentemb.io_utils import h5_weights_size
from keras_sentemb.models.folder_inspection import inspect_backup_folder

logger = logging.getLogger(__name__)

METADATA_FILE = compat.BACKUP_METADATA_FILE
WEIGHTS_PATTERN = "epoch-{epoch}.weights.h5"


def _write_json_atomically(path, value):
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _check_weights_file(path):
    """Raise OSError / ValueError unless `path` is a readable Keras weights file."""
    with h5py.File(path, "r") as f:
        def read(name, node):
            if isinstance(node, h5py.Dataset):
                node[()]
        f.visititems(read)


def inspect_backup(backup_dir):
    """`(epoch, weights_path)` of a usable backup, `(0, None)` without one.

    Raises:
        ValueError: the backup exists but is damaged (the message says how),
            or holds a link or names a weights file outside its folder
            (`folder_inspection.UnsafeFolderError`).
    """
    meta = os.path.join(os.fspath(backup_dir), METADATA_FILE)
    if not os.path.isfile(meta):
        return 0, None
    try:
        with open(meta, encoding="utf-8") as f:
            state = json.load(f)
        epoch = int(state["epoch"])
        name = state.get("weights", WEIGHTS_PATTERN.format(epoch=epoch))
        weights = os.path.join(os.fspath(backup_dir), name)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{METADATA_FILE} is unreadable ({type(e).__name__}: {e})") from None
    # Data, never code: no link out of the backup, no weights file outside it.
    inspect_backup_folder(backup_dir, name, meta)
    if epoch < 0:
        raise ValueError(f"{METADATA_FILE} names epoch {epoch}")
    if epoch == 0:
        return 0, None
    if not os.path.isfile(weights):
        raise ValueError(f"{os.path.basename(weights)} is missing")
    try:
        _check_weights_file(weights)
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"{os.path.basename(weights)} is unreadable ({e})") from None
    return epoch, weights


class TrainingBackup(keras.callbacks.BackupAndRestore):
    """`BackupAndRestore` at every epoch end, written atomically.

    Args:
        backup_dir: str. Folder of the backup (created when first written,
            deleted when training ends normally).
        delete_checkpoint: bool. Delete the backup when training finishes.
            Defaults to `True`.

    Examples:

    ```python
    backup = TrainingBackup("out.backup")
    encoder = keras_sentemb.fit_ct("corpus.txt", output="out", callbacks=[backup])
    ```
    """

    def __init__(self, backup_dir, delete_checkpoint=True):
        super().__init__(os.fspath(backup_dir), save_freq="epoch",
                         delete_checkpoint=delete_checkpoint, double_checkpoint=False)
        try:
            self._epoch, self._weights = inspect_backup(self.backup_dir)
        except ValueError as e:
            logger.warning("the backup in %s is damaged (%s); starting over", self.backup_dir, e)
            shutil.rmtree(self.backup_dir, ignore_errors=True)
            self._epoch, self._weights = 0, None

    @property
    def start_epoch(self):
        """The epoch training resumes at (0: no usable backup)."""
        return self._epoch

    def on_train_begin(self, logs=None):
        if self._weights is None:
            return
        if self.model.optimizer is not None and not self.model.optimizer.built:
            self.model.optimizer.build(self.model.trainable_variables)
        self.model.load_weights(self._weights)
        compat.set_initial_epoch(self.model, self._epoch)

    def on_epoch_end(self, epoch, logs=None):
        self._current_epoch = epoch + 1
        os.makedirs(self.backup_dir, exist_ok=True)
        name = WEIGHTS_PATTERN.format(epoch=epoch + 1)
        final = os.path.join(self.backup_dir, name)
        tmp = os.path.join(self.backup_dir, f".{uuid.uuid4().hex[:8]}.{name}")
        variables = list(self.model.weights)
        if self.model.optimizer is not None:
            variables += list(self.model.optimizer.variables)
        try:
            # A clean error instead of h5py's crash when the weights cannot fit.
            check_room(tmp, h5_weights_size(variables))
            self.model.save_weights(tmp, overwrite=True)
            os.replace(tmp, final)
        finally:
            with contextlib.suppress(OSError):
                os.remove(tmp)
        _write_json_atomically(os.path.join(self.backup_dir, METADATA_FILE),
                               {"epoch": epoch + 1, "batch": 0, "weights": name})
        for other in os.listdir(self.backup_dir):
            if other.endswith(".weights.h5") and other != name:
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(self.backup_dir, other))
        self._epoch, self._weights = epoch + 1, final

    def on_train_batch_end(self, batch, logs=None):
        pass  # saved at epoch ends only (the fit_* epochs are `eval_every` steps)


@contextlib.contextmanager
def output_lock(output):
    """Hold an exclusive lock for training into the folder `output`.

    The lock is `.NAME.lock` beside the folder (which may not exist yet),
    taken with `flock`, so the operating system releases it when the process
    ends however it ends: there is never a stale lock to remove by hand.

    Raises:
        ValueError: another process holds the lock.
    """
    try:
        import fcntl  # POSIX only: elsewhere training runs without the lock
    except ImportError:
        fcntl = None
    if output is None or fcntl is None:
        yield
        return

    path = os.path.abspath(os.fspath(output))
    lock = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.lock")
    os.makedirs(os.path.dirname(lock), exist_ok=True)
    with open(lock, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise ValueError(
                f"{path} is being written by another training run ({holder}); wait for it "
                "to finish or choose another output."
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
