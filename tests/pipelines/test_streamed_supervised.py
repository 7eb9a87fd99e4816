"""Supervised methods on streamed data: a 2-file glob trains as the same rows in memory do.

Each check trains one full-batch step (every row in the one batch, an encoder without dropout),
where the order the rows arrive in cannot matter: the streamed run must end with the weights of
the in-memory run (relative to what the step changed). Spies show the in-memory readers are not
called for the stream.
"""

import json

import numpy as np
import pytest

import keras_sentemb
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS
from keras_sentemb.kernels.precision import PIN_ENV


@pytest.fixture(autouse=True)
def float32_training(monkeypatch):
    """Streamed and in-memory runs are compared weight by weight: both train in float32 here
    (bfloat16 rounds the two runs' sums differently); the default precision is tested in
    tests/test_default_precision.py."""
    monkeypatch.setenv(PIN_ENV, "float32")

ROWS = 20  # rows in the two files together; one full batch


def still_encoder():
    """The tiny encoder without dropout: a training step is a function of the batch's rows."""
    return make_tiny_encoder(dropout=0.0)


def write_jsonl(folder, name, rows, keys):
    half = len(rows) // 2
    for k, part in enumerate((rows[:half], rows[half:])):
        (folder / f"{name}-{k}.jsonl").write_text(
            "".join(json.dumps(dict(zip(keys, map(str, r)))) + "\n" for r in part))
    return str(folder / f"{name}-*.jsonl")


def relative_error(a, b, start):
    change = np.sqrt(sum(np.sum((x - s) ** 2) for x, s in zip(a, start)))
    error = np.sqrt(sum(np.sum((x - y) ** 2) for x, y in zip(a, b)))
    assert change > 0
    return error / change


@pytest.fixture(scope="module")
def labelled_pairs():
    """(sentence1, sentence2, label) rows, every text distinct, both labels."""
    return [(CORPUS[i], CORPUS[i + 1], (i // 2) % 2) for i in range(0, 2 * ROWS, 2)]


def forbid(monkeypatch, module, *names):
    """Make the in-memory readers of `module` fail if called."""
    def refuse(*args, **kwargs):
        raise AssertionError("the streamed input was read into memory")

    for name in names:
        monkeypatch.setattr(module, name, refuse)


def test_simcse_paraphrase_streams_labelled_pairs(labelled_pairs, tmp_path, monkeypatch):
    import keras_sentemb.methods.simcse as simcse

    common = dict(mode="paraphrase", steps=1, batch_size=ROWS, pooling="mean", mlp="none",
                  learning_rate=1e-3, dev=None, verbose=0)
    start = still_encoder().get_weights()
    memory = keras_sentemb.fit_simcse(labelled_pairs, model=still_encoder(), **common)
    glob = write_jsonl(tmp_path, "quora", labelled_pairs, ("sentence1", "sentence2", "label"))
    forbid(monkeypatch, simcse, "supervised_columns", "load_corpus")
    streamed = keras_sentemb.fit_simcse(glob, model=still_encoder(), **common)
    assert "2 jsonl file(s)" in streamed.training_report.data["streamed"]
    assert relative_error(memory.get_weights(), streamed.get_weights(), start) < 1e-3
    with pytest.raises(ValueError, match=r"has no column\(s\) \['label'\]"):
        (tmp_path / "bad.csv").write_text("sentence1,sentence2\na,b\n")
        keras_sentemb.fit_simcse(keras_sentemb.streamed(str(tmp_path / "bad.csv")),
                                 model=memory, **common)
    with pytest.raises(ValueError, match="No training file matches"):
        keras_sentemb.fit_simcse(str(tmp_path / "none-*.jsonl"), model=memory, **common)


@pytest.fixture(scope="module")
def scored_pairs():
    """(sentence1, sentence2, score) rows with scores across [0, 5] (two in the lowest bucket)."""
    return [(CORPUS[i], CORPUS[i + 1], round((i // 2) * 5.0 / (ROWS - 1), 3))
            for i in range(0, 2 * ROWS, 2)]


def test_sts_regression_streams_scored_pairs_and_finds_the_same_m(scored_pairs, tmp_path,
                                                                  monkeypatch):
    import keras_sentemb.methods.sts_regression as sts

    common = dict(steps=1, batch_size=ROWS, learning_rate=1e-3, dev=None, verbose=0,
                  pooling="mean")
    start = still_encoder().get_weights()
    memory = keras_sentemb.fit_sts_regression(scored_pairs, model=still_encoder(), **common)
    rows = scored_pairs + [("an", "unscored row", "n/a"), ("a", "score out of range", 7.5)]
    glob = write_jsonl(tmp_path, "sts", rows, ("sentence1", "sentence2", "score"))
    forbid(monkeypatch, sts, "resolve_train_pairs", "model_specific_lower_bound")
    with pytest.raises(ValueError, match=r"2 of 22 rows read were skipped \(9.09 %.*2 have a "
                       r"label that does not parse"):
        keras_sentemb.fit_sts_regression(glob, model=still_encoder(), **common)
    # The two bad rows are 9 % of the rows: allowed when the share allows them.
    streamed = keras_sentemb.fit_sts_regression(glob, model=still_encoder(), max_skipped=0.1,
                                                **common)
    report = streamed.training_report
    assert report.extras["label_lower_bound_pairs_read"] == ROWS  # the bad rows skipped
    assert report.extras["label_lower_bound"] == pytest.approx(
        memory.training_report.extras["label_lower_bound"], rel=1e-5)
    assert relative_error(memory.get_weights(), streamed.get_weights(), start) < 1e-3
    # `steps * batch_size` bounds the rows M is computed on.
    info = sts.streamed_lower_bound(still_encoder(), keras_sentemb.streamed(glob), limit=3)
    assert info["pairs_read"] == 3
    with pytest.raises(ValueError, match=r"columns \['sentence1', 'sentence2', 'score'\]"):
        keras_sentemb.fit_sts_regression(
            write_jsonl(tmp_path, "unscored", scored_pairs, ("sentence1", "sentence2", "label")),
            model=still_encoder(), **common)


def test_consert_supervised_stage_streams_triplets_and_pairs(tmp_path, monkeypatch):
    import keras_sentemb.methods.consert as consert

    triplets = [tuple(CORPUS[i:i + 3]) for i in range(0, 3 * (ROWS // 2), 3)]  # ROWS pairs
    common = dict(mode="sup", steps=1, batch_size=ROWS, learning_rate=1e-3, warmup_ratio=0.0,
                  dev=None, verbose=0)
    start = still_encoder().get_weights()
    memory = keras_sentemb.fit_consert(triplets, model=still_encoder(), **common)
    half = len(triplets) // 2
    for k, part in enumerate((triplets[:half], triplets[half:])):
        (tmp_path / f"nli-{k}.csv").write_text(
            "sent0,sent1,hard_neg\n" + "".join(",".join(r) + "\n" for r in part))
    forbid(monkeypatch, consert, "load_supervised", "_nli_rows")
    streamed = keras_sentemb.fit_consert(str(tmp_path / "nli-*.csv"), model=still_encoder(),
                                         **common)
    assert "TripletPairs" in streamed.training_report.data["supervised_streamed"]
    assert relative_error(memory.get_weights(), streamed.get_weights(), start) < 1e-3
    # Labelled pairs of unknown size: the two-stage modes need the supervised stage's steps.
    pairs = write_jsonl(tmp_path, "pairs", [(a, b, "entailment") for a, b, _ in triplets],
                        ("sentence1", "sentence2", "label"))
    with pytest.raises(ValueError, match="`supervised_steps` is needed"):
        keras_sentemb.fit_consert(CORPUS[:40], supervised=pairs, model=still_encoder(),
                                  **{**common, "mode": "sup_unsup"})


def test_flow_streams_its_corpus_and_encodes_each_batch_in_its_step(tmp_path, monkeypatch):
    from keras_sentemb.pipelines import _frozen_encoder

    sentences = CORPUS[:ROWS]
    common = dict(steps=1, batch_size=ROWS, warmup_ratio=0.0, levels=1, depth=1,
                  coupling_width=8, dev=None, verbose=0)
    memory = keras_sentemb.fit_flow(sentences, model=still_encoder(), **common)
    for k in range(2):
        (tmp_path / f"part-{k}.txt").write_text("\n".join(sentences[k::2]) + "\n")
    forbid(monkeypatch, _frozen_encoder, "load_corpus")
    forbid(monkeypatch, _frozen_encoder.FittingData, "vectors")  # no up-front encoding
    streamed = keras_sentemb.fit_flow(str(tmp_path / "part-*.txt"), model=still_encoder(),
                                      **common)
    assert "2 txt file(s)" in streamed.training_report.data["streamed"]
    # The same initialisation (all rows) and the same full batch: the same loss and update.
    (_, loss_memory), = memory.training_report.loss_history
    (_, loss_streamed), = streamed.training_report.loss_history
    assert loss_streamed == pytest.approx(loss_memory, rel=1e-4)
    a = np.concatenate([w.ravel() for w in memory.postprocess.get_weights()])
    b = np.concatenate([w.ravel() for w in streamed.postprocess.get_weights()])
    # Adam's first update is about lr * sign(gradient): a gradient near 0 may flip sign
    # between the two encodings (1e-6 apart); one whole step moves the weights ~3e-3.
    assert np.linalg.norm(a - b) <= 5e-4 * np.linalg.norm(a)
    with pytest.raises(ValueError, match="A Mixture mixes datasets"):
        keras_sentemb.fit_flow(keras_sentemb.Mixture({"a": sentences, "b": sentences}),
                               model=still_encoder(), **common)


def test_multitask_streams_each_task(tmp_path, monkeypatch):
    """The step's batch holds the rows the folder's batch holds (the trainer is the same code;
    training it twice costs ~40 s); the streamed run trains without reading the folder."""
    import keras_sentemb.methods.multitask as multitask
    from keras_sentemb.data.multitask import load_multitask_data
    from keras_sentemb.data.multitask import multitask_batches
    from keras_sentemb.data.multitask_streams import streamed_multitask_batches
    from keras_sentemb.data.multitask_streams import task_streams
    from tests.helpers.files import write_multitask_folder

    folder = write_multitask_folder(tmp_path / "multitask")
    train = load_multitask_data(folder, verbose=False)["train"]
    similarity = train["similarity"]
    glob = write_jsonl(tmp_path, "sts", similarity, ("sentence1", "sentence2", "label"))

    def rows(element):
        batch = element["similarity"]
        return sorted(zip(batch["sentence1"].tolist(), batch["sentence2"].tolist(),
                          batch["label"].tolist()))

    memory = next(multitask_batches(train, "single", len(similarity)).as_numpy_iterator())
    streams = task_streams({"similarity": glob}, "single")
    streamed_batch = next(streamed_multitask_batches(streams, "single", len(similarity))
                          .as_numpy_iterator())
    assert rows(streamed_batch) == rows(memory)
    assert not streamed_batch["sentiment"]["mask"].any()
    common = dict(procedure="single", single_task="similarity", pretrain="none", steps=1,
                  batch_size=8, dropout=0.0, dev=None, verbose=0, max_length=16)
    forbid(monkeypatch, multitask, "load_multitask_data")
    model = keras_sentemb.fit_multitask({"similarity": glob}, model=still_encoder(), **common)
    assert "2 jsonl file(s)" in model.training_report.data["streamed"]["similarity"]
    assert int(model.optimizer.iterations) == 1
    # What needs the whole data is refused in one line, before anything is read.
    tasks = {"similarity": glob,
             "paraphrase": [(a, b, float(i % 2)) for i, (a, b, _) in enumerate(similarity)],
             "sentiment": keras_sentemb.streamed(
                 tf_rows([(a, i % 5) for i, (a, _, _) in enumerate(similarity)]))}
    for bad, message in (({"dev": "multitask"}, "dev='multitask' reads the dev files"),
                         ({"procedure": "epoch_round_robin"}, "size a stream does not tell"),
                         ({"pretrain": "paraphrase"}, "needs the whole task data")):
        with pytest.raises(ValueError, match=message) as error:
            keras_sentemb.fit_multitask(tasks, model=model.encoder,
                                        **{**common, "procedure": "average", **bad})
        assert "\n" not in str(error.value)


def tf_rows(rows):
    """A `tf.data.Dataset` of `(sentence, int label)` tuples (a TFDS-like source)."""
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(([r[0] for r in rows], [r[1] for r in rows]))
