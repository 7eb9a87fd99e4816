"""Fused optimizers (`keras_sentemb.trainers.optimizers`) against Keras' own, step for step."""

import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.trainers import optimizers as fused
from keras_sentemb.trainers.base_trainer import dense_gradients
from tests.conftest import REPO

CASES = [
    ("RMSprop", {}),
    ("RMSprop", {"momentum": 0.9, "rho": 0.8}),
    ("RMSprop", {"weight_decay": 0.05}),
    ("RMSprop", {"centered": True}),  # Keras' own update
    ("Adam", {}),
    ("Adam", {"beta_2": 0.9, "epsilon": 1e-6}),
    ("Adam", {"amsgrad": True}),  # Keras' own update
    ("AdamW", {"weight_decay": 0.01}),
    ("AdamW", {"weight_decay": 0.3, "exclude": ["bias"]}),
]


def make_variables(seed=0):
    rng = np.random.default_rng(seed)
    return [
        keras.Variable(rng.normal(size=(6, 5)).astype("float32"), name="kernel"),
        keras.Variable(rng.normal(size=(5,)).astype("float32"), name="bias"),
        keras.Variable(rng.normal(size=(10, 5)).astype("float32"), name="embeddings"),
    ]


def gradients(step):
    rng = np.random.default_rng(100 + step)
    dense = [tf.constant(rng.normal(size=(6, 5)), tf.float32),
             tf.constant(rng.normal(size=(5,)), tf.float32)]
    # The embedding's gradient is sparse, with a row twice (a repeated token).
    rows = tf.constant(rng.normal(size=(4, 5)), tf.float32)
    sparse = tf.IndexedSlices(rows, tf.constant([1, 7, 1, 3]), tf.constant([10, 5]))
    return dense + [sparse]


def build(module, name, kwargs):
    kwargs = dict(kwargs)
    exclude = kwargs.pop("exclude", None)
    schedule = keras.optimizers.schedules.ExponentialDecay(0.05, decay_steps=2, decay_rate=0.7)
    opt = getattr(module, name)(learning_rate=schedule, **kwargs)
    if exclude:
        opt.exclude_from_weight_decay(var_names=exclude)
    return opt


def run(module, name, kwargs, steps=6, dense=False, made=None):
    """(variables, slots) after `steps` updates; the optimizer is appended to `made` if given."""
    variables = make_variables()
    opt = build(module, name, kwargs)
    if made is not None:
        made.append(opt)
    opt.build(variables)

    @tf.function
    def step(grads):
        opt.apply(grads, variables)

    for i in range(steps):
        grads = gradients(i)
        step(dense_gradients(grads) if dense else grads)
    return [v.numpy() for v in variables], [v.numpy() for v in opt.variables]


@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}-{sorted(k)}" for n, k in CASES])
def test_same_values_as_keras(name, kwargs):
    # Keras' reference gets the embedding's gradient dense: its sparse path
    # squares duplicate rows one by one (next test).
    expected_vars, expected_slots = run(keras.optimizers, name, kwargs, dense=True)
    got_vars, got_slots = run(fused, name, kwargs)
    start = [v.numpy() for v in make_variables()]
    for want, got, before in zip(expected_vars, got_vars, start):
        assert not np.allclose(want, before)  # the steps moved it
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    assert len(got_slots) == len(expected_slots)
    for want, got in zip(expected_slots, got_slots):
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["RMSprop", "Adam"])
def test_keras_sparse_update_differs_only_on_repeated_rows(name):
    # Why trainers hand optimizers dense gradients (`dense_gradients`).
    sparse_vars, _ = run(keras.optimizers, name, {}, steps=2)
    dense_vars, _ = run(keras.optimizers, name, {}, steps=2, dense=True)
    fused_vars, _ = run(fused, name, {}, steps=2)
    np.testing.assert_allclose(fused_vars[2], dense_vars[2], rtol=2e-6, atol=1e-7)
    differs = ~np.isclose(sparse_vars[2], dense_vars[2], rtol=1e-4).all(axis=1)
    assert differs.tolist() == [i == 1 for i in range(10)]  # row 1 is in the batch twice


def test_the_kernels_run_and_plain_mode_skips_them(monkeypatch):
    made = []
    run(fused, "RMSprop", {}, steps=1, made=made)
    run(fused, "AdamW", {"weight_decay": 0.01}, steps=1, made=made)
    run(fused, "Adam", {"amsgrad": True}, steps=1, made=made)  # Keras' update
    rmsprop, adamw, amsgrad = made
    assert [key[0] for key in fused.kernel_names(rmsprop)] == ["rmsprop"]
    assert [key[0] for key in fused.kernel_names(adamw)] == ["adam"]
    assert not fused.kernel_names(amsgrad)
    monkeypatch.setenv("KERAS_SENTEMB_PLAIN_OPTIMIZER", "1")
    run(fused, "Adam", {}, steps=1, made=made)
    opt = fused.Adam(fused=True)
    assert not fused.kernel_names(made[-1]) and not opt._fuses()
    monkeypatch.delenv("KERAS_SENTEMB_PLAIN_OPTIMIZER")
    assert opt._fuses() and not fused.Adam(fused=False)._fuses()


def test_kernels_are_shared_pure_functions_compiled_once_per_shape():
    # Two optimizers over different variables of the same shapes: one
    # compiled kernel serves both (no second compilation kept by XLA's
    # process-wide cache), and each optimizer moves only its own variables.
    made = []
    first_vars, _ = run(fused, "Adam", {}, steps=1, made=made)
    key = fused.kernel_names(made[0])[0]
    kernel = fused._KERNELS[key]
    traces = kernel.experimental_get_tracing_count()
    second_vars, _ = run(fused, "Adam", {}, steps=1, made=made)
    assert fused.kernel_names(made[1]) == fused.kernel_names(made[0])
    assert fused._KERNELS[key] is kernel
    assert kernel.experimental_get_tracing_count() == traces
    for a, b in zip(first_vars, second_vars):  # same start, same gradients
        np.testing.assert_array_equal(a, b)


def test_only_the_variables_keras_decays_are_decayed():
    variables = make_variables()
    opt = fused.AdamW(learning_rate=0.1, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_names=["bias"])
    opt.build(variables)
    zero = [tf.zeros_like(v.value) for v in variables]
    before = [v.numpy() for v in variables]
    opt.apply(zero, variables)  # zero gradients: only the decay moves anything
    np.testing.assert_allclose(variables[0].numpy(), before[0] * (1 - 0.05), rtol=1e-6)
    np.testing.assert_array_equal(variables[1].numpy(), before[1])


def test_config_round_trip_and_slot_names_match_keras():
    for name in ("RMSprop", "Adam", "AdamW"):
        ours = getattr(fused, name)(learning_rate=0.01, fused=False)
        again = keras.optimizers.deserialize(keras.optimizers.serialize(ours))
        assert type(again) is type(ours) and again.fused is False
        assert again.learning_rate.numpy() == pytest.approx(0.01)
        ours = getattr(fused, name)(learning_rate=0.01, name="opt")
        theirs = getattr(keras.optimizers, name)(learning_rate=0.01, name="opt")
        ours.build(make_variables())
        theirs.build(make_variables())
        paths = [v.path for v in ours.variables]
        assert paths == [v.path for v in theirs.variables] and len(paths) > 3


MIRRORED = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import numpy as np, keras
    from keras_sentemb.trainers import optimizers as fused
    from tests.numeric import assert_moved_alike

    def run(strategy, module):
        with strategy.scope():
            layer = keras.layers.Dense(3)
            layer.build((None, 4))
            opt = module.AdamW(learning_rate=0.05, weight_decay=0.1)
            opt.build(layer.trainable_variables)
        x = tf.constant(np.random.default_rng(0).normal(size=(8, 4)), tf.float32)

        @tf.function
        def step(x):
            def replica(x):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(layer(x) ** 2)
                grads = tape.gradient(loss, layer.trainable_variables)
                opt.apply(grads, layer.trainable_variables)
            strategy.run(replica, args=(x,))

        start = [v.numpy() for v in layer.trainable_variables]
        for _ in range(3):
            step(x)
        return [v.numpy() for v in layer.trainable_variables], start

    keras.utils.set_random_seed(0)
    single, start = run(tf.distribute.get_strategy(), keras.optimizers)
    keras.utils.set_random_seed(0)
    mirrored, _ = run(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), fused)
    # AdamW moves each weight by about the learning rate whatever the
    # gradient's size: compare the runs with how far they moved.
    assert_moved_alike(start, single, mirrored, rtol=1e-4, min_moved=1e-2)
    print("OK")
    """
)


def test_mirrored_strategy_matches_keras_on_one_device(tmp_path):
    script = tmp_path / "mirrored_optimizer.py"
    script.write_text(MIRRORED.format(repo=str(REPO)))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "OK" in result.stdout
