"""Retrieval dev set during training (`dev_retrieval`, `dev_select`, `--dev-retrieval`)."""

import inspect
import json

import keras
import numpy as np
import pytest

import keras_sentemb
from keras_sentemb.evaluation.beir import evaluate_retrieval
from keras_sentemb.pipelines import callbacks as callbacks_module
from keras_sentemb.pipelines.callbacks import BeirDevEvaluation
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS
from tests.helpers.corpora import DEV
from tests.numeric import assert_close_vectors

pytest.importorskip("pytrec_eval")

MONITOR = "retrieval_dev_ndcg_at_10"
DOCUMENTS = CORPUS[100:140]
QUERIES = 12


def write_dev_folder(folder, split="dev"):
    """40 documents; query i is the first 3 words of document i, its one relevant document."""
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n"
        for i, t in enumerate(DOCUMENTS)), encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(
        json.dumps({"_id": f"q{i}", "text": " ".join(t.split()[:3])}) + "\n"
        for i, t in enumerate(DOCUMENTS[:QUERIES])), encoding="utf-8")
    (folder / "qrels" / f"{split}.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(QUERIES)),
        encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def dev_folder(tmp_path_factory):
    return write_dev_folder(tmp_path_factory.mktemp("retrieval") / "dev")


class Snapshots(keras.callbacks.Callback):
    """The encoder's weights and the logs after every step (the caller's callbacks run last)."""

    def __init__(self):
        super().__init__()
        self.weights, self.logs = {}, []

    def on_train_begin(self, logs=None):
        self.weights[0] = self.model.encoder.get_weights()

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        self.weights[step] = self.model.encoder.get_weights()

    def on_epoch_end(self, epoch, logs=None):
        self.logs.append(dict(logs or {}))


def _flat(weights):
    return np.concatenate([np.ravel(w) for w in weights])


def test_callback_ndcg_is_evaluate_retrievals_and_the_kept_weights_are_the_best(dev_folder):
    start = make_tiny_encoder()
    starting = evaluate_retrieval(start, dev_folder, split="dev")["ndcg@10"]
    snapshots = Snapshots()
    kept = keras_sentemb.fit_simcse(
        CORPUS[:64], model=start, steps=3, eval_every=1, dev=DEV, dev_retrieval=str(dev_folder),
        batch_size=8, learning_rate=1e-3, verbose=0, callbacks=[snapshots], pooling="mean",
    )
    selection = kept.training_report.selection
    assert selection["monitor"] == MONITOR
    history = dict(selection["history"])
    assert sorted(history) == [0, 1, 2, 3]
    # The score before training is evaluate_retrieval's on the starting model (same pooling).
    assert history[0]["encoder"] == pytest.approx(starting, rel=1e-4)
    # The kept encoder is the best step's, and evaluate_retrieval scores it as the callback did.
    best = max(history, key=lambda s: history[s]["encoder"])
    assert selection["kept_step"] == best
    assert evaluate_retrieval(kept, dev_folder, split="dev")["ndcg@10"] == pytest.approx(
        history[best]["encoder"], rel=1e-4)
    assert_close_vectors(_flat(kept.get_weights()), _flat(snapshots.weights[best]), rtol=1e-6)
    # Logged into the Keras logs every evaluation, like the STS dev score.
    assert [round(logs[MONITOR], 4) for logs in snapshots.logs] == [
        history[s]["encoder"] for s in (1, 2, 3)]
    assert all("sts_dev_spearman" in logs for logs in snapshots.logs)
    # `dev` is scored and recorded beside it, without choosing.
    assert selection["also_scored"]["monitor"] == "sts_dev_spearman"
    assert [s for s, _ in selection["also_scored"]["history"]] == [0, 1, 2, 3]


@pytest.mark.parametrize("dev_select, chosen", [("auto", "retrieval"), ("dev", "sts")])
def test_dev_select_names_the_score_that_keeps_the_checkpoint(dev_folder, monkeypatch,
                                                              dev_select, chosen):
    """Scripted scores: retrieval is best at step 1, STS at step 2; the kept weights follow."""
    retrieval = iter([10.0, 30.0, 20.0, 5.0])
    sts = iter([1.0, 2.0, 9.0, 3.0])
    monkeypatch.setattr(callbacks_module, "retrieval_ndcg", lambda *a, **k: next(retrieval))
    monkeypatch.setattr(callbacks_module, "sts_spearman", lambda *a, **k: next(sts))
    snapshots = Snapshots()
    kept = keras_sentemb.fit_simcse(
        CORPUS[:64], model=make_tiny_encoder(), steps=3, eval_every=1, dev=DEV,
        dev_retrieval=str(dev_folder), dev_select=dev_select, batch_size=8,
        learning_rate=1e-2, verbose=0, callbacks=[snapshots],
    )
    selection = kept.training_report.selection
    step = 1 if chosen == "retrieval" else 2
    assert selection["monitor"] == (MONITOR if chosen == "retrieval" else "sts_dev_spearman")
    assert selection["kept_step"] == step
    kept_weights = _flat(kept.get_weights())
    assert_close_vectors(kept_weights, _flat(snapshots.weights[step]), rtol=1e-6)
    # The training moved the weights: keeping another step's would be visible.
    other = _flat(snapshots.weights[3])
    assert np.linalg.norm(kept_weights - other) > 1e-3 * np.linalg.norm(other)


def test_every_fit_function_takes_the_retrieval_dev_options():
    fits = {getattr(keras_sentemb, n).method: getattr(keras_sentemb, n)
            for n in dir(keras_sentemb) if n.startswith("fit_")}
    from keras_sentemb.methods.registry import get_method

    # The package's own methods (a test elsewhere may have registered one of its own).
    built_in = {name for name in keras_sentemb.list_methods()
                if get_method(name).__module__.startswith("keras_sentemb.")}
    assert set(fits) == built_in
    for name, fit in fits.items():
        params = inspect.signature(fit).parameters
        assert "dev" in params, name
        assert params["dev_retrieval"].default is None, name
        assert params["dev_select"].default == "auto", name
        assert "dev_retrieval:" in fit.__doc__ and "dev_select:" in fit.__doc__, name


@pytest.mark.parametrize("make, message", [
    (lambda tmp: tmp / "missing", "BEIR folder not found"),
    (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", "no qrels/dev.tsv or qrels/test.tsv"),
    (lambda tmp: _no_overlap(tmp), "is not in corpus.jsonl"),
])
def test_bad_retrieval_dev_folders_are_one_line_value_errors(tmp_path, make, message):
    folder = make(tmp_path)
    with pytest.raises(ValueError, match="`dev_retrieval`") as error:
        keras_sentemb.fit_simcse(CORPUS[:16], model="no-such-model-is-loaded", dev=None,
                                 dev_retrieval=str(folder), steps=1, verbose=0)
    assert message in str(error.value) and "\n" not in str(error.value)


def _no_overlap(tmp):
    folder = write_dev_folder(tmp / "no-overlap")
    (folder / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq0\tother\t1\n")
    return folder


def test_dev_select_needs_its_dev_set(dev_folder):
    with pytest.raises(ValueError, match="needs a retrieval dev set"):
        keras_sentemb.fit_simcse(CORPUS[:16], model="unused", dev=None, dev_select="retrieval")
    with pytest.raises(ValueError, match="needs a `dev` set"):
        keras_sentemb.fit_simcse(CORPUS[:16], model="unused", dev=None,
                                 dev_retrieval=str(dev_folder), dev_select="dev")
    with pytest.raises(ValueError, match="dev_select"):
        keras_sentemb.fit_simcse(CORPUS[:16], model="unused", dev_select="ndcg")


def test_a_test_split_is_read_when_there_is_no_dev_split(tmp_path):
    callback = BeirDevEvaluation(str(write_dev_folder(tmp_path / "t", split="test")))
    assert callback.data.split == "test" and len(callback.data.queries) == QUERIES
    assert callback.monitor == MONITOR and callback.state_name != "sentemb_dev_selection"


def test_cli_train_takes_dev_retrieval_and_refuses_a_bad_folder(tmp_path, dev_folder, capsys):
    from keras_sentemb.cli import main

    make_tiny_encoder().save(tmp_path / "tiny")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS[:32]), encoding="utf-8")
    common = ["train", "simcse", "--model", str(tmp_path / "tiny"), "--train-file", str(corpus),
              "--steps", "2", "--batch-size", "8", "--dev", "none", "--verbose", "0",
              "--eval-every", "1"]
    capsys.readouterr()
    rc = main(common + ["--output", str(tmp_path / "bad"), "--dev-retrieval",
                        str(tmp_path / "nowhere")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "BEIR folder not found" in err[0], err
    assert not (tmp_path / "bad").exists()
    out = tmp_path / "out"
    assert main(common + ["--output", str(out), "--dev-retrieval", str(dev_folder)]) == 0
    report = json.loads((out / "training_report.json").read_text())
    assert report["selection"]["monitor"] == MONITOR
    assert [s for s, _ in report["selection"]["history"]] == [0, 1, 2]
    assert report["hyperparameters"]["dev_retrieval"] == str(dev_folder)


def test_whitening_chooses_its_size_on_the_retrieval_dev_set(dev_folder):
    kept = keras_sentemb.fit_whitening(CORPUS, model=make_tiny_encoder(), dim="4,16",
                                       dev=DEV, dev_retrieval=str(dev_folder), verbose=0)
    selection = kept.training_report.selection
    scores = selection["history"][0][1]
    assert selection["monitor"] == MONITOR and set(scores) == {"dim=4", "dim=16"}
    assert selection["kept"] == max(scores, key=scores.get)
    assert kept.output_dim == int(selection["kept"][4:])
    # Scored on precomputed vectors, it is what evaluate_retrieval gives the kept encoder.
    assert evaluate_retrieval(kept, dev_folder, split="dev")["ndcg@10"] == pytest.approx(
        selection["kept_score"], rel=1e-4)
    assert selection["also_scored"]["monitor"] == "sts_dev_spearman"


def test_flow_scores_the_retrieval_dev_set_through_the_flow(dev_folder):
    kept = keras_sentemb.fit_flow(CORPUS[:64], model=make_tiny_encoder(), steps=2, batch_size=16,
                                  eval_every=1, dev=None, dev_retrieval=str(dev_folder),
                                  learning_rate=1e-2, verbose=0, levels=1, depth=1,
                                  coupling_width=8)
    report = kept.training_report
    history = dict(report.selection["history"])
    assert report.selection["monitor"] == MONITOR and sorted(history) == [0, 1, 2]
    assert "dev_retrieval_ndcg_at_10_without_flow" in report.extras
    assert evaluate_retrieval(kept, dev_folder, split="dev")["ndcg@10"] == pytest.approx(
        report.selection["kept_score"], rel=1e-4)


def test_its_resume_state_is_kept_apart_from_the_sts_selection(tmp_path, dev_folder):
    callback = BeirDevEvaluation(str(dev_folder), state_dir=str(tmp_path))
    callback.history = [(0, {"encoder": 40.0}), (5, {"encoder": 50.0})]
    callback.best_name, callback.best_step, callback.best_score = "encoder", 5, 50.0
    callback._save_state()
    assert (tmp_path / "sentemb_retrieval_dev_selection.json").is_file()
    assert not (tmp_path / "sentemb_dev_selection.json").exists()
    resumed = BeirDevEvaluation(str(dev_folder), state_dir=str(tmp_path))
    resumed.resume_step = 5
    assert resumed._load_state()
    assert resumed.history == callback.history and resumed.best_step == 5


def test_without_pytrec_eval_train_dev_retrieval_is_one_line_naming_the_pip_command(
        tmp_path, dev_folder, monkeypatch, capsys):
    import sys

    from keras_sentemb.cli import main

    monkeypatch.setitem(sys.modules, "pytrec_eval", None)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b c\n", encoding="utf-8")
    capsys.readouterr()
    rc = main(["train", "simcse", "--model", "no-such-model", "--train-file", str(corpus),
               "--output", str(tmp_path / "out"), "--dev", "none",
               "--dev-retrieval", str(dev_folder)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "needs pytrec_eval, which is not installed" in err[0]
    assert 'pip install -e ".[retrieval]"' in err[0]
