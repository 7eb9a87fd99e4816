"""Training curves: the loss in the training report, `analyze training`."""

import json
import math
import struct

import pytest
import tensorflow as tf

import keras_sentemb
from keras_sentemb import cli
from keras_sentemb.evaluation.training_curves import plot_training_curves
from keras_sentemb.evaluation.training_curves import training_curves
from keras_sentemb.pipelines.callbacks import LossHistory
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS
from tests.helpers.corpora import DEV

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny CT run of 5 steps, dev every 2: a model folder with its report."""
    folder = tmp_path_factory.mktemp("ct") / "model"
    keras_sentemb.fit_ct(CORPUS, model=make_tiny_encoder(), steps=5, eval_every=2, dev=DEV,
                         batch_size=8, negatives="k3", learning_rate=1e-2, verbose=0,
                         output=str(folder))
    return folder


def png_size(path):
    """(width, height) of a PNG file, after checking its signature and header chunk."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_report_records_the_loss_every_eval_every_steps(trained):
    report = json.loads((trained / "training_report.json").read_text())
    # Epochs of eval_every=2 steps; the last one is cut short at step 5.
    assert [step for step, _ in report["loss_history"]] == [2, 4, 5]
    assert all(math.isfinite(loss) and loss > 0 for _, loss in report["loss_history"])
    assert [step for step, _ in report["selection"]["history"]] == [0, 2, 4, 5]


def test_analyze_training_writes_png_json_csv(trained, tmp_path, capsys):
    out = tmp_path / "curves"
    assert cli.main(["analyze", "training", "--model", str(trained), "--output", str(out)]) == 0, \
        capsys.readouterr().err
    printed = json.loads(capsys.readouterr().out)
    assert printed["png"] == str(out / "training.png")
    width, height = png_size(out / "training.png")
    assert width > 0 and height > 0 and width > height  # two panels side by side
    saved = json.loads((out / "training.json").read_text())
    curves = saved["results"]["model"]
    assert curves["method"] == "ct"
    assert [s for s, _ in curves["loss"]] == [2, 4, 5]
    assert set(curves["dev"]) == {"tower1", "tower2"}
    assert [s for s, _ in curves["dev"]["tower1"]] == [0, 2, 4, 5]
    assert curves["kept"] in ("tower1", "tower2")
    rows = (out / "training.csv").read_text().splitlines()
    assert rows[0] == "model,series,step,value" and len(rows) == 1 + 3 + 2 * 4


def test_analyze_training_compares_runs_and_reads_old_reports(trained, tmp_path, capsys):
    # A report written before the loss was recorded: no loss_history field.
    old = tmp_path / "old"
    old.mkdir()
    report = json.loads((trained / "training_report.json").read_text())
    del report["loss_history"]
    (old / "training_report.json").write_text(json.dumps(report))
    out = tmp_path / "both"
    assert cli.main(["analyze", "training", "--model", str(trained), "--compare", str(old),
                     "--output", str(out)]) == 0, capsys.readouterr().err
    saved = json.loads((out / "training.json").read_text())
    assert set(saved["results"]) == {"model", "old"}
    assert saved["results"]["old"]["loss"] == [] and saved["results"]["old"]["dev"]
    png_size(out / "training.png")


def test_plot_without_loss_or_dev(tmp_path):
    curves = training_curves({"method": "whitening", "steps_trained": 0, "selection": None})
    assert curves["loss"] == [] and curves["dev"] == {} and curves["kept"] is None
    png_size(plot_training_curves(curves, tmp_path / "empty.png"))
    with pytest.raises(ValueError, match="training report"):
        training_curves({"steps": 3})


def test_folder_without_report_is_one_line_exit_2(tmp_path, capsys):
    bare = tmp_path / "bare"
    bare.mkdir()
    out = tmp_path / "out"
    assert cli.main(["analyze", "training", "--model", str(bare), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no training report in" in err and "Traceback" not in err
    assert not out.exists()


class _FakeOptimizer:
    def __init__(self):
        self.iterations = tf.Variable(0, dtype="int64")


class _FakeModel:
    def __init__(self):
        self.optimizer = _FakeOptimizer()


def test_loss_history_survives_a_resumed_run(tmp_path):
    model = _FakeModel()
    first = LossHistory(state_dir=str(tmp_path))
    first.set_model(model)
    first.on_train_begin()
    for step, loss in ((2, 0.9), (4, 0.5), (6, float("nan"))):
        model.optimizer.iterations.assign(step)
        first.on_epoch_end(step // 2 - 1, {"loss": loss})
    assert first.history == [[2, 0.9], [4, 0.5], [6, None]]
    # Interrupted after step 6, the backup of step 4 resumes: steps <= 4 are kept.
    resumed = LossHistory(state_dir=str(tmp_path), resume_step=4)
    resumed.set_model(model)
    resumed.on_train_begin()
    model.optimizer.iterations.assign(6)
    resumed.on_epoch_end(2, {"loss": 0.3})
    assert resumed.history == [[2, 0.9], [4, 0.5], [6, 0.3]]
    fresh = LossHistory(state_dir=str(tmp_path))
    fresh.set_model(model)
    fresh.on_train_begin()
    assert fresh.history == []
