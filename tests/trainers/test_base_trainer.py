"""BaseTrainer's guarded update: a non-finite step is skipped exactly, on every replica."""

import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.trainers.base_trainer import all_finite
from keras_sentemb.trainers.base_trainer import apply_if_finite
from keras_sentemb.trainers.grad_cache import CHUNK_STRIDE
from keras_sentemb.trainers.grad_cache import SEED_STRIDE
from keras_sentemb.pipelines.callbacks import NonFiniteGuard
from tests.conftest import REPO
from tests.helpers.training import QUADRATIC_DATA as DATA, Quadratic


class Metered(Quadratic):
    """Returns a metric and an `aux` that `after_update` records."""

    def __init__(self):
        super().__init__()
        self.seen = []
        self.tracker = keras.metrics.Mean(name="gap")

    def extra_metrics(self):
        return [self.tracker]

    def compute_loss_terms(self, data, training=True):
        loss = super().compute_loss_terms(data, training).loss
        return LossOutput(loss, {"gap": 2.0 * loss, "ignored": loss}, aux=tf.reduce_sum(data))

    def after_update(self, aux, finite):
        self.seen.append((float(aux), bool(finite)))


def test_the_loss_hook_returns_a_loss_output_with_metrics_and_aux():
    trainer = Metered()
    trainer.compile(optimizer=keras.optimizers.SGD(0.0))
    batch = tf.constant(DATA[:4])
    expected = float(Quadratic.compute_loss_terms(trainer, batch).loss)
    logs = trainer.train_step(batch)
    assert float(logs["loss"]) == pytest.approx(expected)
    assert float(logs["gap"]) == pytest.approx(2.0 * expected)  # metrics by name; others ignored
    assert sorted(logs) == ["gap", "loss", "nonfinite"]
    assert trainer.seen == [(pytest.approx(float(np.sum(DATA[:4]))), True)]
    trainer.reset_metrics()
    assert float(trainer.test_step(batch)["gap"]) == pytest.approx(2.0 * expected)


@pytest.mark.parametrize("returned", ["tuple", "tensor"])
def test_a_loss_hook_returning_anything_else_is_a_one_line_type_error(returned):
    class Loose(Quadratic):
        def compute_loss_terms(self, data, training=True):
            loss = super().compute_loss_terms(data, training).loss
            return (loss, {}) if returned == "tuple" else loss

    trainer = Loose()
    trainer.compile(optimizer=keras.optimizers.SGD(0.1))
    message = r"compute_loss_terms must return a LossOutput .*; received (tuple|.*Tensor)"
    with pytest.raises(TypeError, match=message):
        trainer.train_step(tf.constant(DATA[:4]))
    with pytest.raises(TypeError, match=message):
        trainer.test_step(tf.constant(DATA[:4]))


def test_loss_output_refuses_a_nested_loss_and_bad_metrics():
    with pytest.raises(TypeError, match="LossOutput.loss must be a scalar tensor; received tuple"):
        LossOutput((tf.constant(1.0), {}))
    with pytest.raises(TypeError, match="LossOutput.metrics must be a dict"):
        LossOutput(tf.constant(1.0), [("a", 1.0)])
    out = LossOutput(tf.constant(1.0))
    assert dict(out.metrics) == {} and out.aux is None


def test_reseed_sets_each_generators_counter_from_the_step():
    trainer = Quadratic()
    trainer.encoder = keras.layers.Dropout(0.5, seed=7)  # one SeedGenerator
    trainer.compile(optimizer=keras.optimizers.SGD(0.1))
    trainer.optimizer.iterations.assign(3)
    (state,) = [v for v in trainer.variables if v.path.endswith("seed_generator_state")]
    seed = int(state.numpy()[0])
    trainer._reseed()
    assert state.numpy().tolist() == [seed, 3 * SEED_STRIDE]
    trainer._reseed(chunk=2)
    assert state.numpy().tolist() == [seed, 3 * SEED_STRIDE + 3 * CHUNK_STRIDE]


def _state(trainer):
    return [np.array(v) for v in trainer.encoder.weights] + [
        np.array(v) for v in trainer.optimizer.variables
        if "iteration" not in v.path
    ]


@pytest.mark.parametrize("optimizer", ["adamw", "sgd_momentum"])
def test_nonfinite_step_leaves_weights_and_optimizer_state_untouched(optimizer):
    trainer = Quadratic()
    trainer.compile(optimizer=keras.optimizers.AdamW(1e-2, weight_decay=0.1)
                    if optimizer == "adamw" else keras.optimizers.SGD(1e-2, momentum=0.9))
    states = []

    class Snap(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            states.append((_state(trainer), float(logs["nonfinite"])))

    ds = tf.data.Dataset.from_tensor_slices(DATA).batch(4)
    trainer.fit(ds, epochs=1, verbose=0, callbacks=[Snap()])
    assert [n for _, n in states] == [0.0, 1.0, 1.0]  # `nonfinite` is a running sum
    before, after = states[0][0], states[1][0]
    for a, b in zip(before, after):  # momentum / Adam moments would move zeroed-gradient weights
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(states[1][0], states[2][0]))
    assert int(trainer.optimizer.iterations) == 3  # the skipped step still counts


@pytest.mark.parametrize("bad", [None, np.nan, np.inf])
def test_all_finite_checks_embedding_rows_without_densifying(bad):
    values = np.ones((2, 3), np.float32)
    if bad is not None:
        values[1, 2] = bad
    sparse = tf.IndexedSlices(tf.constant(values), tf.constant([4, 9]), tf.constant([30522, 3]))
    dense = tf.ones([3])
    assert bool(all_finite(tf.constant(1.0), [dense, sparse, None], False)) == (bad is None)
    # With loss scaling only the loss counts.
    assert bool(all_finite(tf.constant(1.0), [sparse], True))
    assert not bool(all_finite(tf.constant(np.nan), [dense], True))


def embedding_step(optimizer, gradient):
    table = keras.Variable(np.ones((5, 2), np.float32), name="table")
    optimizer.build([table])
    for _ in range(2):
        apply_if_finite(optimizer, [(gradient, table)], tf.constant(True))
    return table.numpy()


@pytest.mark.parametrize("name", ["RMSprop", "Adam"])
def test_a_repeated_token_gets_the_dense_update_with_any_optimizer(name):
    # Row 0 occurs three times (a token repeated in the batch). Keras' own
    # sparse update squares the three slices one by one; the trainers hand
    # it the dense gradient, whose row 0 is their sum.
    values = tf.constant([[0.1, -0.2], [0.3, 0.1], [0.2, 0.2], [0.5, -0.5]])
    sparse = tf.IndexedSlices(values, tf.constant([0, 0, 3, 0]), tf.constant([5, 2]))
    make = getattr(keras.optimizers, name)
    got = embedding_step(make(0.1), sparse)
    want = embedding_step(make(0.1), tf.convert_to_tensor(sparse))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    table = keras.Variable(np.ones((5, 2), np.float32))
    plain = make(0.1)
    plain.build([table])
    for _ in range(2):
        plain.apply([sparse], [table])
    assert not np.allclose(table.numpy()[0], want[0], rtol=1e-3)  # what Keras alone does


def test_guard_stops_and_keeps_last_finite_weights():
    trainer = Quadratic()
    trainer.compile(optimizer=keras.optimizers.AdamW(1e-2))
    guard = NonFiniteGuard()
    weights = []

    class Snap(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            weights.append(np.array(trainer.encoder.kernel))

    ds = tf.data.Dataset.from_tensor_slices(DATA).batch(4)
    trainer.fit(ds, epochs=1, verbose=0, callbacks=[Snap(), guard])
    assert guard.stopped_at == 2 and len(weights) == 2
    np.testing.assert_array_equal(np.array(trainer.encoder.kernel), weights[0])
    assert np.isfinite(weights[0]).all()


def test_mixed_precision_overflow_is_the_loss_scalers_business():
    """fp16 gradient overflow lowers the loss scale; it is not a non-finite step."""
    trainer = Quadratic(dtype="mixed_float16")
    optimizer = keras.optimizers.LossScaleOptimizer(
        keras.optimizers.AdamW(1e-2), initial_scale=2.0**16
    )
    trainer.compile(optimizer=optimizer)
    finite = np.nan_to_num(DATA, nan=0.5)
    guard = NonFiniteGuard()
    history = trainer.fit(tf.data.Dataset.from_tensor_slices(finite).batch(4).repeat(3),
                          verbose=0, callbacks=[guard])
    assert guard.stopped_at is None and history.history["nonfinite"] == [0.0]
    assert float(optimizer.dynamic_scale) < 2.0**16  # the scaler saw the overflows
    assert not np.array_equal(np.array(trainer.encoder.kernel), np.ones((4, 3)))  # and trained
    # A NaN loss is still ours: skipped and reported, weights kept.
    kernel = np.array(trainer.encoder.kernel)
    trainer.fit(tf.data.Dataset.from_tensor_slices(DATA[4:8]).batch(4), verbose=0,
                callbacks=[guard])
    assert guard.stopped_at is not None
    np.testing.assert_array_equal(np.array(trainer.encoder.kernel), kernel)


MIRRORED = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras, numpy as np
    from tests.helpers.training import QUADRATIC_DATA as DATA, Quadratic

    def run(strategy):
        with strategy.scope():
            trainer = Quadratic()
            trainer.compile(optimizer=keras.optimizers.AdamW(1e-2, weight_decay=0.1))
        history = []
        class Record(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                history.append((float(logs["nonfinite"]), np.array(trainer.encoder.kernel)))
        ds = tf.data.Dataset.from_tensor_slices(DATA).batch(4)
        trainer.fit(ds, epochs=1, verbose=0, callbacks=[Record()])
        copies = getattr(trainer.encoder.kernel.value, "values", [trainer.encoder.kernel.value])
        return history, [np.array(c) for c in copies]

    one, _ = run(tf.distribute.get_strategy())
    two, copies = run(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
    # Only replica 1 saw the NaN; replica 0, whose metrics Keras reports, must know.
    assert [n for n, _ in two] == [n for n, _ in one] == [0.0, 1.0, 1.0], (one, two)
    np.testing.assert_array_equal(two[1][1], two[0][1])  # step 2 skipped everywhere
    for (_, a), (_, b) in zip(one, two):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert len(copies) == 2
    np.testing.assert_array_equal(copies[0], copies[1])
    print("OK")
    """
)


def test_nan_on_one_replica_skips_the_step_on_all(tmp_path):
    script = tmp_path / "mirrored.py"
    script.write_text(MIRRORED.format(repo=str(REPO)))
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "OK" in result.stdout
