"""`ParallelContrastive`: memory queue, loss closed form, frozen teacher, logit scale, modes."""

import math
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.models.memory_queue import MemoryQueue
from keras_sentemb.methods.parallel.trainer import ParallelContrastive
from tests.conftest import REPO, make_tiny_encoder
from tests.helpers.batches import translation_batch
from tests.helpers.corpora import make_pairs


def make_trainer(**kwargs):
    teacher = make_tiny_encoder(num_layers=1)
    student = teacher.clone(name="student")
    mode = kwargs.get("mode", "frozen_teacher")
    return ParallelContrastive(student, None if mode == "shared" else teacher, **kwargs)


def compile_trainer(trainer, lr=1e-3):
    trainer.compile(optimizer=keras.optimizers.AdamW(lr, weight_decay=0.01))


def run_steps(trainer, n, batch_size=8, seed=0):
    """Eager train steps (no tf.function tracing: fast for tiny encoders)."""
    pairs = make_pairs(n * batch_size, seed=seed)
    for i in range(n):
        trainer.train_step(translation_batch(trainer, pairs[i * batch_size : (i + 1) * batch_size]))


def no_dropout(encoder):
    for layer in encoder.backbone._flatten_layers():
        if isinstance(layer, keras.layers.Dropout):
            layer.rate = 0.0


def eval_loss(trainer, data):
    return float(trainer.compute_loss_terms(data, training=False).loss)


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
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.mark.parametrize(
    "pooling,mlp,training",
    [("cls", "train", False), ("cls", "train", True), ("mean", "none", False)],
    ids=["cls-mlp-eval", "cls-mlp-train", "mean-eval"],
)
def test_loss_equals_closed_form_with_queue(pooling, mlp, training):
    trainer = make_trainer(queue_size=5, temperature=0.05, pooling=pooling, mlp=mlp)
    no_dropout(trainer.student)
    data = translation_batch(trainer, make_pairs(4))
    # The frozen teacher encodes with its own pooling (mean: it declares none).
    t = _unit(trainer.teacher(data["source"]).numpy())
    s = trainer.student(data["target"], pooling=pooling)
    if training:  # the training-only head (identity-initialised tanh)
        s = trainer.target_mlp(s)
    s = _unit(s.numpy())
    # Hard queued negatives (near the student's embeddings), so they matter.
    rng = np.random.default_rng(1)
    queued = _unit(s[:3] + 0.01 * rng.normal(size=(3, s.shape[1]))).astype("float32")
    trainer.queue.enqueue(tf.constant(queued))
    terms = trainer.compute_loss_terms(data, training=training)
    loss, extras = terms.loss, terms.metrics
    expected = _numpy_loss(s, np.concatenate([t, queued]), 20.0)
    assert float(loss) == pytest.approx(expected, rel=1e-4)
    # The queue really enters the loss: without it the value differs.
    assert abs(expected - _numpy_loss(s, t, 20.0)) > 1e-4
    assert float(extras["temperature"]) == pytest.approx(0.05)
    assert float(extras["queue_fill"]) == 3
    np.testing.assert_allclose(float(extras["positive_cosine"]), np.mean(np.sum(s * t, 1)), rtol=1e-4)


def test_train_step_enqueues_teacher_embeddings_after_loss():
    trainer = make_trainer(queue_size=6, temperature=0.05)
    compile_trainer(trainer)
    data = translation_batch(trainer, make_pairs(4))
    logs = trainer.train_step(data)
    assert float(logs["queue_fill"]) == 0.0  # loss saw an empty queue
    t = _unit(trainer.teacher(data["source"]).numpy())
    np.testing.assert_allclose(trainer.queue.ordered().numpy(), t, atol=1e-5)
    trainer.train_step(data)
    assert int(trainer.queue.count.numpy()) == 6  # 8 rows into 6 slots
    np.testing.assert_allclose(trainer.queue.ordered().numpy()[-4:], t, atol=1e-5)


# --------------------------------------------------------- frozen teacher
def test_teacher_stays_bit_identical_and_the_loss_goes_down():
    trainer = make_trainer(queue_size=16)  # the paper's cls + training-only MLP
    teacher_before = [w.copy() for w in trainer.teacher.get_weights()]
    teacher_ids = {id(v) for v in trainer.teacher.weights}
    assert not teacher_ids & {id(v) for v in trainer.trainable_variables}
    compile_trainer(trainer, lr=1e-2)
    data = translation_batch(trainer, make_pairs(8))
    before = eval_loss(trainer, data)
    for _ in range(5):
        logs = trainer.train_step(data)
    assert float(logs["nonfinite"]) == 0.0
    for a, b in zip(teacher_before, trainer.teacher.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert int(trainer.queue.count.numpy()) == 16
    trainer.queue.reset()  # the queue now holds this batch's keys: compare like with like
    after = eval_loss(trainer, data)
    assert after < 0.98 * before, (before, after)


# ------------------------------------------------------------ logit scale
def test_learnable_logit_scale_is_learned_clamped_and_not_decayed():
    trainer = make_trainer(queue_size=0)
    scale = trainer.logit_scale
    assert scale.learnable and float(scale()) == pytest.approx(1 / 0.07, rel=1e-6)
    assert float(scale.log_scale.numpy()) == pytest.approx(math.log(1 / 0.07), rel=1e-6)
    optimizer = keras.optimizers.AdamW(5e-2, weight_decay=0.5)
    trainer.compile(optimizer=optimizer)
    assert not optimizer._use_weight_decay(scale.log_scale)
    run_steps(trainer, 5)
    value = float(scale.log_scale.numpy())
    assert value != pytest.approx(math.log(1 / 0.07), abs=1e-4)  # learned
    assert 0.0 <= value <= math.log(100.0) + 1e-6
    # The clamp acts after every update, from above and below.
    for start, bound in ((10.0, math.log(100.0)), (-3.0, 0.0)):
        scale.log_scale.assign(start)
        run_steps(trainer, 1, seed=1)
        assert float(scale.log_scale.numpy()) == pytest.approx(bound, abs=0.06)
        assert 0.0 <= float(scale.log_scale.numpy()) <= math.log(100.0) + 1e-6


def test_fixed_temperature_is_not_trained():
    trainer = make_trainer(temperature=0.01)
    assert not trainer.logit_scale.learnable
    assert float(trainer.logit_scale()) == pytest.approx(100.0)
    assert all(v is not trainer.logit_scale.log_scale for v in trainer.trainable_variables)
    assert trainer.no_decay_variables() == []
    assert float(make_trainer(temperature="0.05").logit_scale()) == pytest.approx(20.0)
    # Above the default clamp: the clamp follows the fixed scale.
    assert float(make_trainer(temperature=0.005).logit_scale()) == pytest.approx(200.0)


# ------------------------------------------------------------- baselines
def test_dual_mode_trains_both_sides_and_lowers_the_loss():
    # Mean pooling: the tiny random model's [CLS] vectors are all alike on both sides.
    trainer = make_trainer(mode="dual", queue_size=0, pooling="mean", mlp="train")
    assert trainer.source_mlp is not None and trainer.target_mlp is not None
    trainable = {id(v) for v in trainer.trainable_variables}
    assert all(id(v) in trainable for v in trainer.teacher.trainable_weights)
    assert all(id(v) in trainable for v in trainer.student.trainable_weights)
    compile_trainer(trainer, lr=1e-2)
    data = translation_batch(trainer, make_pairs(8))
    before = eval_loss(trainer, data)
    # lr 1e-2 on the tiny model: the first steps may overshoot (which ones
    # depends on the dropout masks); ten steps settle well below the start.
    for _ in range(10):
        trainer.train_step(data)
    assert eval_loss(trainer, data) < 0.9 * before


def test_shared_mode_uses_one_encoder():
    trainer = make_trainer(mode="shared", queue_size=8)
    assert trainer.teacher is trainer.student
    n_student = len(trainer.student.trainable_variables)
    # student weights + target MLP (kernel, bias) + logit scale, no duplicates.
    assert len(trainer.trainable_variables) == n_student + 3
    compile_trainer(trainer)
    run_steps(trainer, 2, batch_size=4)
    assert int(trainer.queue.count.numpy()) == 8
    assert trainer.candidates() == {"student": trainer.student}


def test_argument_validation():
    teacher = make_tiny_encoder()
    with pytest.raises(ValueError, match="mode"):
        ParallelContrastive(teacher.clone(), teacher, mode="both")
    with pytest.raises(ValueError, match="pooling"):
        ParallelContrastive(teacher.clone(), teacher, pooling="middle")
    with pytest.raises(ValueError, match="mlp"):
        ParallelContrastive(teacher.clone(), teacher, mlp="always")
    # The method's "auto" is resolved by the trainer for its pooling: the head with [CLS].
    assert ParallelContrastive(teacher.clone(), teacher, mlp="auto").target_mlp is not None
    assert ParallelContrastive(teacher.clone(), teacher, mlp="auto",
                               pooling="mean").target_mlp is None
    with pytest.raises(ValueError, match="temperature"):
        ParallelContrastive(teacher.clone(), teacher, temperature="hot")
    with pytest.raises(ValueError, match="temperature"):
        ParallelContrastive(teacher.clone(), teacher, temperature=-1.0)
    with pytest.raises(ValueError, match="init_temperature"):
        ParallelContrastive(teacher.clone(), teacher, init_temperature=2.0)
    with pytest.raises(ValueError, match="max_logit_scale"):
        ParallelContrastive(teacher.clone(), teacher, max_logit_scale=5.0)
    with pytest.raises(ValueError, match="queue_size"):
        ParallelContrastive(teacher.clone(), teacher, queue_size=-1)
    with pytest.raises(ValueError, match="teacher"):
        ParallelContrastive(teacher.clone(), None)
    with pytest.raises(ValueError, match="separate"):
        ParallelContrastive(teacher, teacher)
    with pytest.raises(ValueError, match="shared"):
        ParallelContrastive(teacher.clone(), teacher, mode="shared")
    wide = make_tiny_encoder(hidden_dim=16)
    with pytest.raises(ValueError, match="mlp='train'"):
        ParallelContrastive(wide, teacher, mlp="none")
    assert ParallelContrastive(wide, teacher, mlp="train").target_mlp.units == 32


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
    from tests.helpers.corpora import make_pairs
    from keras_sentemb.methods.parallel.trainer import ParallelContrastive

    def run(strategy, mode):
        with strategy.scope():
            teacher = make_tiny_encoder(num_layers=1)
            student = teacher.clone(name="student")
            for encoder in (teacher, student):  # dropout masks differ per device
                for layer in encoder.backbone._flatten_layers():
                    if isinstance(layer, keras.layers.Dropout):
                        layer.rate = 0.0
            trainer = ParallelContrastive(student, teacher, mode=mode, queue_size=12,
                                          pooling="mean", mlp="none")
            start = [w.copy() for w in student.get_weights()]
            start_scale = float(trainer.logit_scale.log_scale.numpy())
            trainer.compile(optimizer=keras.optimizers.AdamW(1e-2, weight_decay=0.01))
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
                int(trainer.queue.count.numpy()), float(trainer.logit_scale.log_scale.numpy()),
                copies, start, start_scale)

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
    scale_moved = abs(one[4] - one[7])  # AdamW: about the learning rate a step
    assert scale_moved > 1e-3 and abs(one[4] - two[4]) <= 1e-3 * scale_moved, (one[4], two[4])
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
