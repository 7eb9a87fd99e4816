"""Multitask heads, schedules, PCGrad, fusion, fit_multitask, resume (tiny models)."""

import inspect
import json
import subprocess
import sys
import textwrap
from collections import Counter

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.data.multitask import TASKS
from keras_sentemb.data.multitask import in_quora_dev
from keras_sentemb.data.multitask import load_multitask_data
from keras_sentemb.data.multitask import multitask_batches
from keras_sentemb.data.multitask import pretraining_examples
from keras_sentemb.data.multitask import read_pair_file
from keras_sentemb.data.multitask import read_sst
from keras_sentemb.data.multitask import schedule_sizes
from keras_sentemb.data.multitask import task_schedule
from keras_sentemb.data.multitask import tokenize_multitask
from keras_sentemb.evaluation.multitask_ensemble import MultitaskEnsemble
from keras_sentemb.evaluation.multitask import evaluate_multitask
from keras_sentemb.methods.multitask import fit_multitask
from keras_sentemb import compat
from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.trainers.base_trainer import BaseTrainer
from keras_sentemb.methods.multitask.trainer import MultitaskModel
from keras_sentemb.trainers.pcgrad import flatten_gradients
from keras_sentemb.trainers.pcgrad import pcgrad_combine
from keras_sentemb.trainers.pcgrad import pcgrad_project
from keras_sentemb.trainers.pcgrad import unflatten_gradients
from tests.conftest import REPO
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import MULTITASK_SENTENCES as WORDS
from tests.helpers.files import write_multitask_folder
from tests.helpers.models import make_still_encoder
from tests.numeric import assert_close_vectors


@pytest.fixture
def folder(tmp_path):
    return write_multitask_folder(tmp_path / "multitask")


def _element(encoder, sentiment=None, paraphrase=None, similarity=None, size=3):
    """One tokenized multitask batch; a task given as None is inactive."""
    rows = {"sentiment": sentiment, "paraphrase": paraphrase, "similarity": similarity}
    out = {}
    for task, examples in rows.items():
        active = examples is not None
        examples = examples or ([("", 0)] * size if task == "sentiment" else [("", "", 0.0)] * size)
        batch = {"label": tf.constant([e[-1] for e in examples],
                                      tf.int32 if task == "sentiment" else tf.float32),
                 "mask": tf.fill([len(examples)], 1.0 if active else 0.0)}
        columns = ("sentence",) if task == "sentiment" else ("sentence1", "sentence2")
        for i, name in enumerate(columns):
            batch[name] = tf.constant([e[i] for e in examples])
        out[task] = batch
    ds = tokenize_multitask(encoder, tf.data.Dataset.from_tensors(out), 16)
    return next(iter(ds))


def _snapshot(variables):
    return [np.array(v.numpy()) for v in variables]


# ------------------------------------------------------------------ heads
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


@pytest.mark.parametrize("sharing,groups", [
    ("first_layer", {("sentiment",): 4, ("paraphrase",): 4, ("similarity",): 2,
                     ("paraphrase", "similarity"): 2}),
    ("none", {("sentiment",): 4, ("paraphrase",): 6, ("similarity",): 4}),
    ("full", {("sentiment",): 4, ("paraphrase",): 2, ("paraphrase", "similarity"): 4}),
])
def test_head_groups_follow_the_tasks_using_each_variable(sharing, groups):
    model = MultitaskModel(make_tiny_encoder(num_layers=1), head_sharing=sharing, hidden_dim=8)
    got = model.head_groups()
    assert {tasks: len(vs) for tasks, vs in got} == groups
    flat = [id(v) for _, vs in got for v in vs]
    assert sorted(flat) == sorted(id(v) for v in model.head_variables())  # a partition
    shared = dict(got).get(("paraphrase", "similarity"), [])
    if sharing == "first_layer":
        assert {id(v) for v in shared} == {id(v) for v in model.paraphrase_first.weights}


def test_untrained_pair_heads_are_the_encoder_geometry():
    encoder = make_tiny_encoder()
    model = MultitaskModel(encoder, pooling="cls")
    s1, s2 = WORDS[:3], WORDS[3:6]
    got = model.predict_similarity(s1, s2)
    u, v = encoder.encode(s1, pooling="cls"), encoder.encode(s2, pooling="cls")
    cos = np.sum(u * v, 1) / np.linalg.norm(u, axis=1) / np.linalg.norm(v, axis=1)
    np.testing.assert_allclose(got, 5 * cos, rtol=1e-4, atol=1e-5)
    # Bilinear starts at the identity: logit = u . v
    prob = model.predict_paraphrase(s1, s2)
    np.testing.assert_allclose(prob, 1 / (1 + np.exp(-np.sum(u * v, 1))), rtol=1e-4)
    assert model.predict_sentiment(s1).shape == (3,)
    probs = model.predict_sentiment(s1, return_probabilities=True)
    np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match="same length"):
        model.predict_similarity(s1, s2[:2])


def test_bad_arguments():
    encoder = make_tiny_encoder(num_layers=1)
    with pytest.raises(ValueError, match="head_sharing"):
        MultitaskModel(encoder, head_sharing="half")
    with pytest.raises(ValueError, match="dropout"):
        MultitaskModel(encoder, dropout=1.0)
    with pytest.raises(ValueError, match="procedure"):
        task_schedule("alternate", 3)
    with pytest.raises(ValueError, match="single_task"):
        task_schedule("single", 3, single_task="nli")


def test_get_config_from_config_round_trip(tmp_path):
    encoder = make_tiny_encoder(num_layers=1)
    model = MultitaskModel(encoder, head_sharing="none", hidden_dim=8, dropout=0.2,
                           pooling="mean", pcgrad=True, pcgrad_shuffle=False, fusion=True,
                           fusion_temperature=0.1, seed=3, name="mt")
    config = model.get_config()
    assert {k: config[k] for k in config if k not in ("encoder", "config")} == {
        "name": "mt", "num_classes": 5, "pooling": "mean", "pcgrad": True,
        "pcgrad_shuffle": False, "fusion_temperature": 0.1, "seed": 3, "mini_batch_size": None}
    options = config["config"]  # the method's options, from its config
    assert {k: options[k] for k in ("head_sharing", "hidden_dim", "dropout", "fusion",
                                    "head_style")} == {
        "head_sharing": "none", "hidden_dim": 8, "dropout": 0.2, "fusion": True,
        "head_style": "residual"}
    json.dumps(config)  # plain JSON
    again = MultitaskModel.from_config(config)
    assert again.get_config() == config
    assert again.encoder is not encoder
    assert [v.shape for v in again.weights] == [v.shape for v in model.weights]
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(model))
    assert isinstance(restored, MultitaskModel) and restored.get_config() == config
    # A .keras archive (config + weights + the tokenizer's vocabulary asset).
    model.save(tmp_path / "mt.keras")
    loaded = keras.saving.load_model(tmp_path / "mt.keras")
    assert isinstance(loaded, MultitaskModel) and loaded.get_config() == config
    np.testing.assert_allclose(loaded.predict_similarity(WORDS[:2], WORDS[2:4]),
                               model.predict_similarity(WORDS[:2], WORDS[2:4]), rtol=1e-6)
    np.testing.assert_allclose(loaded.predict_paraphrase(WORDS[:2], WORDS[2:4]),
                               model.predict_paraphrase(WORDS[:2], WORDS[2:4]), rtol=1e-6)


# ----------------------------------------------------------------- PCGrad
def test_pcgrad_projects_conflicting_pair_closed_form():
    g = tf.constant([[1.0, 0.0], [-1.0, 1.0]])
    out = pcgrad_project(g, shuffle=False).numpy()
    # g1 - (g1.g2)/|g2|^2 g2 = [1,0] + 0.5 [-1,1]; g2 - (g2.g1)/|g1|^2 g1 = [0,1]
    np.testing.assert_allclose(out, [[0.5, 0.5], [0.0, 1.0]], atol=1e-7)
    assert abs(out[0] @ g.numpy()[1]) < 1e-6 and abs(out[1] @ g.numpy()[0]) < 1e-6
    np.testing.assert_allclose(pcgrad_combine(g, shuffle=False).numpy(), [0.5, 1.5])
    # With two tasks the order cannot matter.
    np.testing.assert_allclose(pcgrad_project(g, shuffle=True).numpy(), out, atol=1e-7)


def test_pcgrad_leaves_non_conflicting_gradients():
    g = tf.constant([[1.0, 2.0, 0.0], [0.5, 0.0, 3.0], [0.0, 1.0, 1.0]])
    np.testing.assert_allclose(pcgrad_project(g).numpy(), g.numpy())


def _pcgrad_reference(g, orders):
    """Algorithm 1 of Yu et al. in numpy: each task against the originals."""
    out = []
    for i, order in enumerate(orders):
        x = g[i].astype(np.float64).copy()
        for j in order:
            d = x @ g[j]
            if d < 0:
                x = x - d / (g[j] @ g[j] + 1e-12) * g[j]
        out.append(x)
    return np.stack(out)


def test_pcgrad_three_tasks_sequential_against_originals():
    g = np.array([[1.0, 0.0, 0.0], [-1.0, 1.0, 0.0], [-1.0, -1.0, 1.0]], np.float32)
    out = pcgrad_project(tf.constant(g), shuffle=False).numpy()
    np.testing.assert_allclose(out, _pcgrad_reference(g, [[1, 2], [0, 2], [0, 1]]), atol=1e-6)
    # Hand value for task 0: [1,0,0] -> vs g1: +0.5 g1 = [.5,.5,0];
    # vs g2: dot = -1, |g2|^2 = 3 -> + g2/3 = [1/6, 1/6, 1/3]
    np.testing.assert_allclose(out[0], [1 / 6, 1 / 6, 1 / 3], atol=1e-6)
    with pytest.raises(ValueError, match="num_tasks"):
        pcgrad_project(tf.constant([1.0, 2.0]))


def test_pcgrad_stateless_seed_is_a_pure_function_of_the_seed():
    g = np.array([[1.0, 0.0, 0.0], [-1.0, 2.0, 0.0], [-2.0, -1.0, 1.0]], np.float32)
    results = {}
    for step in range(6):
        seed = tf.constant([7, step], tf.int64)
        a = pcgrad_project(tf.constant(g), seed=seed).numpy()
        np.testing.assert_array_equal(a, pcgrad_project(tf.constant(g), seed=seed).numpy())
        # Every outcome is Algorithm 1 with some visiting order.
        refs = [_pcgrad_reference(g, [o0, o1, o2])
                for o0 in ([1, 2], [2, 1]) for o1 in ([0, 2], [2, 0]) for o2 in ([0, 1], [1, 0])]
        assert any(np.allclose(a, r, atol=1e-6) for r in refs)
        results[step] = a
    # Task 1's result depends on the order ([-2/3, 5/3, 1/3] after g0 then
    # g2, [0, 2, 0] after g2 then g0): both orders occur over the steps.
    assert {tuple(np.round(r[1].astype(np.float64), 4) + 0.0) for r in results.values()} == {
        (-0.6667, 1.6667, 0.3333), (0.0, 2.0, 0.0)}


def test_flatten_roundtrip():
    vs = [tf.Variable(tf.ones([2, 3])), tf.Variable(tf.zeros([4]))]
    flat = flatten_gradients([tf.fill([2, 3], 2.0), None], vs)
    assert flat.shape == (10,)
    back = unflatten_gradients(flat, vs)
    np.testing.assert_array_equal(back[0].numpy(), np.full([2, 3], 2.0))
    np.testing.assert_array_equal(back[1].numpy(), np.zeros([4]))


# -------------------------------------------------------------- schedules
def test_task_schedule_lists():
    assert task_schedule("batch_round_robin", 7) == [
        ("sentiment",), ("paraphrase",), ("similarity",),
        ("sentiment",), ("paraphrase",), ("similarity",), ("sentiment",)]
    sched = task_schedule("epoch_round_robin", 8, steps_per_epoch=2)
    assert [s[0] for s in sched] == [
        "sentiment", "sentiment", "paraphrase", "paraphrase",
        "similarity", "similarity", "sentiment", "sentiment"]
    assert task_schedule("average", 2) == [TASKS] * 2
    assert task_schedule("pcgrad", 2) == [TASKS] * 2
    assert task_schedule("single", 2, single_task="paraphrase") == [("paraphrase",)] * 2


def _stream(train, procedure, steps, batch_size=4, start_step=0, **kwargs):
    ds = multitask_batches(train, procedure, batch_size, seed=5, start_step=start_step, **kwargs)
    out = []
    for element in ds.take(steps):
        out.append({t: {k: v.numpy() for k, v in element[t].items()} for t in TASKS})
    return out


def _active(elements):
    return [tuple(t for t in TASKS if e[t]["mask"].all()) for e in elements]


@pytest.mark.parametrize("procedure,expected", [
    ("average", [TASKS] * 4),
    ("pcgrad", [TASKS] * 4),
    ("batch_round_robin", [("sentiment",), ("paraphrase",), ("similarity",)] * 2),
    # 24 rows per trained task at batch 4: epochs of 6 steps
    ("epoch_round_robin", [("sentiment",)] * 6 + [("paraphrase",)] * 6 + [("similarity",)] * 6
     + [("sentiment",)] * 2),
    ("single", [("paraphrase",)] * 3),
])
def test_dataset_schedules_task_order(folder, procedure, expected):
    train = load_multitask_data(folder, verbose=False)["train"]
    elements = _stream(train, procedure, len(expected), single_task="paraphrase")
    assert _active(elements) == expected
    for e in elements:
        for t in TASKS:
            mask = e[t]["mask"]
            assert mask.shape == (4,) and (mask.all() or not mask.any())
            if not mask.any():  # placeholder rows: empty sentences, label 0
                columns = [k for k in e[t] if k.startswith("sentence")]
                assert all(s == b"" for k in columns for s in e[t][k])
                assert not e[t]["label"].any()


def test_dataset_task_streams_and_resume(folder):
    train = load_multitask_data(folder, verbose=False)["train"]
    assert schedule_sizes(train, "average", 4) == (4, 24, 6)
    average = _stream(train, "average", 12)
    robin = _stream(train, "batch_round_robin", 9)
    epochs = _stream(train, "epoch_round_robin", 18)
    # Each task reads its own stream in order, whatever the schedule: the
    # k-th sentiment batch of round robin is the k-th of "average".
    for k in range(3):
        for t_index, t in enumerate(TASKS):
            mine = robin[3 * k + t_index][t]
            np.testing.assert_array_equal(mine["label"], average[k][t]["label"])
            first = "sentence" if t == "sentiment" else "sentence1"
            np.testing.assert_array_equal(mine[first], average[k][t][first])
            np.testing.assert_array_equal(epochs[6 * t_index + k][t][first], average[k][t][first])
    # One down-sampled epoch (6 batches) visits each row once: similarity has
    # 24 rows, all of them; paraphrase (52 rows) a subset of 24 distinct rows.
    def epoch_rows(task):
        return Counter((a, b, float(y)) for e in average[:6] for a, b, y in zip(
            e[task]["sentence1"], e[task]["sentence2"], e[task]["label"]))

    def train_rows(task):
        return Counter((a.encode(), b.encode(), float(y)) for a, b, y in train[task])

    assert epoch_rows("similarity") == train_rows("similarity")
    assert len(train["paraphrase"]) == 52  # 60 minus the hash-split dev pairs
    assert sum(epoch_rows("paraphrase").values()) == 24
    assert not epoch_rows("paraphrase") - train_rows("paraphrase")
    # Step-indexed: starting at step 7 gives elements 7, 8, ... of the full stream.
    resumed = _stream(train, "batch_round_robin", 2, start_step=7)
    for a, b in zip(resumed, robin[7:9]):
        for t in TASKS:
            for k in a[t]:
                np.testing.assert_array_equal(a[t][k], b[t][k])


# ------------------------------------------------------------------ data
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
    # A deterministic split by id hash: about a tenth of the ids, whatever the file.
    ids = [str(i) for i in range(20000)]
    dev = [i for i in ids if in_quora_dev(i, 0.1)]
    assert 0.09 < len(dev) / len(ids) < 0.11
    assert dev == sorted((i for i in reversed(ids) if in_quora_dev(i, 0.1)), key=int)
    assert not [i for i in ids if in_quora_dev(i, 0.0)]
    assert len([i for i in ids if in_quora_dev(i, 1.0)]) == len(ids)


def test_pretraining_examples_for_simcse():
    train = {"sentiment": [("x", 1)], "similarity": [("a", "b", 1.0)],
             "paraphrase": [("q1", "q2", 1.0), ("q1", "q3", 0.0), ("q4", "q5", 1.0),
                            ("q6", "q7", 0.0)]}
    cols = pretraining_examples("paraphrase", train)
    assert cols["sent0"] == ["q1", "q4"] and cols["sent1"] == ["q2", "q5"]
    assert cols["hard_neg"][0] == "q3"  # q1's own non-paraphrase
    assert cols["hard_neg"][1] in ("q3", "q7")
    unsup = pretraining_examples("unsup", train)
    assert unsup == {"sentence": ["x", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "a", "b"]}
    nli = pretraining_examples("nli", train, [("p", "e", "c")])
    assert nli == {"sent0": ["p"], "sent1": ["e"], "hard_neg": ["c"]}
    with pytest.raises(ValueError, match="mode"):
        pretraining_examples("mlm", train)


# --------------------------------------------------------------- training
def _adamw_step(w, g, m, v, t, lr, wd, b1=0.9, b2=0.999, eps=1e-7):
    """Keras AdamW, one update at 1-based step t (decay first, then Adam)."""
    w = w.astype(np.float64) * (1 - lr * wd)
    m = m + (g - m) * (1 - b1)
    v = v + (g * g - v) * (1 - b2)
    alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    return w - alpha * m / (np.sqrt(v) + eps)


def _task_gradients(model, element, variables):
    with tf.GradientTape(persistent=True) as tape:
        losses, _ = model.task_losses(element, training=True)
    grads = {t: [g if g is not None else tf.zeros_like(v)
                 for g, v in zip(tape.gradient(losses[t], variables), variables)] for t in TASKS}
    return {t: [np.asarray(tf.convert_to_tensor(g), np.float64) for g in gs]
            for t, gs in grads.items()}, losses


def test_round_robin_step_leaves_inactive_heads_untouched():
    encoder = make_still_encoder()
    model = MultitaskModel(encoder, hidden_dim=8, dropout=0.0, pooling="mean")
    lr, head_lr, wd = 1e-3, 1e-2, 0.01
    model.compile(keras.optimizers.AdamW(lr, weight_decay=wd),
                  head_optimizer=keras.optimizers.AdamW(head_lr, weight_decay=wd))
    groups = dict(model.head_groups())
    optimizers = dict(zip([t for t, _ in model.head_groups()], model.head_optimizers))
    sentiment = _element(encoder, sentiment=[(WORDS[i], i % 5) for i in range(3)])
    paraphrase = _element(encoder, paraphrase=[(WORDS[i], WORDS[i + 2], float(i % 2)) for i in range(3)])
    model.train_step(sentiment)  # step 0: sentiment only
    assert [int(o.iterations) for o in model.head_optimizers] == [1, 0, 0, 0]
    untouched = groups[("sentiment",)] + groups[("similarity",)]
    slots = [v for t in (("sentiment",), ("similarity",)) for v in optimizers[t].variables]
    before = _snapshot(untouched) + _snapshot(slots)
    trained = groups[("paraphrase",)] + groups[("paraphrase", "similarity")]
    w0 = _snapshot(trained)
    enc_vars = list(encoder.trainable_variables)
    enc_w0 = _snapshot(enc_vars)
    m0 = [np.array(model.optimizer._momentums[model.optimizer._get_variable_index(v)].numpy())
          for v in enc_vars]
    u0 = [np.array(model.optimizer._velocities[model.optimizer._get_variable_index(v)].numpy())
          for v in enc_vars]
    grads, losses = _task_gradients(model, paraphrase, enc_vars + trained)
    assert float(losses["sentiment"]) == 0.0 and float(losses["similarity"]) == 0.0
    logs = model.train_step(paraphrase)  # step 1: paraphrase only
    assert float(logs["nonfinite"]) == 0.0
    # Sentiment and similarity-only heads: weights, Adam moments and step
    # counts bit-identical (no momentum, no weight decay, no step).
    after = _snapshot(untouched) + _snapshot(slots)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
    assert [int(o.iterations) for o in model.head_optimizers] == [1, 1, 0, 1]
    assert int(model.optimizer.iterations) == 2
    # The paraphrase heads (own and shared first layer): AdamW's first step
    # at the head learning rate on the paraphrase gradient.
    g = grads["paraphrase"][len(enc_vars):]
    for w, var, gv in zip(w0, trained, g):
        expected = _adamw_step(w, gv, 0.0, 0.0, 1, head_lr, wd)
        np.testing.assert_allclose(var.numpy(), expected, rtol=1e-4, atol=1e-7)
    # The encoder: AdamW's second step at the encoder learning rate.
    for w, var, gv, m, u in zip(enc_w0, enc_vars, grads["paraphrase"][: len(enc_vars)], m0, u0):
        np.testing.assert_allclose(var.numpy(), _adamw_step(w, gv, m, u, 2, lr, wd),
                                   rtol=1e-4, atol=1e-7)


def test_pcgrad_step_equals_hand_computation_on_conflicting_tasks():
    encoder = make_still_encoder()
    lr = 0.5
    model = MultitaskModel(encoder, hidden_dim=8, dropout=0.0, pooling="mean",
                           pcgrad=True, pcgrad_shuffle=False)
    model.compile(keras.optimizers.SGD(lr), head_optimizer=keras.optimizers.SGD(lr))
    pairs = [(WORDS[i], WORDS[i + 1]) for i in range(3)]
    # Paraphrase says "same" (pull u . v up), similarity says "unrelated"
    # (push cos(u, v) to 0) on the same pairs: the encoder gradients conflict.
    element = _element(encoder, sentiment=[(WORDS[i], i) for i in range(3)],
                       paraphrase=[(a, b, 1.0) for a, b in pairs],
                       similarity=[(a, b, 0.0) for a, b in pairs])
    variables = list(encoder.trainable_variables) + [v for _, vs in model.head_groups() for v in vs]
    w0 = _snapshot(variables)
    grads, _ = _task_gradients(model, element, variables)
    flat = np.stack([np.concatenate([g.ravel() for g in grads[t]]) for t in TASKS])
    assert flat[1] @ flat[2] < 0  # paraphrase vs similarity: a conflicting pair
    projected = _pcgrad_reference(flat, [[1, 2], [0, 2], [0, 1]])
    # On the conflicting pair the projection removes the conflict exactly.
    p_para = _pcgrad_reference(flat[1:], [[1], [0]])[0]
    np.testing.assert_allclose(
        p_para, flat[1] - (flat[1] @ flat[2]) / (flat[2] @ flat[2]) * flat[2], rtol=1e-9)
    assert abs(p_para @ flat[2]) < 1e-6 * np.linalg.norm(flat[1]) * np.linalg.norm(flat[2])
    update = projected.mean(0)
    assert not np.allclose(update, flat.mean(0), rtol=1e-3)  # PCGrad differs from the mean
    model.train_step(element)
    got = np.concatenate([np.asarray(v.numpy(), np.float64).ravel() - w.ravel()
                          for v, w in zip(variables, w0)])
    np.testing.assert_allclose(got, -lr * update, rtol=2e-3, atol=1e-7)


def test_the_step_is_the_base_template_and_only_the_seeding_differs():
    """MultitaskModel trains through BaseTrainer's hooks; its seeds are its own (`seed_state`)."""
    assert MultitaskModel.train_step is BaseTrainer.train_step
    assert MultitaskModel.test_step is BaseTrainer.test_step
    encoder = make_tiny_encoder(num_layers=1)  # with dropout: seed generators to set
    model = MultitaskModel(encoder, hidden_dim=8, pooling="mean", seed=3)
    model.compile(keras.optimizers.AdamW(1e-3))
    model.optimizer.iterations.assign(5)
    model._reseed()
    states = compat.seed_generator_states(model)
    assert len(states) > 2
    got = [v.numpy().tolist() for v in states]
    assert got == [[3 * 100_003 + i, 5 * 4096] for i in range(len(states))]
    # The other trainers' scheme (each generator's own seed) would draw other masks.
    step = tf.constant(5, tf.int64)
    other = [BaseTrainer.seed_state(model, i, v, step).numpy().tolist() for i, v in enumerate(states)]
    assert other != got
    batch = _element(encoder, sentiment=[(WORDS[i], i % 5) for i in range(3)])
    out = model.compute_loss_terms(batch, training=False)
    assert isinstance(out, LossOutput) and sorted(out.aux["task_losses"]) == sorted(TASKS)
    assert float(out.loss) == pytest.approx(float(out.metrics["sentiment_loss"]))
    assert [bool(out.aux["active"][t]) for t in TASKS] == [t == "sentiment" for t in TASKS]


def test_fusion_trains_only_on_similarity_steps():
    encoder = make_still_encoder()
    reference = MultitaskModel(encoder.clone(), hidden_dim=8, dropout=0.0, pooling="mean")
    model = MultitaskModel(encoder, hidden_dim=8, dropout=0.0, pooling="mean", fusion=True)
    for m in (reference, model):
        m.compile(keras.optimizers.AdamW(1e-3), head_optimizer=keras.optimizers.AdamW(1e-2))
        m.set_weights(model.get_weights())
    step = _element(encoder, sentiment=[(WORDS[i], i) for i in range(3)])
    model.train_step(step)
    reference.train_step(step)
    # No similarity batch: the fusion update is skipped and not counted, and
    # the model equals the one trained without fusion.
    assert int(model.fusion_optimizer.iterations) == 0
    for a, b in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_array_equal(a, b)
    sim = _element(encoder, similarity=[(WORDS[i], WORDS[i + 3], 2.0) for i in range(3)])
    model.train_step(sim)
    reference.train_step(sim)
    assert int(model.fusion_optimizer.iterations) == 1 and int(model.optimizer.iterations) == 2
    # The encoder took the supervised step (the reference's result) and then
    # one SimCSE step: AdamW's first step (the encoder optimizer's settings:
    # lr 1e-3, Keras' default decay 0.004) on the fusion gradient there.
    supervised = reference.encoder.trainable_variables
    with tf.GradientTape() as tape:
        loss = reference.fusion_loss(sim, training=True)
    grads = tape.gradient(loss, supervised)
    assert float(loss) > 0
    for var, w, g in zip(encoder.trainable_variables, supervised, grads):
        g = np.asarray(tf.convert_to_tensor(g), np.float64)
        expected = _adamw_step(w.numpy(), g, 0.0, 0.0, 1, 1e-3, 0.004)
        np.testing.assert_allclose(var.numpy(), expected, rtol=1e-4, atol=1e-6)
    # The heads are the reference's (fusion only moves the encoder).
    for a, b in zip(model.head_variables(), reference.head_variables()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_mixed_precision_heads_follow_the_loss_scale_optimizer(folder):
    train = load_multitask_data(folder, verbose=False)["train"]
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        encoder = make_tiny_encoder(num_layers=1)
        model = MultitaskModel(encoder, hidden_dim=8, pcgrad=True)
        model.compile(keras.optimizers.AdamW(1e-3), head_optimizer=keras.optimizers.AdamW(1e-2))
        ds = tokenize_multitask(encoder, multitask_batches(train, "pcgrad", 4), 16)
        logs = model.fit(ds, steps_per_epoch=4, epochs=1, verbose=0).history
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert logs["nonfinite"] == [0.0] and np.isfinite(logs["loss"][0])
    counted = int(model.optimizer.iterations)
    assert counted >= 1
    # Every fp16 overflow halves the scale and is not counted, by the
    # encoder's optimizer and by the heads' alike.
    assert float(model.optimizer.dynamic_scale) == 32768.0 / 2 ** (4 - counted)
    assert [int(o.iterations) for o in model.head_optimizers] == [counted] * 4
    assert all(v.dtype == "float32" for v in model.head_variables())


MIRRORED = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from pathlib import Path
    import numpy as np, keras
    from tests.helpers.files import write_multitask_folder
    from tests.helpers.models import make_still_encoder
    from keras_sentemb.data.multitask import load_multitask_data, multitask_batches, tokenize_multitask
    from keras_sentemb.methods.multitask.trainer import MultitaskModel
    train = load_multitask_data(write_multitask_folder(Path({folder!r})), verbose=False)["train"]
    procedure = "batch_round_robin"
    class Trail(keras.callbacks.Callback):  # weights and running loss after every step
        def on_train_begin(self, logs=None):
            self.weights, self.losses = [], []
        def on_train_batch_end(self, batch, logs=None):
            self.weights.append(np.concatenate([np.ravel(w) for w in self.model.get_weights()]))
            self.losses.append(float(logs["loss"]))
    def run(strategy):
        with strategy.scope():
            enc = make_still_encoder()
            # PCGrad on the all-reduced task gradients, fusion, and groups
            # of heads switched on and off by the round-robin masks.
            m = MultitaskModel(enc, hidden_dim=8, dropout=0.0, pcgrad=True, fusion=True)
            m.compile(keras.optimizers.AdamW(1e-3), head_optimizer=keras.optimizers.AdamW(1e-2))
        start = np.concatenate([np.ravel(w) for w in m.get_weights()])
        ds = tokenize_multitask(enc, multitask_batches(train, procedure, 4, seed=0), 16)
        trail = Trail()
        m.fit(ds, steps_per_epoch=3, epochs=1, verbose=0, callbacks=[trail])
        optimizers = m.head_optimizers + [m.optimizer, m.fusion_optimizer]
        counts = [int(o.iterations.numpy()) for o in optimizers]
        return trail, counts, start
    t1, c1, s1 = run(tf.distribute.get_strategy())
    assert c1 == [1, 1, 1, 2, 3, 1], c1  # head groups, encoder, fusion
    t2, c2, s2 = run(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
    assert np.array_equal(s1, s2)
    assert c1 == c2, (c1, c2)
    # The loss and the path through weight space after every step, each
    # relative to its own scale: Adam moves a weight by about the learning
    # rate whatever its gradient's size, so an absolute bound on weights
    # would depend on the CPU's rounding of tiny gradients.
    for step, (l1, l2, w1, w2) in enumerate(zip(t1.losses, t2.losses, t1.weights, t2.weights)):
        moved = float(np.linalg.norm(w1 - s1))
        apart = float(np.linalg.norm(w1 - w2))
        print(procedure, step, l1, l2, moved, apart, apart / moved)
        assert abs(l1 - l2) < 1e-5 * max(1.0, abs(l1)), (step, l1, l2)
        assert moved > 0 and apart < 1e-2 * moved, (step, moved, apart)
    print("OK")
    """
)


def test_mirrored_strategy_matches_single_device(tmp_path):
    """2 CPU replicas train as one device: round-robin masks, per-group head
    optimizers, PCGrad on the all-reduced task gradients, fusion."""
    script = tmp_path / "mirrored.py"
    script.write_text(MIRRORED.format(repo=str(REPO), folder=str(tmp_path / "multitask")))
    result = subprocess.run([sys.executable, str(script)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "OK" in result.stdout


# ----------------------------------------------------------- fit_multitask
def _tiny_model_dir(tmp_path):
    path = tmp_path / "tiny"
    if not path.exists():
        make_tiny_encoder(num_layers=1).save(path)
    return str(path)


def test_fit_multitask_end_to_end_resume_and_reload(folder, tmp_path):
    """fit_multitask on a tiny folder; then killed mid-way and rerun with the
    same command: the same weights as the uninterrupted run; save / reload."""
    from keras_sentemb.models import SentenceEncoder

    out = tmp_path / "out"
    common = dict(model=_tiny_model_dir(tmp_path), steps=6, batch_size=4, max_length=16,
                  eval_every=2, verbose=0, procedure="batch_round_robin", fusion=True,
                  pretrain="paraphrase", pretrain_steps=2, seed=3)
    whole = fit_multitask(str(folder), output=str(out), **common)
    assert isinstance(whole, MultitaskModel)
    assert int(whole.optimizer.iterations) == 6
    # Round robin over 6 steps: each task's heads trained twice, the shared
    # pair layer 4 times, fusion on the 2 similarity steps.
    assert [int(o.iterations) for o in whole.head_optimizers] == [2, 2, 2, 4]
    assert int(whole.fusion_optimizer.iterations) == 2
    report = whole.training_report
    assert report.pooling == "cls" and whole.encoder.pooling == "cls" and whole.pooling == "cls"
    assert (report.steps, report.steps_trained) == (8, 8)
    assert [s["stage"] for s in report.extras["stages"]] == ["pretrain", "multitask"]
    assert [s["steps_trained"] for s in report.extras["stages"]] == [2, 6]
    assert [h[0] for h in report.selection["history"]] == [0, 2, 4, 6]
    data = load_multitask_data(folder, verbose=False)
    fresh = evaluate_multitask(whole, data["dev"])
    for key, value in fresh.items():  # the kept (restored) model's metrics
        assert whole.dev_metrics[key] == pytest.approx(value, abs=1e-6)
    assert report.selection["kept_score"] == pytest.approx(fresh["overall"], abs=1e-4)
    assert report.extras["dev_metrics"] == whole.dev_metrics

    # Saved folder: encoder + heads; also a plain encoder with its pooling.
    assert (out / "LEAKAGE_WARNING.txt").exists() and (out / "training_report.json").exists()
    again = MultitaskModel.load_from_folder(out)
    assert again.pooling == "cls"
    np.testing.assert_allclose(again.predict_similarity(WORDS[:2], WORDS[2:4]),
                               whole.predict_similarity(WORDS[:2], WORDS[2:4]), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(again.predict_sentiment(WORDS[:4], return_probabilities=True),
                               whole.predict_sentiment(WORDS[:4], return_probabilities=True),
                               rtol=1e-4, atol=1e-6)
    plain = SentenceEncoder.from_preset(str(out))
    assert plain.pooling == "cls"
    assert_close_vectors(plain.encode(WORDS[:3]), whole.encoder.encode(WORDS[:3]), rtol=1e-5)

    # Kill at step 5 (after the step-4 backup), rerun the same command.
    class Interrupt(keras.callbacks.Callback):
        fired = False

        def on_train_batch_end(self, batch, logs=None):
            if (isinstance(self.model, MultitaskModel) and not Interrupt.fired
                    and int(self.model.optimizer.iterations) == 5):
                Interrupt.fired = True
                raise RuntimeError("killed")

    class Steps(keras.callbacks.Callback):
        seen = []

        def on_train_batch_begin(self, batch, logs=None):
            if isinstance(self.model, MultitaskModel):
                Steps.seen.append(int(self.model.optimizer.iterations))

    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), save_freq="epoch")
    callbacks = [backup, Interrupt(), Steps()]
    with pytest.raises(RuntimeError, match="killed"):
        fit_multitask(str(folder), callbacks=callbacks, **common)
    assert Steps.seen == [0, 1, 2, 3, 4]
    Steps.seen = []
    resumed = fit_multitask(str(folder), callbacks=callbacks, **common)
    assert Steps.seen == [4, 5]  # from the step-4 backup, without pre-training again
    assert int(resumed.optimizer.iterations) == 6
    assert resumed.training_report.steps_trained == 6
    assert [int(o.iterations) for o in resumed.head_optimizers] == [2, 2, 2, 4]
    assert int(resumed.fusion_optimizer.iterations) == 2
    for a, b in zip(resumed.get_weights(), whole.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for o1, o2 in zip(resumed.head_optimizers + [resumed.optimizer, resumed.fusion_optimizer],
                      whole.head_optimizers + [whole.optimizer, whole.fusion_optimizer]):
        for a, b in zip(o1.variables, o2.variables):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)
    # The dev selection continued from its saved state.
    assert resumed.training_report.selection["history"] == report.selection["history"]
    assert resumed.dev_metrics == pytest.approx(whole.dev_metrics)


def test_fit_multitask_refuses_stsb_test_and_bad_options(folder):
    with pytest.raises(ValueError, match="STS-B"):
        fit_multitask(str(folder), evaluate_stsb_test=True)
    with pytest.raises(ValueError, match="procedure"):
        fit_multitask(str(folder), procedure="alternate")
    with pytest.raises(ValueError, match="pretrain"):
        fit_multitask(str(folder), pretrain="mlm")
    with pytest.raises(ValueError, match="head_learning_rate"):
        fit_multitask(str(folder), head_learning_rate=0)


def test_fit_multitask_signature_follows_the_scaffold():
    from keras_sentemb.pipelines.arguments import SHARED_NAMES

    params = list(inspect.signature(fit_multitask).parameters)
    assert params[0] == "data"
    assert params[1: 1 + len(SHARED_NAMES)] == list(SHARED_NAMES)
    defaults = {k: v.default for k, v in inspect.signature(fit_multitask).parameters.items()}
    assert defaults["dev"] == "multitask" and defaults["pooling"] == "auto"
    assert defaults["head_sharing"] == "first_layer" and defaults["evaluate_stsb_test"] is False
    for name in ("procedure", "single_task", "fusion", "pretrain", "pretrain_steps",
                 "pretrain_learning_rate", "pretrain_temperature", "nli_file",
                 "head_learning_rate", "hidden_dim", "dropout", "quora_dev_fraction", "dev_limit"):
        assert name in defaults


# ---------------------------------------------------------- evaluation
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
    model = MultitaskModel(make_tiny_encoder(num_layers=1))
    m = evaluate_multitask(model, data["dev"])
    rows = data["dev"]["sentiment"]
    pred = model.predict_sentiment([r[0] for r in rows])
    assert m["sentiment_acc"] == pytest.approx(np.mean(pred == [r[1] for r in rows]))
    assert m["overall"] == pytest.approx(
        (m["sentiment_acc"] + m["paraphrase_acc"] + m["similarity_pearson"]) / 3)
    small = evaluate_multitask(model, data["dev"], limit=4)
    pred = model.predict_sentiment([r[0] for r in rows[:4]])
    assert small["sentiment_acc"] == pytest.approx(np.mean(pred == [r[1] for r in rows[:4]]))
