"""Backups that survive a kill at any moment, and one training run per output folder.

`TrainingBackup` is a `keras.callbacks.BackupAndRestore` whose files are
written whole or not at all: each epoch's weights go to a new file that is
renamed into place, and the small metadata file that names them is replaced
last, with one atomic rename, so a kill leaves the previous backup intact.
A backup that is damaged anyway (a disk error, a file edited by hand) is
reported in one line and training starts over cleanly, never with a
traceback or with weights from one epoch and the data order of another.
A backup that cannot be written for lack of room (a full disk, a quota)
leaves the last whole backup as it was: training goes on, with one warning
line, and each later epoch tries again.

`output_lock` keeps two training runs from writing the same output folder.
"""

import contextlib
import json
import logging
import os
import shutil
import uuid

import h5py
import keras

from keras_sentemb import compat
from keras_sentemb.io_utils import check_room
from keras_sentemb.io_utils import disk_full_cause
from keras_sentemb.io_utils import folder_lock
from keras_sentemb.io_utils import h5_weights_size
from keras_sentemb.models.folder_inspection import inspect_backup_folder

logger = logging.getLogger(__name__)

METADATA_FILE = compat.BACKUP_METADATA_FILE
WEIGHTS_PATTERN = "epoch-{epoch}.weights.h5"


def _write_json_atomically(path, value):
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(value, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)


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
        self._warned_full = False
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
            _write_json_atomically(os.path.join(self.backup_dir, METADATA_FILE),
                                   {"epoch": epoch + 1, "batch": 0, "weights": name})
        except Exception as error:  # noqa: BLE001 (only a full disk is let through)
            cause = disk_full_cause(error)
            if cause is None:
                raise
            with contextlib.suppress(OSError):
                if os.path.basename(final) != os.path.basename(self._weights or ""):
                    os.remove(final)  # written, but the metadata could not name it
            self._disk_full(epoch + 1, cause)
            return
        finally:
            with contextlib.suppress(OSError):
                os.remove(tmp)
        for other in os.listdir(self.backup_dir):
            if other.endswith(".weights.h5") and other != name:
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(self.backup_dir, other))
        self._epoch, self._weights = epoch + 1, final

    def _disk_full(self, epoch, cause):
        """Training goes on; the last whole backup stays (one warning per run)."""
        if self._warned_full:
            return
        self._warned_full = True
        kept = (f"the backup of epoch {self._epoch} is kept" if self._weights is not None
                else "no backup was written yet")
        logger.warning("cannot write the backup of epoch %d in %s: %s; training goes on and "
                       "%s (each later epoch tries again)", epoch, self.backup_dir, cause, kept)

    def on_train_batch_end(self, batch, logs=None):
        pass  # saved at epoch ends only (the fit_* epochs are `eval_every` steps)


def output_lock(output):
    """Hold the lock of the folder `output` for a training run (`io_utils.folder_lock`).

    The lock is `.NAME.lock` beside the folder (which may not exist yet),
    taken with `flock`, so the operating system releases it when the process
    ends however it ends; the next run takes over the lock a killed run left
    with a one-line notice naming its pid. Saves and exports into the folder
    from other processes are refused while the run holds it.

    Raises:
        ValueError: another process holds the lock (`FolderBusyError`).
    """
    return folder_lock(output, "training run")
