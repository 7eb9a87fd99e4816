"""Training on streamed data: globs, datasets, triplets and mixtures; steps; resume; the CLI."""

import json

import keras
import numpy as np
import pytest

import keras_sentemb
from keras_sentemb.pipelines.backup import TrainingBackup
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS
from tests.helpers.training import StepRecorder


@pytest.fixture(scope="module")
def corpus_glob(tmp_path_factory):
    root = tmp_path_factory.mktemp("streamed")
    for f in range(3):
        (root / f"part-{f}.txt").write_text("\n".join(CORPUS[f * 100:(f + 1) * 100]) + "\n")
    return str(root / "part-*.txt")


class Batches(keras.callbacks.Callback):
    """Counts the train steps (the trainer sees exactly `steps` batches)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def on_train_batch_end(self, batch, logs=None):
        self.count += 1


def test_simcse_trains_on_a_glob_and_needs_steps(corpus_glob):
    with pytest.raises(ValueError, match=r"size is not known in advance.*--steps N"):
        keras_sentemb.fit_simcse(corpus_glob, model=make_tiny_encoder(), dev=None, verbose=0)
    seen = Batches()
    encoder = keras_sentemb.fit_simcse(
        corpus_glob, model=make_tiny_encoder(), steps=3, batch_size=8, dev=None, verbose=0,
        callbacks=[seen])
    report = encoder.training_report
    assert seen.count == report.steps_trained == 3
    assert report.data["examples"] is None and "3 txt file(s)" in report.data["streamed"]


def test_simcse_sup_streams_triplets_and_paraphrase_needs_its_columns(tmp_path):
    rows = [(CORPUS[i], CORPUS[i + 1], CORPUS[i + 2]) for i in range(0, 60, 3)]
    path = tmp_path / "nli.jsonl"
    path.write_text("".join(json.dumps(dict(zip(("sent0", "sent1", "hard_neg"), r))) + "\n"
                            for r in rows))
    encoder = keras_sentemb.fit_simcse(str(path), mode="sup", model=make_tiny_encoder(), steps=2,
                                       batch_size=4, dev=None, verbose=0)
    assert encoder.training_report.steps_trained == 2
    with pytest.raises(ValueError, match=r"nli.jsonl: none of the 20 row\(s\) read holds the "
                       r"columns \['sentence1', 'sentence2', 'label'\]: 20 lack the fields "
                       r"'sentence1', 'sentence2', 'label' \(its records have the fields"):
        keras_sentemb.fit_simcse(str(path), mode="paraphrase", model=make_tiny_encoder(),
                                 steps=2, dev=None, verbose=0)


def test_a_dataset_of_known_size_sets_one_epoch_and_a_mixture_trains(corpus_glob):
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(CORPUS[:48])
    encoder = keras_sentemb.fit_simcse(dataset, model=make_tiny_encoder(), batch_size=16,
                                       dev=None, verbose=0)
    assert encoder.training_report.steps_trained == 3  # 48 rows / 16
    mixture = keras_sentemb.Mixture({"files": (corpus_glob, 1.0), "list": (CORPUS[:40], 1.0)},
                                    mode="round_robin")
    encoder = keras_sentemb.fit_ct(mixture, model=make_tiny_encoder(), steps=2, batch_size=8,
                                   negatives="k3", dev=None, keep="tower2", verbose=0)
    assert encoder.training_report.steps_trained == 2


class KillAt(keras.callbacks.Callback):
    """Raises at the end of step `step` of the first attempt."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations) == self.step:
            raise RuntimeError("killed")


def _run(glob, callbacks=()):
    return keras_sentemb.fit_simcse(
        keras_sentemb.streamed(glob, shuffle_buffer=64), model=make_tiny_encoder(), steps=4,
        eval_every=2, dev=None, batch_size=8, learning_rate=1e-2, seed=3, verbose=0,
        callbacks=list(callbacks))


def test_killed_run_of_a_stream_resumes_at_the_same_position(corpus_glob, tmp_path):
    """A fresh backup callback (as in a new process) resumes after the step-2 backup on the
    batches the whole run saw: the same weights (relative to what training changed)."""
    start = make_tiny_encoder().get_weights()
    full = _run(corpus_glob).get_weights()
    with pytest.raises(RuntimeError, match="killed"):
        _run(corpus_glob, [TrainingBackup(tmp_path / "backup"), KillAt(3)])
    steps = StepRecorder()
    resumed = _run(corpus_glob, [TrainingBackup(tmp_path / "backup"), steps]).get_weights()
    assert steps.seen == [2, 3]
    change = np.sqrt(sum(np.sum((a - s) ** 2) for a, s in zip(full, start)))
    error = np.sqrt(sum(np.sum((a - b) ** 2) for a, b in zip(full, resumed)))
    assert change > 0 and error <= 1e-3 * change


def test_cli_trains_on_a_quoted_glob(corpus_glob, tmp_path):
    from keras_sentemb.cli import main

    make_tiny_encoder().save(tmp_path / "tiny")
    out = tmp_path / "out"
    common = ["--model", str(tmp_path / "tiny"), "--output", str(out), "--batch-size", "8",
              "--dev", "none", "--verbose", "0"]
    assert main(["train", "simcse", "--train-file", str(tmp_path / "none-*.txt"), "--steps", "2",
                 *common]) == 2
    assert main(["train", "simcse", "--train-file", corpus_glob, *common]) == 2  # no --steps
    assert main(["train", "simcse", "--train-file", corpus_glob, "--steps", "2", *common]) == 0
    report = json.loads((out / "training_report.json").read_text())
    assert report["steps_trained"] == 2 and "streamed" in report["data"]


def test_consert_self_guided_and_mlm_train_on_streams(corpus_glob, tmp_path):
    encoder = keras_sentemb.fit_consert(corpus_glob, model=make_tiny_encoder(), steps=1,
                                        batch_size=8, dev=None, verbose=0)
    assert encoder.training_report.steps_trained == 1
    assert "streamed" in encoder.training_report.data
    path = tmp_path / "bt.tsv.gz"
    import gzip

    with gzip.open(path, "wt") as f:
        f.write("".join(f"{CORPUS[i]}\t{CORPUS[i + 1]}\n" for i in range(0, 40, 2)))
    encoder = keras_sentemb.fit_self_guided(
        keras_sentemb.streamed(str(path)), mode="pairs", model=make_tiny_encoder(), steps=1,
        batch_size=4, dev=None, projection_dim=8, patience=None, verbose=0)
    assert encoder.training_report.steps_trained == 1
    encoder = keras_sentemb.fit_mlm(corpus_glob, model=make_tiny_encoder(), steps=1,
                                    batch_size=8, verbose=0)
    assert "streamed" in encoder.training_report.data


def test_parallel_streams_pairs_and_holds_out_the_first_rows(tmp_path):
    from tests.helpers.corpora import make_pairs

    pairs = make_pairs(80)
    for k in range(2):
        (tmp_path / f"bitext-{k}.tsv").write_text(
            "".join(f"{a}\t{b}\n" for a, b in pairs[k * 40:(k + 1) * 40]))
    student = keras_sentemb.fit_parallel(
        str(tmp_path / "bitext-*.tsv"), model=make_tiny_encoder(num_layers=1), steps=2,
        eval_every=2, batch_size=8, queue_size=16, max_length=16, eval_size=10, dev_size=10,
        track_alignment=False, verbose=0)
    report = student.training_report
    assert report.steps_trained == 2
    assert report.data["test_pairs"] == 10 and report.data["dev_pairs"] == 10
    assert report.data["train_pairs"] is None and "2 tsv file(s)" in report.data["streamed"]


def _train_command(model, glob, out):
    import sys

    return [sys.executable, "-m", "keras_sentemb", "train", "simcse", "--model", model,
            "--train-file", glob, "--output", str(out), "--steps", "60", "--eval-every", "3",
            "--batch-size", "8", "--dev", "none", "--seed", "5", "--verbose", "0"]


def test_killed_run_by_sigkill_resumes_on_a_stream(corpus_glob, tmp_path):
    """`kill -9` during a streamed `train`; the same command resumes and ends with the weights
    of the run that was not killed."""
    import os
    import signal
    import subprocess
    import time

    from keras_sentemb.models import SentenceEncoder
    from tests.helpers.processes import worker_env

    make_tiny_encoder().save(tmp_path / "tiny")
    model = str(tmp_path / "tiny")
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    env = worker_env()
    subprocess.run(_train_command(model, corpus_glob, whole), env=env, check=True,
                   capture_output=True, timeout=600)
    proc = subprocess.Popen(_train_command(model, corpus_glob, killed), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    backup = tmp_path / "killed.backup"
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline:
        if backup.is_dir() and any("weights" in p.name for p in backup.iterdir()):
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    assert proc.wait(timeout=60) == -signal.SIGKILL  # killed mid-run, after a backup
    resumed = subprocess.run(_train_command(model, corpus_glob, killed), env=env,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming the interrupted run" in resumed.stderr
    a = SentenceEncoder.from_preset(str(whole)).get_weights()
    b = SentenceEncoder.from_preset(str(killed)).get_weights()
    start = make_tiny_encoder().get_weights()
    change = np.sqrt(sum(np.sum((x - s) ** 2) for x, s in zip(a, start)))
    error = np.sqrt(sum(np.sum((x - y) ** 2) for x, y in zip(a, b)))
    assert change > 0 and error <= 1e-3 * change
