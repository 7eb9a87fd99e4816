"""`TorchAdamW` against stored `torch.optim.AdamW` values (no torch needed here)."""

import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.trainers.torch_adamw import TorchAdamW
from tests.conftest import REPO

REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "torch_adamw_reference.npz"


@pytest.fixture(scope="module")
def ref():
    with np.load(REFERENCE) as f:
        return dict(f)


def cases(ref):
    return sorted(int(k.split("_")[1]) for k in ref if k.startswith("case_"))


def steps(ref):
    return len({k.split("_")[1] for k in ref if k.startswith("grad_")})


def relative_error(got, want):
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def run_case(ref, c, dtype, fused=True, optimizer=None):
    lr, wd, eps, b1, b2 = ref[f"case_{c}"]
    n = len([k for k in ref if k.startswith("start_")])
    variables = [keras.Variable(ref[f"start_{i}"].astype(dtype), dtype=dtype, name=f"w{i}")
                 for i in range(n)]
    opt = optimizer or TorchAdamW(learning_rate=float(lr), beta_1=float(b1), beta_2=float(b2),
                                  epsilon=float(eps), weight_decay=float(wd), fused=fused)
    opt.build(variables)

    @tf.function
    def step(grads):
        opt.apply(grads, variables)

    history = []
    for s in range(steps(ref)):
        step([tf.constant(ref[f"grad_{s}_{i}"], dtype) for i in range(n)])
        history.append([v.numpy().astype(np.float64) for v in variables])
    return history, opt


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("c", range(4))
def test_matches_torch_in_float64(ref, c, fused):
    # In float64 the updates themselves (after - start) match torch's, for
    # every case, step and parameter (the 4x3 one has tiny values and
    # gradients, so epsilon's placement decides its update), to the rounding
    # of the learning rate, which Keras keeps in a float32 variable (5e-8).
    history, opt = run_case(ref, c, "float64", fused=fused)
    for s, values in enumerate(history):
        for i, got in enumerate(values):
            start = ref[f"start_{i}"]
            want = ref[f"after_{c}_{s}_{i}"]
            assert relative_error(got - start, want - start) < 2e-7, (c, s, i)
    for i in range(len(history[-1])):
        np.testing.assert_allclose(opt._momentums[i].numpy(), ref[f"exp_avg_{c}_{i}"], rtol=1e-12)
        np.testing.assert_allclose(opt._velocities[i].numpy(), ref[f"exp_avg_sq_{c}_{i}"],
                                   rtol=1e-12)


@pytest.mark.parametrize("c", range(4))
def test_matches_torch_in_float32(ref, c):
    history, _ = run_case(ref, c, "float32")
    for s, values in enumerate(history):
        for i, got in enumerate(values):
            assert relative_error(got, ref[f"after_{c}_{s}_{i}"]) < 1e-6, (c, s, i)


def test_keras_adamw_does_not_match_where_epsilon_matters(ref):
    # The reason for the class: Keras' AdamW, same settings, moves the small
    # parameter (case 3: epsilon 1e-3 next to roots of about 1e-6) far less.
    c = 3
    lr, wd, eps, b1, b2 = (float(x) for x in ref[f"case_{c}"])
    keras_opt = keras.optimizers.AdamW(learning_rate=lr, weight_decay=wd, epsilon=eps,
                                       beta_1=b1, beta_2=b2)
    history, _ = run_case(ref, c, "float64", optimizer=keras_opt)
    start, want = ref["start_2"], ref[f"after_{c}_0_2"]
    assert relative_error(history[0][2] - start, want - start) > 0.1


def test_defaults_are_torchs():
    opt = TorchAdamW()
    assert (opt.beta_1, opt.beta_2, opt.epsilon, opt.weight_decay) == (0.9, 0.999, 1e-8, 0.01)
    assert TorchAdamW(weight_decay=0.0).weight_decay is None


def test_bad_arguments_say_what_was_received():
    with pytest.raises(ValueError, match="beta_1"):
        TorchAdamW(beta_1=1.0)
    with pytest.raises(ValueError, match="epsilon"):
        TorchAdamW(epsilon=-1.0)
    with pytest.raises(ValueError, match="weight_decay"):
        TorchAdamW(weight_decay=-0.1)


def test_excluded_variables_are_not_decayed():
    variables = [keras.Variable(np.ones((3, 2), "float32"), name="kernel"),
                 keras.Variable(np.ones((2,), "float32"), name="bias")]
    opt = TorchAdamW(learning_rate=0.1, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_names=["bias"])
    opt.build(variables)
    opt.apply([tf.zeros((3, 2)), tf.zeros((2,))], variables)  # only the decay moves
    np.testing.assert_allclose(variables[0].numpy(), 1 - 0.05, rtol=1e-6)
    np.testing.assert_array_equal(variables[1].numpy(), 1.0)


def test_config_round_trip_and_sparse_gradients(ref):
    opt = TorchAdamW(learning_rate=keras.optimizers.schedules.ExponentialDecay(0.01, 2, 0.5),
                     epsilon=1e-7, weight_decay=0.0, fused=False, global_clipnorm=1.0)
    again = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
    assert type(again) is TorchAdamW and again.fused is False
    assert (again.epsilon, again.weight_decay, again.global_clipnorm) == (1e-7, None, 1.0)
    # An embedding's sparse gradient updates as its dense form.
    rows = tf.constant(np.random.default_rng(0).normal(size=(3, 4)), tf.float32)
    sparse = tf.IndexedSlices(rows, tf.constant([1, 4, 1]), tf.constant([6, 4]))
    results = []
    for grad in (sparse, tf.convert_to_tensor(sparse)):
        table = keras.Variable(np.ones((6, 4), "float32"), name="embeddings")
        o = TorchAdamW(0.1)
        o.build([table])
        o.apply([grad], [table])
        results.append(table.numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


def test_inside_loss_scale_optimizer_with_bfloat16_gradients(ref):
    # Mixed precision: float32 variables, bfloat16 / scaled gradients; the
    # inner optimizer sees the unscaled gradient and matches a plain run.
    c = 0
    lr, wd, eps, b1, b2 = (float(x) for x in ref[f"case_{c}"])
    plain, _ = run_case(ref, c, "float32")
    inner = TorchAdamW(learning_rate=lr, weight_decay=wd, epsilon=eps)
    scaled = keras.optimizers.LossScaleOptimizer(inner, initial_scale=1024.0)
    n = 3
    variables = [keras.Variable(ref[f"start_{i}"].astype("float32"), name=f"w{i}")
                 for i in range(n)]
    scaled.build(variables)
    for s in range(steps(ref)):
        scaled.apply([tf.constant(ref[f"grad_{s}_{i}"] * 1024.0, tf.float32) for i in range(n)],
                     variables)
    for i in range(n):
        assert relative_error(variables[i].numpy(), plain[-1][i]) < 1e-6
    bf16 = TorchAdamW(learning_rate=lr)
    w = keras.Variable(np.ones((4,), "float32"))
    bf16.build([w])
    bf16.apply([tf.constant([1.0, -1.0, 0.5, 0.0], tf.bfloat16)], [w])
    assert w.dtype == "float32" and np.all(np.isfinite(w.numpy()))


MIRRORED = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import numpy as np, keras
    from keras_sentemb.trainers.torch_adamw import TorchAdamW

    def run(strategy, fused):
        with strategy.scope():
            layer = keras.layers.Dense(3)
            layer.build((None, 4))
            opt = TorchAdamW(learning_rate=0.05, weight_decay=0.1, fused=fused)
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

        for _ in range(3):
            step(x)
        return [v.numpy() for v in layer.trainable_variables]

    keras.utils.set_random_seed(0)
    single = run(tf.distribute.get_strategy(), False)
    keras.utils.set_random_seed(0)
    mirrored = run(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), True)
    for a, b in zip(single, mirrored):
        assert np.linalg.norm(a - b) <= 1e-5 * np.linalg.norm(a), (a, b)
    print("OK")
    """
)


def test_mirrored_strategy_matches_one_device(tmp_path):
    script = tmp_path / "mirrored_torch_adamw.py"
    script.write_text(MIRRORED.format(repo=str(REPO)))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "OK" in result.stdout


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "plain"])
def test_global_clipnorm_clips_as_torch_clip_grad_norm(fused):
    # clip_grad_norm_(max_norm=1) scales every gradient by 1 / global norm when
    # that norm is above 1 and leaves it alone otherwise; Adam is not invariant
    # to that across steps (the second moments remember the clipped sizes).
    rng = np.random.default_rng(0)
    starts = [rng.normal(size=(3, 4)), rng.normal(size=(4,))]
    big = [rng.normal(size=s.shape) * 10 for s in starts]
    small = [rng.normal(size=s.shape) * 0.01 for s in starts]
    norm = np.sqrt(sum(float(np.sum(g * g)) for g in big))
    assert norm > 1 and np.sqrt(sum(float(np.sum(g * g)) for g in small)) < 1

    def train(grads_per_step, **kwargs):
        variables = [keras.Variable(s, dtype="float64") for s in starts]
        opt = TorchAdamW(learning_rate=0.1, weight_decay=0.0, fused=fused, **kwargs)
        opt.build(variables)
        for grads in grads_per_step:
            opt.apply([tf.constant(g) for g in grads], variables)
        return [v.numpy() for v in variables]

    clipped = train([big, small], global_clipnorm=1.0)
    by_hand = train([[g / norm for g in big], small])
    unclipped = train([big, small])
    for got, want, other in zip(clipped, by_hand, unclipped):
        np.testing.assert_allclose(got, want, rtol=1e-12)
        assert relative_error(got - starts[0 if got.ndim == 2 else 1],
                              other - starts[0 if other.ndim == 2 else 1]) > 1e-3
