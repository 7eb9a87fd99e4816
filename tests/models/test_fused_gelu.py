"""The fused GELU: same values and gradients as keras-hub's, installed where it should be."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras_hub.src.utils.keras_utils import gelu_approximate

from keras_sentemb import compat
from keras_sentemb.kernels import policy as kernels
from keras_sentemb.kernels.fused_gelu import DISABLE_ENV
from keras_sentemb.kernels.fused_gelu import FusedGelu
from keras_sentemb.kernels.fused_gelu import bias_gelu
from keras_sentemb.kernels.fused_gelu import fuse_gelu
from keras_sentemb.kernels.fused_gelu import fused_gelu_approximate
from keras_sentemb.kernels.fused_gelu import fused_gelu_exact
from keras_sentemb.kernels.fused_gelu import gelu_form
from keras_sentemb.kernels.fused_gelu import set_gelu_form
from keras_sentemb.kernels.fused_gelu import unfuse_gelu
from tests.conftest import make_tiny_encoder, run_in_graph, spy_calls
from tests.helpers.graphs import graph_ops, xla_compiled_functions
from tests.helpers.models import make_tiny_roberta
from tests.numeric import assert_close_vectors


def value_and_grad(fn, x, dy):
    @tf.function
    def run(x, dy):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
        return y, tape.gradient(y, x, output_gradients=dy)

    return [v.numpy() for v in run(x, dy)]


@pytest.mark.parametrize(
    "fused, reference",
    [
        (fused_gelu_approximate, gelu_approximate),
        (fused_gelu_exact, lambda x: keras.activations.gelu(x, approximate=False)),
    ],
    ids=["tanh", "exact"],
)
def test_values_and_gradients_equal_the_composed_ops(fused, reference):
    rng = np.random.default_rng(0)
    # Wide range: the tails (tanh saturating, erf near +-1) included.
    x = tf.constant(rng.normal(scale=3.0, size=(7, 13, 48)), tf.float32)
    dy = tf.constant(rng.normal(size=(7, 13, 48)), tf.float32)
    got_y, got_dx = value_and_grad(fused, x, dy)
    want_y, want_dx = value_and_grad(reference, x, dy)
    np.testing.assert_allclose(got_y, want_y, atol=2e-6, rtol=1e-5)
    np.testing.assert_allclose(got_dx, want_dx, atol=2e-5, rtol=1e-5)
    # Closed forms at 0: GELU(0) = 0, GELU'(0) = 1/2 (both forms).
    y0, dx0 = value_and_grad(fused, tf.zeros([1]), tf.ones([1]))
    assert y0[0] == 0.0 and dx0[0] == pytest.approx(0.5, abs=1e-7)


def test_bfloat16_inputs_stay_bfloat16():
    x = tf.constant(np.linspace(-4, 4, 64), tf.bfloat16)
    y, dx = value_and_grad(fused_gelu_approximate, x, tf.ones_like(x))
    assert y.dtype == tf.bfloat16.as_numpy_dtype and dx.dtype == y.dtype
    want = gelu_approximate(tf.cast(x, tf.float32)).numpy()
    np.testing.assert_allclose(y.astype(np.float32), want, atol=0.03, rtol=0.02)


@pytest.mark.parametrize("fused", [fused_gelu_approximate, fused_gelu_exact], ids=["tanh", "exact"])
def test_bfloat16_is_the_float32_result_rounded_once(fused):
    # The kernels compute half precision in float32 and round at the end, so
    # value and gradient are within one bfloat16 step (2^-8 relative) of the
    # float32 result; bfloat16 arithmetic throughout drifts by several steps.
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(scale=2.0, size=(4096,)), tf.bfloat16)
    dy = tf.constant(rng.normal(size=(4096,)), tf.bfloat16)
    y, dx = value_and_grad(fused, x, dy)
    want_y, want_dx = value_and_grad(fused, tf.cast(x, tf.float32), tf.cast(dy, tf.float32))
    for got, want in ((y, want_y), (dx, want_dx)):
        got = got.astype(np.float32)
        assert np.all(np.abs(got - want) <= 2.0 ** -8 * np.abs(want) + 1e-30)


@pytest.mark.parametrize("make, approximate", [(make_tiny_encoder, True), (make_tiny_roberta, False)],
                         ids=["bert", "roberta"])
def test_encoder_installs_the_fused_gelu_on_every_layer(make, approximate):
    encoder = make()
    activations = [layer._feedforward_intermediate_dense.activation
                   for layer in encoder.backbone.transformer_layers]
    assert len(activations) == encoder.num_layers
    assert all(isinstance(a, FusedGelu) and a.approximate == approximate for a in activations)
    # Idempotent, and reversible.
    assert fuse_gelu(encoder.backbone.transformer_layers) == 0
    assert unfuse_gelu(encoder.backbone.transformer_layers) == encoder.num_layers
    assert not any(isinstance(layer._feedforward_intermediate_dense.activation, FusedGelu)
                   for layer in encoder.backbone.transformer_layers)


def test_other_activations_are_left_alone():
    layer = keras.layers.Dense(4, activation="relu")
    holder = type("Layer", (), {"_feedforward_intermediate_dense": layer})()
    assert fuse_gelu([holder]) == 0
    assert layer.activation is keras.activations.relu


def test_training_forward_and_gradients_equal_plain_gelu():
    encoder = make_tiny_encoder()
    inputs = encoder.preprocess(["the man plays the guitar .", "a dog sits on the mat"])

    def loss_and_grads():
        with tf.GradientTape() as tape:
            vectors = encoder.sentence_vectors(inputs, "mean", training=False)  # no dropout
            loss = tf.reduce_sum(vectors * vectors)
        return vectors, tape.gradient(loss, encoder.trainable_variables)

    def as_numpy(vectors, grads):
        return vectors.numpy(), [tf.convert_to_tensor(g).numpy() for g in grads if g is not None]

    fused_vectors, fused_grads = as_numpy(*loss_and_grads())
    plain_vectors, plain_grads = as_numpy(*run_in_graph(loss_and_grads, plain=True))
    assert_close_vectors(fused_vectors, plain_vectors, rtol=1e-5)
    assert len(fused_grads) == len(plain_grads) > 0
    for got, want in zip(fused_grads, plain_grads):
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


def test_environment_variable_switches_it_off(monkeypatch):
    activation = FusedGelu(gelu_approximate, approximate=True)
    calls = []
    activation._fused = lambda x: calls.append("fused") or fused_gelu_approximate(x)
    x = tf.constant([0.5, -1.0])
    activation(x)
    monkeypatch.setenv(DISABLE_ENV, "1")
    activation(x)
    assert calls == ["fused"]


def test_export_graph_has_no_xla_compiled_function(tmp_path):
    from keras_sentemb.export import export_saved_model

    encoder = make_tiny_encoder()
    version = export_saved_model(encoder, tmp_path / "m")
    assert xla_compiled_functions(version) == []
    # The encoder itself still runs the fused kernels after the export.
    assert isinstance(encoder.backbone.transformer_layers[0]._feedforward_intermediate_dense
                      .activation, FusedGelu)


@pytest.mark.parametrize("make", [make_tiny_encoder, make_tiny_roberta], ids=["bert", "roberta"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_encode_runs_the_fused_matmul_gelu_pattern_with_the_same_vectors(make, dtype):
    encoder = make()
    if dtype != "float32":
        encoder = encoder.clone(dtype=dtype)
    sentences = ["the man plays the guitar .", "a dog sits on the mat", "hello"]
    inputs = encoder.preprocess(sentences)
    trained_path = encoder.sentence_vectors(inputs, "mean", training=False).numpy()
    pattern = run_in_graph(lambda: encoder.sentence_vectors(inputs, "mean", training=False),
                           forward_only=True).numpy()
    assert_close_vectors(pattern.astype("float32"), trained_path.astype("float32"),
                         rtol=1e-5 if dtype == "float32" else 2e-2)
    assert_close_vectors(encoder.encode(sentences, pooling="mean", precision=dtype), trained_path, rtol=1e-5
                         if dtype == "float32" else 2e-2)
    # encode's graph: TensorFlow's own GELU after a 2-D matmul + bias_add, no XLA call.
    fn = encoder._encode_fn(encoder._resolve_pooling("mean"), False, True)
    concrete = fn.get_concrete_function(tf.TensorSpec([None, None], tf.int32),
                                        tf.TensorSpec([None, None], tf.int32))
    ops = graph_ops(concrete)
    marked = [function.name for function in concrete.graph._functions.values()
              if function.definition.attr["_XlaMustCompile"].b
              or any(node.attr["_XlaMustCompile"].b for node in function.definition.node_def)]
    if dtype == "float32" and make is make_tiny_encoder:  # the tanh form keeps the XLA kernel
        assert marked and kernels.compiles_per_shape(concrete)
    else:  # half precision, and the exact form (RoBERTa's) in every precision
        assert "BiasAdd" in ops and ("Tanh" in ops if make is make_tiny_encoder
                                     else "Erfc" in ops)
        assert marked == [] and not kernels.compiles_per_shape(concrete)


def test_inference_pattern_is_only_for_forward_graphs(monkeypatch):
    from keras_sentemb.kernels import fused_gelu

    encoder = make_tiny_encoder().clone(dtype="bfloat16")
    dense = encoder.backbone.transformer_layers[0]._feedforward_intermediate_dense
    x = tf.cast(tf.random.stateless_normal([2, 3, dense.kernel.shape[0]], [1, 2]), "bfloat16")
    calls = []
    pattern_fn = fused_gelu._matmul_bias_gelu
    monkeypatch.setattr(fused_gelu, "_matmul_bias_gelu",
                        lambda *a: calls.append(1) or pattern_fn(*a))
    # The export's graphs keep keras-hub's ops.
    plain = run_in_graph(lambda: dense(x), forward_only=True, plain=True)
    assert calls == []
    pattern = run_in_graph(lambda: dense(x), forward_only=True)
    assert calls == [1]
    float32 = make_tiny_encoder().backbone.transformer_layers[0]
    run_in_graph(lambda: float32._feedforward_intermediate_dense(
        tf.ones([1, 2, dense.kernel.shape[0]])), forward_only=True)
    assert calls == [1]  # float32 keeps the XLA kernel
    training = dense(x)
    assert calls == [1]
    as_float = lambda t: tf.cast(t, "float32").numpy()  # noqa: E731
    np.testing.assert_allclose(as_float(pattern), as_float(training), rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(as_float(plain), as_float(training), rtol=2e-2, atol=2e-2)
    assert pattern.shape == (2, 3, dense.units)
    unfuse_gelu(encoder.backbone.transformer_layers)
    assert "call" not in dense.__dict__


@pytest.mark.parametrize("approximate", [True, False], ids=["tanh", "exact"])
@pytest.mark.parametrize("shape", [(4, 8, 40), (3, 7, 40), (5, 40)])
def test_bias_gelu_equals_gelu_of_the_sum_with_both_gradients(approximate, shape):
    reference = gelu_approximate if approximate else (
        lambda x: keras.activations.gelu(x, approximate=False))
    z = tf.random.stateless_normal(shape, [1, 2]) * 2.0
    dy = tf.random.stateless_normal(shape, [3, 4])
    bias = tf.Variable(tf.random.stateless_normal([40], [5, 6]))

    def run(fn):
        with tf.GradientTape() as tape:
            tape.watch(z)
            y = fn(z)
        return [y, *tape.gradient(y, [z, bias], output_gradients=dy)]

    want = run(lambda z: reference(z + bias))
    got = tf.function(lambda: run(lambda z: bias_gelu(z, bias, approximate)))()
    for a, b in zip(want, got):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-5)


def test_bias_gelu_in_bfloat16_rounds_once_and_sums_the_bias_gradient_in_float32():
    z = tf.cast(tf.random.stateless_normal((6, 5, 40), [7, 8]) * 2.0, tf.bfloat16)
    dy = tf.cast(tf.random.stateless_normal((6, 5, 40), [9, 10]), tf.bfloat16)
    bias = tf.Variable(tf.random.stateless_normal([40], [11, 12]))
    with tf.GradientTape() as tape:
        tape.watch(z)
        y = bias_gelu(z, bias, approximate=False)
    dz, dbias = tape.gradient(y, [z, bias], output_gradients=dy)
    assert y.dtype == dz.dtype == tf.bfloat16 and dbias.dtype == tf.float32
    wide = tf.cast(z, tf.float32) + bias
    want = tf.cast(fused_gelu_exact(wide), tf.bfloat16)  # the float32 kernel, rounded
    np.testing.assert_array_equal(tf.bitcast(y, tf.uint16).numpy(),
                                  tf.bitcast(want, tf.uint16).numpy())
    with tf.GradientTape() as tape:
        tape.watch(wide)
        exact = keras.activations.gelu(wide, approximate=False)
    dwide = tape.gradient(exact, wide, output_gradients=tf.cast(dy, tf.float32))
    np.testing.assert_allclose(dbias.numpy(), tf.reduce_sum(dwide, [0, 1]).numpy(),
                               rtol=1e-5, atol=1e-5)  # summed before any bfloat16 rounding


def test_training_runs_the_bias_and_gelu_as_one_kernel(monkeypatch):
    from keras_sentemb.kernels import fused_gelu

    encoder = make_tiny_encoder()
    calls = spy_calls(monkeypatch, fused_gelu, "_bias_gelu_forward")
    inputs = encoder.preprocess(["the man plays the guitar .", "a dog sits on the mat"])
    encoder(inputs, training=True)
    assert len(calls) == len(encoder.backbone.transformer_layers)
    run_in_graph(lambda: encoder(inputs), forward_only=True)
    run_in_graph(lambda: encoder(inputs, training=True), plain=True)
    assert len(calls) == len(encoder.backbone.transformer_layers)


def _erf_gelu(x):
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _tanh_gelu(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


@pytest.mark.parametrize("form", ["exact", "tanh"])
def test_feedforward_gelu_computes_the_declared_form_in_every_graph(form):
    encoder = make_tiny_encoder(feedforward_gelu=form)
    layers = encoder.backbone.transformer_layers
    assert encoder.feedforward_gelu == form and gelu_form(layers) == form
    dense = compat.feedforward_intermediate(layers[0])
    assert isinstance(dense.activation, FusedGelu)  # still the fused kernels
    x = tf.random.stateless_normal([3, 5, dense.kernel.shape[0]], [1, 2]) * 3.0
    z = x.numpy() @ dense.kernel.numpy() + dense.bias.numpy()
    want = (_erf_gelu if form == "exact" else _tanh_gelu)(z.astype("float64"))
    got = {
        "training": dense(x),  # matmul, then bias + GELU as one XLA kernel
        "encode": run_in_graph(lambda: dense(x), forward_only=True),
        "export": run_in_graph(lambda: dense(x), forward_only=True, plain=True),
    }
    for where, value in got.items():
        np.testing.assert_allclose(value.numpy(), want, rtol=1e-5, atol=1e-5, err_msg=where)
    # The two forms differ by more than float rounding on these inputs.
    other = _tanh_gelu(z) if form == "exact" else _erf_gelu(z)
    assert np.abs(other - want).max() > 1e-4


def test_encode_with_the_exact_form_compiles_nothing_per_shape_in_float32():
    sentences = ["the man plays the guitar .", "a dog sits on the mat", "hello"]
    exact = make_tiny_encoder(feedforward_gelu="exact")
    plain = make_tiny_encoder(feedforward_gelu="exact", kernels="plain")
    spec = tf.TensorSpec([None, None], tf.int32)
    fn = exact._encode_fn(exact._resolve_pooling(None), False, True)
    assert not kernels.compiles_per_shape(fn.get_concrete_function(spec, spec))
    assert_close_vectors(exact.encode(sentences, precision="float32"),
                         plain.encode(sentences, precision="float32"), rtol=1e-5)
    tanh = make_tiny_encoder()
    fn = tanh._encode_fn(tanh._resolve_pooling(None), False, True)
    assert kernels.compiles_per_shape(fn.get_concrete_function(spec, spec))


def test_gelu_forms_are_checked_and_kept_through_config_save_and_clone(tmp_path):
    from keras_sentemb.models import SentenceEncoder

    with pytest.raises(ValueError, match="feedforward_gelu.*'exact', 'tanh'"):
        make_tiny_encoder(feedforward_gelu="erf")
    encoder = make_tiny_encoder(feedforward_gelu="exact")
    sentences = ["the man plays the guitar .", "hello"]
    vectors = encoder.encode(sentences)
    assert encoder.sentemb_config()["feedforward_gelu"] == "exact"
    assert encoder.get_config()["feedforward_gelu"] == "exact"
    assert "feedforward_gelu" not in make_tiny_encoder().sentemb_config()  # the default
    copies = {
        "clone": encoder.clone(),
        "folder": SentenceEncoder.from_preset(encoder.save(tmp_path / "m")),
    }
    encoder.save(tmp_path / "m.keras")
    copies["keras"] = keras.saving.load_model(tmp_path / "m.keras")
    for name, copy in copies.items():
        assert copy.feedforward_gelu == "exact", name
        assert gelu_form(copy.backbone.transformer_layers) == "exact", name
        assert_close_vectors(copy.encode(sentences), vectors, rtol=1e-5, err_msg=name)


def test_only_gelu_feedforward_layers_take_a_gelu_form():
    encoder = make_tiny_encoder()
    layers = encoder.backbone.transformer_layers
    unfuse_gelu(layers)
    compat.feedforward_intermediate(layers[1]).activation = keras.activations.relu
    with pytest.raises(ValueError, match="applies to GELU feed-forward layers"):
        set_gelu_form(layers, "exact")
    # Nothing was changed.
    assert compat.feedforward_intermediate(layers[0]).activation is gelu_approximate
    assert gelu_form(layers) is None
