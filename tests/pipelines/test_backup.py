"""Backups written whole or not at all; damaged ones restart cleanly; one run per output."""

import json
import logging
import shutil

import pytest

import keras_sentemb
from keras_sentemb.pipelines import backup as backup_module
from keras_sentemb.pipelines.backup import TrainingBackup
from keras_sentemb.pipelines.backup import inspect_backup
from keras_sentemb.pipelines.backup import output_lock
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS


def _simcse(callbacks=(), **kw):
    kw = {"steps": 4, **kw}
    return keras_sentemb.fit_simcse(CORPUS, model=make_tiny_encoder(), eval_every=2,
                                    batch_size=8, learning_rate=1e-2, dev=None, seed=3,
                                    verbose=0, callbacks=list(callbacks), **kw)


@pytest.fixture(scope="module")
def written_backup(tmp_path_factory):
    """A real two-epoch backup, kept on disk (written once; tests damage copies of it)."""
    folder = tmp_path_factory.mktemp("written") / "backup"
    _simcse([TrainingBackup(folder, delete_checkpoint=False)])
    return folder


@pytest.fixture(scope="module")
def fresh_run():
    """The 4-step run without any backup (deterministic: trained once)."""
    return _simcse()


def _write_backup(written_backup, folder):
    shutil.copytree(written_backup, folder)
    epoch, weights = inspect_backup(folder)
    assert (epoch, weights) == (2, str(folder / "epoch-2.weights.h5"))


def test_a_kill_while_writing_leaves_the_previous_backup(tmp_path, monkeypatch, written_backup):
    folder = tmp_path / "backup"
    _write_backup(written_backup, folder)
    before = (folder / "training_metadata.json").read_text()

    def dies_half_way(self, filepath, overwrite=True):
        with open(filepath, "wb") as f:
            f.write(b"\x89HDF half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr("keras.Model.save_weights", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        _simcse([TrainingBackup(folder, delete_checkpoint=False)], steps=6)
    monkeypatch.undo()
    assert (folder / "training_metadata.json").read_text() == before
    assert inspect_backup(folder)[0] == 2  # still whole and usable


@pytest.mark.parametrize("damage", ["metadata", "weights", "missing"])
def test_a_damaged_backup_is_one_line_and_a_clean_restart(tmp_path, caplog, damage,
                                                          written_backup, fresh_run):
    folder = tmp_path / "backup"
    _write_backup(written_backup, folder)
    if damage == "metadata":
        (folder / "training_metadata.json").write_text('{"epoch": ')
    elif damage == "weights":
        data = (folder / "epoch-2.weights.h5").read_bytes()
        (folder / "epoch-2.weights.h5").write_bytes(data[: len(data) // 2])
    else:
        (folder / "epoch-2.weights.h5").unlink()
    with pytest.raises(ValueError):
        inspect_backup(folder)
    with caplog.at_level(logging.WARNING, logger=backup_module.__name__):
        callback = TrainingBackup(folder)
    [record] = [r for r in caplog.records if r.name == backup_module.__name__]
    assert "is damaged" in record.getMessage() and "starting over" in record.getMessage()
    assert "\n" not in record.getMessage()
    assert not folder.exists()
    fresh = fresh_run
    restarted = _simcse([callback])
    assert restarted.training_report.steps_trained == 4
    for a, b in zip(fresh.get_weights(), restarted.get_weights()):
        assert a.shape == b.shape and abs(a - b).max() <= 1e-5 * max(1.0, abs(a).max())


def test_backup_metadata_names_its_weights(tmp_path, written_backup):
    folder = tmp_path / "backup"
    _write_backup(written_backup, folder)
    meta = json.loads((folder / "training_metadata.json").read_text())
    assert meta == {"epoch": 2, "batch": 0, "weights": "epoch-2.weights.h5"}
    assert sorted(p.name for p in folder.iterdir() if p.suffix == ".h5") == ["epoch-2.weights.h5"]


def test_one_training_run_per_output_folder(tmp_path):
    out = tmp_path / "model"
    with output_lock(out):
        with pytest.raises(ValueError, match=r"being written by another training run \(pid \d+\)"):
            _simcse(output=str(out))
        assert not out.exists()
    _simcse(output=str(out))  # the lock is released with its holder
    assert (out / "sentemb_config.json").is_file()


def test_a_full_disk_mid_backup_keeps_training_and_the_last_good_backup(tmp_path, monkeypatch,
                                                                          caplog):
    import errno

    import keras

    folder = tmp_path / "backup"
    saved = []
    real = keras.Model.save_weights

    def full_from_epoch_2(self, filepath, overwrite=True):
        saved.append(filepath)
        if len(saved) == 1:
            return real(self, filepath, overwrite=overwrite)
        with open(filepath, "wb") as f:  # h5py had written part of it
            f.write(b"\x89HDF part of a file")
        raise OSError(errno.ENOSPC, "No space left on device", filepath)

    monkeypatch.setattr("keras.Model.save_weights", full_from_epoch_2)
    with caplog.at_level(logging.WARNING, logger=backup_module.__name__):
        encoder = _simcse([TrainingBackup(folder, delete_checkpoint=False)], steps=6)
    monkeypatch.undo()
    assert encoder is not None and len(saved) == 3  # epochs 2 and 3 both tried
    lines = [r.getMessage() for r in caplog.records if r.name == backup_module.__name__]
    assert len(lines) == 1, lines
    assert "cannot write the backup of epoch 2" in lines[0]
    assert "no space left on device" in lines[0] and "epoch 1 is kept" in lines[0]
    assert inspect_backup(folder) == (1, str(folder / "epoch-1.weights.h5"))
    assert sorted(p.name for p in folder.iterdir() if p.suffix == ".h5" or ".tmp" in p.name
                  or p.name.startswith(".")) == ["epoch-1.weights.h5"]


def test_a_backup_error_that_is_not_a_full_disk_still_stops(tmp_path, monkeypatch):
    def broken(self, filepath, overwrite=True):
        raise RuntimeError("a bug")

    monkeypatch.setattr("keras.Model.save_weights", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        _simcse([TrainingBackup(tmp_path / "backup", delete_checkpoint=False)], steps=2)
