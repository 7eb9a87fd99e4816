"""int8 encoding: the quantized matrix multiply against its closed form, the int8 encoder.

The fused kernel (`compat.quantized_matmul`, oneDNN's `_QuantizedMatMul`) is
checked against the same arithmetic in NumPy on ranges whose zero point is an
integer, where both round identically: the only difference left is float
summation order. The encoder tests check what int8 promises: vectors close to
float32's, the same graph in `encode` and in the SavedModel, weights rebuilt
when the encoder's weights or calibration change, a clear error where it
cannot run.
"""

import numpy as np
import pytest
import tensorflow as tf
from scipy.special import erf

from keras_sentemb import compat
from keras_sentemb.models import int8_encoder
from keras_sentemb.kernels import int8_transformer
from keras_sentemb.kernels.int8_transformer import quantize_kernel
from tests.conftest import make_tiny_encoder
from tests.numeric import cosines
from tests.numeric import relative_errors

SENTENCES = ["a man plays the guitar", "the cat sits on the mat", "hello world", "x",
             "a woman is playing the piano in the park", ""]
# Ranges whose zero point `-low * 255 / (high - low)` is an integer (100 and 20).
INPUT_RANGE = (-4.0, 6.2)
OUTPUT_RANGE = (-0.4, 4.7)


def _operands(seed=0, n=37, k=48, m=24):
    rng = np.random.default_rng(seed)
    x = np.clip(rng.standard_normal((n, k)) * 2 + 0.3, *INPUT_RANGE).astype(np.float32)
    w = (rng.standard_normal((k, m)) * 0.1).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    return x, w, b, rng.standard_normal((n, m)).astype(np.float32)


def _quantized(x, w, b, fused_ops, addend=None, out_range=None):
    """The kernel's output and the dequantized operands it saw."""
    kernel, column_max = quantize_kernel(w)

    @tf.function(autograph=False)
    def run():
        xq, low, high = tf.raw_ops.QuantizeV2(input=x, min_range=INPUT_RANGE[0],
                                              max_range=INPUT_RANGE[1], T=tf.quint8,
                                              mode="MIN_FIRST")
        out = compat.quantized_matmul(
            xq, tf.bitcast(tf.constant(kernel), tf.qint8), tf.constant(b), (low, high),
            (tf.constant(-column_max), tf.constant(column_max)), fused_ops, addend=addend,
            out_range=out_range)
        seen = tf.raw_ops.Dequantize(input=xq, min_range=low, max_range=high, mode="MIN_FIRST")
        return out, seen

    out, seen = run()
    return out, seen.numpy(), kernel.astype(np.float32) * column_max / 127.0


def _gelu(z, approximate):
    if approximate:
        return 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
    return 0.5 * z * (1 + erf(z / np.sqrt(2)))


def test_quantize_kernel_is_symmetric_per_column():
    w = np.array([[1.0, -0.5, 0.0], [-2.0, 0.25, 0.0]], np.float32)
    quantized, column_max = quantize_kernel(w)
    np.testing.assert_array_equal(column_max[:2], [2.0, 0.5])
    np.testing.assert_array_equal(quantized, [[64, -127, 0], [-127, 64, 0]])
    assert quantized.dtype == np.int8 and column_max[2] > 0  # an all-zero column: no division by 0


def test_quantized_matmul_dequantize_equals_its_closed_form():
    x, w, b, _ = _operands()
    out, seen, w_seen = _quantized(x, w, b, ("BiasAdd", "Dequantize"))
    assert out.dtype == tf.float32
    assert relative_errors(out.numpy(), seen @ w_seen + b).max() < 1e-5
    # ... and int8 is a close, not an exact, float32 matrix multiply.
    assert 1e-4 < relative_errors(out.numpy(), x @ w + b).max() < 0.05


def test_quantized_matmul_fuses_the_residual_add():
    x, w, b, addend = _operands(1)
    out, seen, w_seen = _quantized(x, w, b, ("BiasAdd", "Add", "Dequantize"),
                                   addend=tf.constant(addend))
    assert relative_errors(out.numpy(), seen @ w_seen + b + addend).max() < 1e-5


@pytest.mark.parametrize("activation,approximate", [("GeluExact", False),
                                                    ("GeluApproximate", True)])
def test_quantized_matmul_fuses_gelu_and_requantizes(activation, approximate):
    x, w, b, _ = _operands(2)
    (out, low, high), seen, w_seen = _quantized(
        x, w, b, ("BiasAdd", activation, "Requantize"),
        out_range=(tf.constant(OUTPUT_RANGE[0]), tf.constant(OUTPUT_RANGE[1])))
    assert out.dtype == tf.quint8
    got = tf.raw_ops.Dequantize(input=out, min_range=low, max_range=high,
                                mode="MIN_FIRST").numpy()
    expected = np.clip(_gelu(seen @ w_seen + b, approximate), *OUTPUT_RANGE)
    step = (OUTPUT_RANGE[1] - OUTPUT_RANGE[0]) / 255
    assert np.abs(got - expected).max() <= step


def test_quantized_matmul_refuses_fusions_the_kernel_lacks():
    with pytest.raises(ValueError, match="Unsupported fusion"):
        compat.quantized_matmul(None, None, None, None, None, ("BiasAdd", "Swish"))


def test_int8_encode_is_close_to_float32(tiny_encoder):
    full = tiny_encoder.encode(SENTENCES, precision="float32")
    int8 = tiny_encoder.encode(SENTENCES, precision="int8")
    assert int8.dtype == np.float32 and int8.shape == full.shape
    assert cosines(int8, full).min() > 0.99
    assert not np.array_equal(int8, full)  # int8 really ran
    np.testing.assert_array_equal(tiny_encoder.encode(SENTENCES, precision="int8"), int8)
    # The encoder itself holds the int8 weights; its float32 graphs are unchanged.
    layers = tiny_encoder.adapter.transformer_layers
    assert all(int8_transformer.weights_of(layer) is not None for layer in layers)
    np.testing.assert_array_equal(tiny_encoder.encode(SENTENCES, precision="float32"), full)


def test_int8_encode_matches_one_sentence_at_a_time(tiny_encoder):
    # Static ranges: a sentence's vector does not depend on its batch or padding.
    batched = tiny_encoder.encode(SENTENCES, precision="int8")
    single = np.stack([tiny_encoder.encode(s, precision="int8") for s in SENTENCES])
    assert relative_errors(single, batched).max() < 1e-5


def test_int8_weights_follow_the_weights_and_the_calibration(tiny_encoder):
    before = tiny_encoder.encode(SENTENCES, precision="int8")
    ranges = [int8_transformer.weights_of(layer).ranges()
              for layer in tiny_encoder.adapter.transformer_layers]
    tiny_encoder.int8_calibration = ["hello world", "the dog runs in the park"]
    recalibrated = [int8_transformer.weights_of(layer).ranges()
                    for layer in int8_encoder.prepare_int8(tiny_encoder).adapter.transformer_layers]
    assert recalibrated != ranges
    weights = tiny_encoder.get_weights()
    tiny_encoder.set_weights([w * 1.5 if w.ndim == 2 else w for w in weights])
    scaled = tiny_encoder.encode(SENTENCES, precision="int8")
    reference = tiny_encoder.encode(SENTENCES, precision="float32")
    assert cosines(scaled, reference).min() > 0.99
    assert not np.allclose(scaled, before)


def test_a_bfloat16_encoder_computes_int8_through_a_float32_copy(tiny_encoder):
    half = tiny_encoder.clone(dtype="bfloat16")
    vectors = half.encode(SENTENCES, precision="int8")
    assert cosines(vectors, tiny_encoder.encode(SENTENCES, precision="float32")).min() > 0.99
    assert half.precision_twin("int8").backbone.dtype_policy.name == "float32"


def test_int8_calibration_is_checked(tiny_encoder):
    with pytest.raises(TypeError, match="list of str"):
        tiny_encoder.int8_calibration = "one sentence"
    with pytest.raises(ValueError, match="non-empty"):
        tiny_encoder.int8_calibration = ["", "  "]
    tiny_encoder.int8_calibration = None
    assert len(int8_encoder.bundled_calibration_sentences()) == int8_encoder.DEFAULT_CALIBRATION_SIZE


def test_int8_needs_onednn(tiny_encoder, monkeypatch):
    monkeypatch.setattr(compat, "onednn_enabled", lambda: False)
    with pytest.raises(RuntimeError, match="TF_ENABLE_ONEDNN_OPTS=1"):
        tiny_encoder.encode(SENTENCES, precision="int8")


def test_int8_refuses_layers_it_does_not_compute():
    encoder = make_tiny_encoder()
    for layer in encoder.adapter.transformer_layers:
        compat.transformer_parts(layer).intermediate.activation = tf.nn.relu
    with pytest.raises(ValueError, match="GELU feed-forward"):
        encoder.encode(SENTENCES, precision="int8")
