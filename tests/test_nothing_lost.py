"""Nothing lost, nothing half-written: atomic saves, early output checks, resumable CLI runs."""

import logging
import subprocess
import sys
import textwrap

import pytest

from keras_sentemb import cli
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.pipelines import callbacks as pipeline_callbacks
from tests.conftest import REPO, make_tiny_encoder
from tests.helpers.corpora import CORPUS
from tests.numeric import assert_close_vectors


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lost") / "tiny"
    make_tiny_encoder().save(folder)
    return str(folder)


KILL_DURING_SAVE = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {repo!r})
    from tests.conftest import make_tiny_encoder
    encoder = make_tiny_encoder(pooling="max")
    original = encoder.tokenizer.save_to_preset
    def die(folder):
        original(folder)          # half of the new model is on disk...
        os._exit(9)               # ...when the process is killed
    encoder.tokenizer.save_to_preset = die
    encoder.save({target!r})
    """
)


def test_kill_during_save_leaves_the_previous_model_loadable(tiny_model, tmp_path):
    import shutil

    target = tmp_path / "model"
    shutil.copytree(tiny_model, target)
    before = SentenceEncoder.from_preset(str(target)).encode(CORPUS[:3])
    script = tmp_path / "kill.py"
    script.write_text(KILL_DURING_SAVE.format(repo=str(REPO), target=str(target)))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=600)
    assert result.returncode == 9
    after = SentenceEncoder.from_preset(str(target))
    assert after.declared_pooling is None  # still the old model, not the new "max" one
    assert_close_vectors(after.encode(CORPUS[:3]), before, rtol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["kill.py", "model"]


def test_failed_save_cleans_up_and_a_good_save_replaces_whole(tiny_model, tmp_path):
    encoder = make_tiny_encoder(pooling="cls")
    target = tmp_path / "model"
    encoder.save(target)

    def broken(folder):
        raise OSError(28, "No space left on device")

    fresh = make_tiny_encoder(pooling="max")
    fresh.tokenizer.save_to_preset = broken
    with pytest.raises(OSError, match="No space left"):
        fresh.save(target)
    assert SentenceEncoder.from_preset(str(target)).declared_pooling == "cls"
    assert list(tmp_path.iterdir()) == [target]  # no temporary folder left behind
    make_tiny_encoder(pooling="max").save(target)
    assert SentenceEncoder.from_preset(str(target)).declared_pooling == "max"
    with pytest.raises(FileExistsError, match="already holds a model"):
        make_tiny_encoder().save(target, overwrite=False)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    with pytest.raises(ValueError, match="holding other files, not a model"):
        make_tiny_encoder().save(tmp_path / "notes")
    assert (tmp_path / "notes" / "todo.txt").read_text() == "mine"


@pytest.mark.parametrize(
    "output, message",
    [
        ("FILE", "exists and is a file, not a folder"),
        ("/proc/sentemb_out", "cannot be written: creating a folder in /proc failed"),
        ("NOTES", "is a folder holding other files, not a model"),
        ("MODEL", "already holds a trained model; pass --overwrite"),
    ],
)
def test_train_checks_the_output_before_any_work(tiny_model, tmp_path, capsys, output, message):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS), encoding="utf-8")
    (tmp_path / "FILE").write_text("x")
    (tmp_path / "NOTES").mkdir()
    (tmp_path / "NOTES" / "a.txt").write_text("x")
    output = {"FILE": str(tmp_path / "FILE"), "NOTES": str(tmp_path / "NOTES"),
              "MODEL": tiny_model}.get(output, output)
    # An unloadable model name proves that nothing was loaded or trained first.
    code = cli.main(["train", "ct", "--model", "no_such_model_xyz", "--train-file", str(corpus),
                     "--output", output])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0], err


def test_interrupted_train_resumes_with_the_same_command(tiny_model, tmp_path, capsys, caplog,
                                                          monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS), encoding="utf-8")
    out = tmp_path / "ct"
    argv = ["train", "ct", "--model", tiny_model, "--train-file", str(corpus), "--output",
            str(out), "--steps", "6", "--batch-size", "8", "--negatives", "k3",
            "--eval-every", "3", "--dev", "none", "--keep", "tower1", "--verbose", "0"]
    original = pipeline_callbacks.StopAtStep.on_train_batch_end

    def ctrl_c(self, batch, logs=None):
        if int(self.model.optimizer.iterations) == 5:
            raise KeyboardInterrupt
        original(self, batch, logs)

    monkeypatch.setattr(pipeline_callbacks.StopAtStep, "on_train_batch_end", ctrl_c)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "interrupted; run the same command again to resume from the backup in" in err
    assert not out.exists() and (tmp_path / "ct.backup").is_dir()
    monkeypatch.setattr(pipeline_callbacks.StopAtStep, "on_train_batch_end", original)
    with caplog.at_level(logging.INFO):
        assert cli.main(argv) == 0
    assert "resuming the interrupted run" in capsys.readouterr().err
    assert "ct: resuming from step 3" in caplog.text
    report = SentenceEncoder.from_preset(str(out))
    assert (out / "training_report.json").is_file() and report.declared_pooling == "mean"
    assert not (tmp_path / "ct.backup").exists()
    # Done: the same command now refuses to train over the finished model.
    assert cli.main(argv) == 2
    assert "already holds a trained model" in capsys.readouterr().err


def test_encode_refuses_a_folder_output_before_loading(tmp_path, capsys):
    (tmp_path / "in.txt").write_text("hello\n")
    code = cli.main(["encode", "--model", "no_such_model_xyz", "--input",
                     str(tmp_path / "in.txt"), "--output", str(tmp_path)])
    assert code == 2 and "is a folder; give a .npy file path" in capsys.readouterr().err


def test_results_on_stdout_logs_on_stderr(tiny_model, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "keras_sentemb", "train", "ct", "--model", tiny_model,
         "--train-file", str(corpus), "--output", str(tmp_path / "o"), "--steps", "2",
         "--batch-size", "8", "--negatives", "k3", "--dev", "none"],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == ""  # progress bars and logs went to stderr
    assert "saved the ct encoder" in result.stderr
