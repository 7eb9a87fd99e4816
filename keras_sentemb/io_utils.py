"""Writing model folders so that a crash never leaves a half-written model."""

import contextlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path

# Files that mark a folder as a model (keras_sentemb, Hugging Face or keras-hub).
MODEL_MARKERS = ("sentemb_config.json", "config.json", "saved_model.pb")


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
