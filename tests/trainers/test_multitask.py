"""Multitask heads, PCGrad, schedules, data readers, fit_multitask (tiny)."""

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.data.multitask import in_quora_dev
from keras_sentemb.data.multitask import load_multitask_data
from keras_sentemb.data.multitask import read_pair_file
from keras_sentemb.data.multitask import read_sst
from keras_sentemb.trainers.multitask import MultitaskModel
from keras_sentemb.trainers.multitask import evaluate_multitask
from keras_sentemb.trainers.multitask import fit_multitask
from keras_sentemb.trainers.multitask import make_batch
from keras_sentemb.trainers.multitask import task_schedule
from keras_sentemb.trainers.multitask import train_multitask
from keras_sentemb.trainers.multitask_ensemble import MultitaskEnsemble
from keras_sentemb.trainers.multitask_pretrainer import pretraining_examples
from keras_sentemb.trainers.pcgrad import flatten_gradients
from keras_sentemb.trainers.pcgrad import pcgrad_combine
from keras_sentemb.trainers.pcgrad import pcgrad_project
from keras_sentemb.trainers.pcgrad import unflatten_gradients
from tests.conftest import make_tiny_encoder

WORDS = ["a man is playing guitar", "the woman plays piano", "a dog runs in the park",
         "the cat sits on the mat", "hello world", "a man plays piano",
         "the dog sits", "a woman is playing guitar"]


def _write_folder(root):
    """A tiny multitask folder with malformed rows in every file type."""
    root.mkdir(parents=True, exist_ok=True)
    sst = ["\tid\tsentence\tsentiment"]
    for i in range(24):
        sst.append(f"{i}\ts{i}\t {WORDS[i % 8]} .\t{i % 5}")
    sst_train = sst + ["99\tbad\t the cat .\t", "100\tbad2\tonly three fields"]
    (root / "ids-sst-train.csv").write_text("\n".join(sst_train) + "\n")
    (root / "ids-sst-dev.csv").write_text("\n".join(sst[:13]) + "\n")
    pairs = ["\tid\tsentence1\tsentence2\tsimilarity"]
    for i in range(24):
        pairs.append(f"{i}\tp{i}\t{WORDS[i % 8]}\t{WORDS[(i + 1) % 8]}\t{(i % 6) * 1.0}")
    (root / "sts-train.csv").write_text("\n".join(pairs + ["7\tx\ta\tb\tnot-a-number"]) + "\n")
    (root / "sts-dev.csv").write_text("\n".join(pairs[:13]) + "\n")
    quora = ["\tid\tsentence1\tsentence2\tis_duplicate"]
    for i in range(60):
        quora.append(f"{i}\tq{i}\t{WORDS[i % 8]} ?\t{WORDS[(i * 3) % 8]} ?\t{float(i % 2)}")
    quora.append('61\tq61\t"a man ?\t""the dog ?"\t')  # quotes as upstream, no label
    quora.append("62\tq62\tthe cat\thello\t")
    (root / "quora-dev.csv").write_text("\n".join(quora) + "\n")
    return root


@pytest.fixture
def folder(tmp_path):
    return _write_folder(tmp_path / "multitask")


# ------------------------------------------------------------------ heads
def _pair_batch(encoder, n=3):
    return make_batch(encoder, "similarity",
                      [(WORDS[i], WORDS[i + 1], 1.0 * i) for i in range(n)])


@pytest.mark.parametrize("sharing,num_head_vars", [
    ("first_layer", 12), ("none", 14), ("full", 10)])
def test_head_shapes_and_sharing(sharing, num_head_vars):
    encoder = make_tiny_encoder()
    model = MultitaskModel(encoder, head_sharing=sharing, hidden_dim=16)
    emb = model(encoder.preprocess(tf.constant(WORDS[:4])))
    assert emb.shape == (4, 32)
    assert model.sentiment_logits(emb).shape == (4, 5)
    assert model.paraphrase_logits(emb, emb).shape == (4,)
    assert model.similarity_cosine(emb, emb).shape == (4,)
    head_vars = model.head_variables()
    assert len(head_vars) == num_head_vars
    assert len({id(v) for v in head_vars}) == num_head_vars
    shared_first = model.paraphrase_first is model.similarity_first
    shared_second = model.paraphrase_second is model.similarity_second
    assert shared_first == (sharing != "none")
    assert shared_second == (sharing == "full")
    if sharing == "first_layer":
        # One set of weights: changing it through one head changes the other.
        kernel = model.paraphrase_first.kernel
        kernel.assign(kernel + 1.0)
        np.testing.assert_array_equal(model.similarity_first.kernel.numpy(), kernel.numpy())
        names = [v.path for v in head_vars]
        assert sum("pair_first" in n for n in names) == 2  # kernel + bias, once


def test_untrained_similarity_head_is_encoder_cosine():
    encoder = make_tiny_encoder()
    model = MultitaskModel(encoder)
    s1, s2 = WORDS[:3], WORDS[3:6]
    got = model.predict_similarity(s1, s2)
    u, v = encoder.encode(s1), encoder.encode(s2)
    cos = np.sum(u * v, 1) / np.linalg.norm(u, axis=1) / np.linalg.norm(v, axis=1)
    np.testing.assert_allclose(got, 5 * cos, rtol=1e-4, atol=1e-5)
    # Bilinear starts at the identity: logit = u . v
    prob = model.predict_paraphrase(s1, s2)
    np.testing.assert_allclose(prob, 1 / (1 + np.exp(-np.sum(u * v, 1))), rtol=1e-4)
    assert model.predict_sentiment(s1).shape == (3,)
    assert model.predict_sentiment(s1, return_probabilities=True).shape == (3, 5)
    with pytest.raises(ValueError, match="same length"):
        model.predict_similarity(s1, s2[:2])


def test_bad_arguments():
    encoder = make_tiny_encoder()
    with pytest.raises(ValueError, match="head_sharing"):
        MultitaskModel(encoder, head_sharing="half")
    with pytest.raises(ValueError, match="procedure"):
        task_schedule("alternate", 3)


# ----------------------------------------------------------------- PCGrad
def test_pcgrad_projects_conflicting_pair_closed_form():
    g = tf.constant([[1.0, 0.0], [-1.0, 1.0]])
    out = pcgrad_project(g, shuffle=False).numpy()
    # g1 - (g1.g2)/|g2|^2 g2 = [1,0] + 0.5 [-1,1]; g2 - (g2.g1)/|g1|^2 g1 = [0,1]
    np.testing.assert_allclose(out, [[0.5, 0.5], [0.0, 1.0]], atol=1e-7)
    # After projection each conflicting gradient is orthogonal to the other.
    assert abs(out[0] @ g.numpy()[1]) < 1e-6 and abs(out[1] @ g.numpy()[0]) < 1e-6
    np.testing.assert_allclose(pcgrad_combine(g, shuffle=False).numpy(), [0.5, 1.5])
    # With two tasks the order cannot matter.
    np.testing.assert_allclose(pcgrad_project(g, shuffle=True).numpy(), out, atol=1e-7)


def test_pcgrad_leaves_non_conflicting_gradients():
    g = tf.constant([[1.0, 2.0, 0.0], [0.5, 0.0, 3.0], [0.0, 1.0, 1.0]])
    np.testing.assert_allclose(pcgrad_project(g).numpy(), g.numpy())


def test_pcgrad_three_tasks_sequential_against_originals():
    g = np.array([[1.0, 0.0, 0.0], [-1.0, 1.0, 0.0], [-1.0, -1.0, 1.0]], np.float32)

    def reference(i, order):
        x = g[i].copy()
        for j in order:
            d = x @ g[j]
            if d < 0:
                x = x - d / (g[j] @ g[j]) * g[j]
        return x

    out = pcgrad_project(tf.constant(g), shuffle=False).numpy()
    for i in range(3):
        np.testing.assert_allclose(
            out[i], reference(i, [j for j in range(3) if j != i]), atol=1e-6)
    # Hand value for task 0: [1,0,0] -> vs g1: +0.5 g1 = [.5,.5,0];
    # vs g2: dot = -1, |g2|^2 = 3 -> + g2/3 = [1/6, 1/6, 1/3]
    np.testing.assert_allclose(out[0], [1 / 6, 1 / 6, 1 / 3], atol=1e-6)
    with pytest.raises(ValueError, match="num_tasks"):
        pcgrad_project(tf.constant([1.0, 2.0]))


def test_flatten_roundtrip():
    vs = [tf.Variable(tf.ones([2, 3])), tf.Variable(tf.zeros([4]))]
    flat = flatten_gradients([tf.fill([2, 3], 2.0), None], vs)
    assert flat.shape == (10,)
    back = unflatten_gradients(flat, vs)
    np.testing.assert_array_equal(back[0].numpy(), np.full([2, 3], 2.0))
    np.testing.assert_array_equal(back[1].numpy(), np.zeros([4]))


# -------------------------------------------------------------- schedules
def test_round_robin_schedules_visit_tasks_in_order():
    assert task_schedule("batch_round_robin", 7) == [
        ("sentiment",), ("paraphrase",), ("similarity",),
        ("sentiment",), ("paraphrase",), ("similarity",), ("sentiment",)]
    sched = task_schedule("epoch_round_robin", 8, steps_per_epoch=2)
    assert [s[0] for s in sched] == [
        "sentiment", "sentiment", "paraphrase", "paraphrase",
        "similarity", "similarity", "sentiment", "sentiment"]
    assert task_schedule("average", 2) == [("sentiment", "paraphrase", "similarity")] * 2
    assert task_schedule("single", 2, task="paraphrase") == [("paraphrase",)] * 2


# ------------------------------------------------------------------- data
def test_malformed_rows_skipped_with_count(folder):
    rows, skipped = read_sst(folder / "ids-sst-train.csv")
    assert len(rows) == 24 and skipped == 2
    rows, skipped = read_pair_file(folder / "sts-train.csv")
    assert len(rows) == 24 and skipped == 1
    data = load_multitask_data(folder, verbose=False)
    assert data["skipped"]["quora-dev.csv"] == 2
    assert data["skipped"]["ids-sst-train.csv"] == 2
    n = len(data["train"]["paraphrase"]) + len(data["dev"]["paraphrase"])
    assert n == 60


def test_quora_dev_split_by_id_hash():
    # The real file's row counts (20,212 pairs, 2 malformed) are checked in
    # tests/data/test_nli.py::test_shared_files where ../shared is present.
    ids = [str(i) for i in range(20000)]
    dev = [i for i in ids if in_quora_dev(i, 0.1)]
    assert 0.09 < len(dev) / len(ids) < 0.11
    # Deterministic and order-free: the side depends on the id alone.
    assert dev == sorted((i for i in reversed(ids) if in_quora_dev(i, 0.1)), key=int)
    assert not [i for i in ids if in_quora_dev(i, 0.0)]
    assert len([i for i in ids if in_quora_dev(i, 1.0)]) == len(ids)


def test_paraphrase_pretraining_hard_negatives():
    train = {"sentiment": [("x", 1)], "similarity": [("a", "b", 1.0)],
             "paraphrase": [("q1", "q2", 1.0), ("q1", "q3", 0.0), ("q4", "q5", 1.0),
                            ("q6", "q7", 0.0)]}
    cols = pretraining_examples("paraphrase", train)
    assert cols["anchor"] == ["q1", "q4"] and cols["positive"] == ["q2", "q5"]
    assert cols["negative"][0] == "q3"  # q1's own non-paraphrase
    assert cols["negative"][1] in ("q3", "q7")
    unsup = pretraining_examples("unsup", train)
    assert set(unsup["anchor"]) == {"x", "a", "b", "q1", "q2", "q3", "q4", "q5", "q6", "q7"}


# --------------------------------------------------------------- training
@pytest.mark.parametrize("procedure,fusion", [
    ("average", False), ("pcgrad", False), ("batch_round_robin", True)])
def test_train_procedures_update_weights(folder, procedure, fusion):
    data = load_multitask_data(folder, verbose=False)
    encoder = make_tiny_encoder(num_layers=1)
    model = MultitaskModel(encoder, hidden_dim=16)
    model.configure_training(1e-3, 1e-2)
    before = [v.numpy().copy() for v in model.head_variables()]
    log = train_multitask(model, data["train"], procedure=procedure, steps=3,
                          batch_size=4, fusion=fusion,
                          dev=data["dev"] if procedure == "average" else None,
                          eval_every=2, verbose=False)
    assert len(log["history"]) == 3
    assert all(np.isfinite(list(h.values())).all() for h in log["history"])
    if procedure == "batch_round_robin":
        assert [set(h) - {"nonfinite", "fusion_contrastive"} for h in log["history"]] == [
            {"sentiment"}, {"paraphrase"}, {"similarity"}]
        assert "fusion_contrastive" in log["history"][2]
    changed = [not np.allclose(b, v.numpy()) for b, v in zip(before, model.head_variables())]
    assert any(changed)
    if procedure == "average":
        assert [m["step"] for m in log["dev"]] == [2, 3]
        assert {"sentiment_acc", "paraphrase_acc", "similarity_pearson", "overall"} <= set(log["dev"][-1])


def test_fit_multitask_end_to_end_and_reload(folder, tmp_path):
    enc_dir = tmp_path / "tiny"
    make_tiny_encoder(num_layers=1).save(enc_dir)
    out = tmp_path / "out"
    model = fit_multitask(str(folder), model=str(enc_dir), output=str(out), steps=1,
                          batch_size=4, max_length=16, pretrain="paraphrase",
                          pretrain_steps=1, verbose=False)
    assert set(model.dev_metrics) >= {"overall", "similarity_pearson"}
    assert (out / "LEAKAGE_WARNING.txt").exists()
    from keras_sentemb.trainers.multitask import MultitaskModel as M
    again = M.load_from_folder(out)
    np.testing.assert_allclose(again.predict_similarity(WORDS[:2], WORDS[2:4]),
                               model.predict_similarity(WORDS[:2], WORDS[2:4]), rtol=1e-4, atol=1e-5)


def test_fit_multitask_refuses_stsb_test(folder):
    with pytest.raises(ValueError, match="STS-B"):
        fit_multitask(str(folder), evaluate_stsb_test=True)


def test_ensemble_picks_best_per_task():
    class Fake:
        def __init__(self, k):
            self.k = k

        def predict_similarity(self, a, b, **kw):
            return np.full(len(a), self.k)

    cands = {"a": Fake(1.0), "b": Fake(2.0)}
    metrics = {"a": {"sentiment_acc": 0.5, "paraphrase_acc": 0.9, "similarity_pearson": 0.1},
               "b": {"sentiment_acc": 0.6, "paraphrase_acc": 0.8, "similarity_pearson": 0.7}}
    ens = MultitaskEnsemble.from_metrics(cands, metrics)
    assert ens.chosen == {"sentiment": "b", "paraphrase": "a", "similarity": "b"}
    assert ens.predict_similarity(["x"], ["y"])[0] == 2.0
    with pytest.raises(ValueError, match="tasks"):
        MultitaskEnsemble({"sentiment": cands["a"]})


def test_evaluate_multitask_metrics(folder):
    data = load_multitask_data(folder, verbose=False)
    model = MultitaskModel(make_tiny_encoder())
    m = evaluate_multitask(model, data["dev"])
    assert 0 <= m["sentiment_acc"] <= 1 and 0 <= m["paraphrase_acc"] <= 1
    assert m["overall"] == pytest.approx(
        (m["sentiment_acc"] + m["paraphrase_acc"] + m["similarity_pearson"]) / 3)


def test_fit_multitask_signature_matches_cli_contract():
    import inspect

    params = inspect.signature(fit_multitask).parameters
    assert list(params)[0] == "data_dir"
    for name in ("model", "output", "steps", "batch_size", "learning_rate", "max_length"):
        assert name in params
    assert params["head_sharing"].default == "first_layer"
    assert params["evaluate_stsb_test"].default is False
