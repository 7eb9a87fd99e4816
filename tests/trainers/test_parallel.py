import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.trainers.memory_queue import MemoryQueue
from keras_sentemb.trainers.parallel import ParallelContrastive
from keras_sentemb.trainers.parallel import fit_parallel
from keras_sentemb.trainers.parallel import load_parallel_pairs
from keras_sentemb.trainers.parallel import make_optimizer
from keras_sentemb.trainers.parallel import split_pairs
from tests.conftest import REPO, make_tiny_encoder

WORDS = ["a", "the", "man", "woman", "is", "playing", "guitar", "piano", "dog",
         "cat", "runs", "sits", "on", "mat", "park", "in", "and"]


def make_pairs(n, seed=0):
    rng = np.random.default_rng(seed)
    pairs = []
    for i in range(n):
        words = rng.choice(WORDS, size=rng.integers(2, 7))
        src = " ".join(words) + f" {i}"  # unique sources
        tgt = " ".join(["中" if w in ("a", "the", "is") else "文" for w in words] + list(words[::-1]))
        pairs.append((src, tgt + f" {i}"))
    return pairs


def make_trainer(**kwargs):
    teacher = make_tiny_encoder(num_layers=1)
    student = teacher.clone(name="student")
    mode = kwargs.get("mode", "frozen_teacher")
    return ParallelContrastive(student, None if mode == "shared" else teacher, **kwargs)


def batch(trainer, pairs):
    return {
        "source": trainer.teacher.preprocess(tf.constant([a for a, _ in pairs])),
        "target": trainer.student.preprocess(tf.constant([b for _, b in pairs])),
    }


def compile_trainer(trainer, lr=1e-3, steps=10):
    trainer.compile(optimizer=make_optimizer(trainer, lr, steps, warmup_ratio=0.0), jit_compile=False)


def run_steps(trainer, n, batch_size=8, seed=0):
    """Eager train steps (no tf.function tracing: fast for tiny encoders)."""
    pairs = make_pairs(n * batch_size, seed=seed)
    for i in range(n):
        trainer.train_step(batch(trainer, pairs[i * batch_size : (i + 1) * batch_size]))


# ------------------------------------------------------------------ queue
def test_queue_order_and_wrap_around():
    q = MemoryQueue(size=3, dim=2)
    assert q.contents().shape == (0, 2)
    q.enqueue(tf.constant([[1.0, 1.0], [2.0, 2.0]]))
    np.testing.assert_array_equal(q.ordered().numpy(), [[1, 1], [2, 2]])
    assert int(q.count.numpy()) == 2 and int(q.pointer.numpy()) == 2
    q.enqueue(tf.constant([[3.0, 3.0], [4.0, 4.0]]))  # wraps: 4 overwrites 1
    np.testing.assert_array_equal(q.contents().numpy(), [[4, 4], [2, 2], [3, 3]])
    np.testing.assert_array_equal(q.ordered().numpy(), [[2, 2], [3, 3], [4, 4]])
    assert int(q.count.numpy()) == 3 and int(q.pointer.numpy()) == 1
    q.enqueue(tf.constant([[5.0, 5.0]]))
    np.testing.assert_array_equal(q.ordered().numpy(), [[3, 3], [4, 4], [5, 5]])
    # More rows than slots: only the newest `size` rows are kept, in order.
    q.enqueue(tf.constant([[6.0, 6.0], [7.0, 7.0], [8.0, 8.0], [9.0, 9.0]]))
    np.testing.assert_array_equal(q.ordered().numpy(), [[7, 7], [8, 8], [9, 9]])
    q.reset()
    assert int(q.count.numpy()) == 0
    assert MemoryQueue.from_config(q.get_config()).size == 3
    with pytest.raises(ValueError, match="positive int"):
        MemoryQueue(size=0, dim=2)
    with pytest.raises(ValueError, match=r"\[n, 2\]"):
        q.enqueue(tf.zeros([2, 3]))


def test_queue_in_tf_function():
    q = MemoryQueue(size=4, dim=1)

    @tf.function
    def push(x):
        q.enqueue(x)
        return q.ordered()

    for i in range(3):
        out = push(tf.constant([[2.0 * i], [2.0 * i + 1]]))
    np.testing.assert_array_equal(out.numpy()[:, 0], [2, 3, 4, 5])
    # A batch with a NaN (a skipped training step) is dropped, in graph mode too.
    out = push(tf.constant([[7.0], [np.nan]]))
    np.testing.assert_array_equal(out.numpy()[:, 0], [2, 3, 4, 5])
    assert int(q.pointer.numpy()) == 2 and int(q.count.numpy()) == 4
    out = push(tf.constant([[8.0], [9.0]]))
    np.testing.assert_array_equal(out.numpy()[:, 0], [4, 5, 8, 9])


# ------------------------------------------------------------------- loss
def _numpy_loss(queries, candidates, scale):
    logits = queries @ candidates.T * scale
    logits = logits - logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return float(-np.mean(np.diag(logp[:, : queries.shape[0]])))


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize("pooling", ["cls_mlp", "mean"])
def test_loss_equals_closed_form_with_queue(pooling):
    trainer = make_trainer(queue_size=5, temperature=0.05, pooling=pooling)
    pairs = make_pairs(4)
    data = batch(trainer, pairs)
    t = _unit(trainer.teacher(data["source"]).numpy().astype(np.float64))
    pool = "mean" if pooling == "mean" else "cls"
    s = _unit(trainer.student(data["target"], pooling=pool).numpy().astype(np.float64))
    # Hard queued negatives (near the student's embeddings), so they matter.
    rng = np.random.default_rng(1)
    queued = _unit(s[:3] + 0.01 * rng.normal(size=(3, s.shape[1]))).astype("float32")
    trainer.queue.enqueue(tf.constant(queued))
    loss, extras = trainer.compute_contrastive_loss(data, training=False)
    expected = _numpy_loss(s, np.concatenate([t, queued]), 20.0)
    assert float(loss) == pytest.approx(expected, rel=1e-4)
    # The queue really enters the loss: without it the value differs.
    without = _numpy_loss(s, t, 20.0)
    assert abs(expected - without) > 1e-4
    assert float(extras["temperature"]) == pytest.approx(0.05)
    assert float(extras["queue_fill"]) == 3


def test_train_step_enqueues_teacher_embeddings_after_loss():
    trainer = make_trainer(queue_size=6, temperature=0.05)
    compile_trainer(trainer)
    pairs = make_pairs(4)
    data = batch(trainer, pairs)
    logs = trainer.train_step(data)
    assert float(logs["queue_fill"]) == 0.0  # loss saw an empty queue
    t = _unit(trainer.teacher(data["source"]).numpy())
    np.testing.assert_allclose(trainer.queue.ordered().numpy(), t, atol=1e-5)
    trainer.train_step(data)
    assert int(trainer.queue.count.numpy()) == 6  # 8 rows into 6 slots
    np.testing.assert_allclose(trainer.queue.ordered().numpy()[-4:], t, atol=1e-5)


# --------------------------------------------------------- frozen teacher
def test_teacher_never_changes_and_student_learns():
    trainer = make_trainer(queue_size=16)
    teacher_before = [w.copy() for w in trainer.teacher.get_weights()]
    student_before = [w.copy() for w in trainer.student.get_weights()]
    teacher_ids = {id(v) for v in trainer.teacher.weights}
    assert not teacher_ids & {id(v) for v in trainer.trainable_variables}
    compile_trainer(trainer, lr=1e-2, steps=4)
    run_steps(trainer, 4)
    for a, b in zip(teacher_before, trainer.teacher.get_weights()):
        np.testing.assert_array_equal(a, b)
    changed = [not np.array_equal(a, b) for a, b in zip(student_before, trainer.student.get_weights())]
    assert any(changed)
    assert int(trainer.queue.count.numpy()) == 16


# ------------------------------------------------------------ temperature
def test_learnable_temperature_is_learned_and_clamped():
    trainer = make_trainer(queue_size=0)
    assert float(trainer.logit_scale.numpy()) == pytest.approx(math.log(1 / 0.07), rel=1e-6)
    optimizer = make_optimizer(trainer, 5e-2, 20, warmup_ratio=0.0)
    trainer.compile(optimizer=optimizer, jit_compile=False)
    run_steps(trainer, 5)
    value = float(trainer.logit_scale.numpy())
    assert value != pytest.approx(math.log(1 / 0.07), abs=1e-4)  # learned
    assert 0.0 <= value <= math.log(100.0) + 1e-6
    # Excluded from weight decay.
    assert not optimizer._use_weight_decay(trainer.logit_scale)
    # The clamp acts after every update, from above and below.
    for start, bound in ((10.0, math.log(100.0)), (-3.0, 0.0)):
        trainer.logit_scale.assign(start)
        run_steps(trainer, 1, seed=1)
        assert float(trainer.logit_scale.numpy()) == pytest.approx(bound, abs=0.06)
        assert 0.0 <= float(trainer.logit_scale.numpy()) <= math.log(100.0) + 1e-6


def test_fixed_temperature_has_no_variable():
    trainer = make_trainer(temperature=0.01)
    assert trainer.logit_scale is None
    assert float(trainer.current_logit_scale()) == pytest.approx(100.0)
    assert make_trainer(temperature="0.05").fixed_temperature == 0.05


# ------------------------------------------------------------- baselines
def test_dual_mode_trains_both_sides():
    trainer = make_trainer(mode="dual", queue_size=8)
    before = [w.copy() for w in trainer.teacher.get_weights()]
    compile_trainer(trainer, lr=1e-2)
    run_steps(trainer, 2, batch_size=4)
    assert any(not np.array_equal(a, b) for a, b in zip(before, trainer.teacher.get_weights()))
    assert trainer.source_mlp is not None


def test_shared_mode_uses_one_encoder():
    trainer = make_trainer(mode="shared", queue_size=8)
    assert trainer.teacher is trainer.student
    n_student = len(trainer.student.trainable_variables)
    # student weights + target MLP (kernel, bias) + logit scale, no duplicates.
    assert len(trainer.trainable_variables) == n_student + 3
    compile_trainer(trainer)
    run_steps(trainer, 2, batch_size=4)
    assert int(trainer.queue.count.numpy()) == 8
    assert trainer.finalize().pooling == "cls"


def test_argument_validation():
    teacher = make_tiny_encoder()
    with pytest.raises(ValueError, match="mode"):
        ParallelContrastive(teacher.clone(), teacher, mode="both")
    with pytest.raises(ValueError, match="pooling"):
        ParallelContrastive(teacher.clone(), teacher, pooling="max")
    with pytest.raises(ValueError, match="temperature"):
        ParallelContrastive(teacher.clone(), teacher, temperature="hot")
    with pytest.raises(ValueError, match="temperature"):
        ParallelContrastive(teacher.clone(), teacher, temperature=-1.0)
    with pytest.raises(ValueError, match="queue_size"):
        ParallelContrastive(teacher.clone(), teacher, queue_size=-1)
    with pytest.raises(ValueError, match="teacher"):
        ParallelContrastive(teacher.clone(), None)
    with pytest.raises(ValueError, match="separate"):
        ParallelContrastive(teacher, teacher)


# ------------------------------------------------------------------ data
def test_load_pairs_tsv_with_extra_columns_list_and_dataset(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("Hi.\t嗨。\tCC-BY attribution\nRun.\t跑。\n\nbad line\n", encoding="utf-8")
    assert load_parallel_pairs(str(path)) == [("Hi.", "嗨。"), ("Run.", "跑。")]
    assert load_parallel_pairs([("a", "b"), ["c", "d", "x"]]) == [("a", "b"), ("c", "d")]
    ds = tf.data.Dataset.from_tensor_slices((["a", "c"], ["b", "d"]))
    assert load_parallel_pairs(ds) == [("a", "b"), ("c", "d")]
    ds = tf.data.Dataset.from_tensor_slices({"source": ["a"], "target": ["b"]})
    assert load_parallel_pairs(ds) == [("a", "b")]
    with pytest.raises(ValueError, match="tuple"):
        load_parallel_pairs(["ab"])
    with pytest.raises(FileNotFoundError):
        load_parallel_pairs(str(tmp_path / "missing.tsv"))


def test_split_is_deterministic_and_leak_free():
    pairs = make_pairs(200)
    pairs += [(pairs[0][0], "another translation"), ("new source", pairs[1][1])]
    train, held = split_pairs(pairs, eval_size=20, seed=0)
    train2, held2 = split_pairs(list(reversed(pairs)), eval_size=20, seed=0)
    assert held == held2 and sorted(train) == sorted(train2)
    assert len(held) == 20
    held_src = {a for a, _ in held}
    held_tgt = {b for _, b in held}
    assert not any(a in held_src or b in held_tgt for a, b in train)
    assert split_pairs(pairs, eval_size=20, seed=1)[1] != held


# ----------------------------------------------------------------- fit api
def test_fit_parallel_end_to_end(tmp_path):
    from keras_sentemb.models import SentenceEncoder

    teacher = make_tiny_encoder(num_layers=1)
    teacher.trainable = False  # a frozen encoder still initialises a trainable student
    teacher_weights = [w.copy() for w in teacher.get_weights()]
    out = tmp_path / "student"
    student = fit_parallel(
        make_pairs(80), model=teacher, output=str(out), steps=4, batch_size=8,
        queue_size=32, max_length=16, eval_size=10, track_every=2, verbose=0,
    )
    assert student is not teacher and student.pooling == "cls"
    for a, b in zip(teacher_weights, teacher.get_weights()):
        np.testing.assert_array_equal(a, b)  # the caller's encoder is untouched
    assert any(not np.array_equal(a, b) for a, b in zip(teacher_weights, student.get_weights()))
    report = student.parallel_report
    assert set(report["retrieval_before"]) >= {"source_to_target", "target_to_source"}
    assert report["retrieval_after"]["n"] == 10
    assert [h["step"] for h in report["alignment_uniformity"]] == [0, 2, 4]
    assert 0 < report["final_temperature"] < 1
    assert os.path.exists(out / "alignment_uniformity.png")
    assert json.loads((out / "parallel_report.json").read_text())["heldout_pairs"] == 10
    loaded = SentenceEncoder.from_preset(str(out))
    assert loaded.pooling == "cls"
    np.testing.assert_allclose(loaded.encode(["a man"]), student.encode(["a man"]), atol=1e-5)


def test_fit_parallel_validation():
    with pytest.raises(ValueError, match="mode"):
        fit_parallel([("a", "b")] * 10, model=make_tiny_encoder(), mode="x")
    with pytest.raises(ValueError, match="temperature"):
        fit_parallel([("a", "b")] * 10, model=make_tiny_encoder(), temperature="warm")
    with pytest.raises(ValueError, match="steps"):
        fit_parallel([("a", "b")] * 10, model=make_tiny_encoder(), steps=0)


# ------------------------------------------------------------ tf.distribute
MIRRORED = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras, numpy as np
    from tests.conftest import make_tiny_encoder
    from tests.trainers.test_parallel import make_pairs
    from keras_sentemb.trainers.parallel import ParallelContrastive, make_optimizer

    def run(strategy, mode):
        with strategy.scope():
            teacher = make_tiny_encoder(num_layers=1)
            student = teacher.clone(name="student")
            for encoder in (teacher, student):  # dropout masks differ per device
                for layer in encoder.backbone._flatten_layers():
                    if isinstance(layer, keras.layers.Dropout):
                        layer.rate = 0.0
            trainer = ParallelContrastive(student, teacher, mode=mode, queue_size=12, pooling="mean")
            start = [w.copy() for w in student.get_weights()]
            trainer.compile(optimizer=make_optimizer(trainer, 1e-2, 5, warmup_ratio=0.0))
        pairs = make_pairs(40)
        ds = tf.data.Dataset.from_tensor_slices(
            {{"source": [a for a, _ in pairs], "target": [b for _, b in pairs]}}
        ).batch(8, drop_remainder=True).map(
            lambda d: {{"source": teacher.preprocess(d["source"]),
                        "target": student.preprocess(d["target"])}}
        )
        losses = []
        class Record(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                losses.append(float(logs["loss"]))
        trainer.fit(ds, epochs=1, verbose=0, callbacks=[Record()])
        stored = trainer.queue.queue.value  # the tf.Variable (a MirroredVariable under the strategy)
        copies = [np.asarray(v) for v in getattr(stored, "values", [stored])]
        return (np.array(losses), student.get_weights(), trainer.queue.ordered().numpy(),
                int(trainer.queue.count.numpy()), float(trainer.logit_scale.numpy()), copies,
                start)

    mode = sys.argv[1]
    one = run(tf.distribute.get_strategy(), mode)
    two = run(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), mode)
    print("losses", one[0], two[0])
    start = one[6]
    # The running-mean loss after each of the 5 steps: the queue is in play from step 2 on.
    np.testing.assert_allclose(one[0], two[0], rtol=1e-5)
    # AdamW divides by sqrt(v): where a gradient is ~0 the replicas' summation
    # order shows, so compare the weight drift with how far the weights moved.
    moved = max(float(np.abs(a - b).max()) for a, b in zip(one[1], start))
    drift = max(float(np.abs(a - b).max()) for a, b in zip(one[1], two[1]))
    print("moved", moved, "drift", drift)
    assert moved > 1e-2 and drift < 1e-2 * moved, (moved, drift)
    assert one[3] == two[3] == 12  # 5 x 8 rows through 12 slots
    np.testing.assert_allclose(one[2], two[2], atol=1e-4)  # unit rows; dual mode: trained keys
    assert abs(one[4] - two[4]) < 1e-6
    assert len(two[5]) == 2  # one queue copy per replica, and they agree
    np.testing.assert_array_equal(two[5][0], two[5][1])
    print("OK")
    """
)


@pytest.mark.parametrize("mode", ["frozen_teacher", "dual"])
def test_mirrored_strategy_matches_single_device(tmp_path, mode):
    """Two CPU replicas: queue, learnable scale, loss and weights equal one device."""
    script = tmp_path / "mirrored.py"
    script.write_text(MIRRORED.format(repo=str(REPO)))
    result = subprocess.run(
        [sys.executable, str(script), mode], capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "OK" in result.stdout
