"""The fused Transformer layer: keras-hub's values, only in forward-only graphs."""

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.kernels import fused_transformer
from keras_sentemb.kernels.fused_transformer import DISABLE_ENV
from keras_sentemb.kernels.fused_transformer import fused_call
from keras_sentemb.kernels.fused_transformer import install_fused_transformer
from keras_sentemb.kernels.fused_transformer import supports
from keras_sentemb.kernels.fused_transformer import uninstall_fused_transformer
from tests.conftest import make_tiny_encoder, run_in_graph
from tests.helpers.graphs import graph_ops
from tests.helpers.models import make_tiny_roberta, make_transformer_layer, transformer_inputs
from tests.numeric import assert_close_vectors

SENTENCES = ["the man plays the guitar .", "a dog sits on the mat", "hello"]


@pytest.mark.parametrize("normalize_first", [False, True], ids=["post_ln", "pre_ln"])
@pytest.mark.parametrize("causal", [False, True], ids=["padding", "padding_and_attention"])
def test_fused_call_equals_keras_hub_in_float32(normalize_first, causal):
    layer = make_transformer_layer(normalize_first)
    x, padding = transformer_inputs()
    attention = (tf.linalg.band_part(tf.ones([3, 5, 5], tf.int32), -1, 0) if causal else None)
    expected = layer(x, padding_mask=padding, attention_mask=attention, training=False)
    got = fused_call(layer, x, padding, attention)
    # Every query row, padded ones too: each keeps at least one key.
    assert_close_vectors(tf.reshape(got, [15, -1]).numpy(), tf.reshape(expected, [15, -1]).numpy(),
                         rtol=1e-5)


@pytest.mark.parametrize("make", [make_tiny_encoder, make_tiny_roberta], ids=["bert", "roberta"])
def test_installed_on_every_layer_of_bert_and_roberta(make):
    encoder = make()
    layers = encoder.backbone.transformer_layers
    assert all(supports(layer) and "call" in layer.__dict__ for layer in layers)
    assert install_fused_transformer(layers) == len(layers)  # idempotent
    assert uninstall_fused_transformer(layers) == len(layers)
    assert not any("call" in layer.__dict__ for layer in layers)


def test_layers_it_cannot_reproduce_are_left_alone():
    assert not supports(keras.layers.Dense(4))
    layer = make_transformer_layer(False)
    layer._feedforward_output_dense.activation = keras.activations.relu
    assert not supports(layer)
    gated = make_transformer_layer(False)
    gated._self_attention_layer._use_gate = True
    assert not supports(gated)


@pytest.mark.parametrize("make", [make_tiny_encoder, make_tiny_roberta], ids=["bert", "roberta"])
def test_bfloat16_encode_runs_it_with_keras_hubs_vectors(make):
    encoder = make().clone(dtype="bfloat16")
    inputs = encoder.preprocess(SENTENCES)
    keras_hubs = encoder.sentence_vectors(inputs, "mean", training=False).numpy().astype("float32")
    fused = run_in_graph(lambda: encoder.sentence_vectors(inputs, "mean", training=False),
                         forward_only=True).numpy().astype("float32")
    assert_close_vectors(fused, keras_hubs, rtol=2e-2)
    assert_close_vectors(encoder.encode(SENTENCES, pooling="mean"), keras_hubs, rtol=2e-2)
    # encode's graph: one QKV matmul per layer, no einsum projections.
    fn = encoder._encode_fn(encoder._resolve_pooling("mean"), False, True)
    ops = graph_ops(fn.get_concrete_function(tf.TensorSpec([None, None], tf.int32),
                                             tf.TensorSpec([None, None], tf.int32)))
    assert "Einsum" not in ops and ops.count("BatchMatMulV2") >= 2 * encoder.num_layers


def _encode_graph_ops(encoder):
    fn = encoder._encode_fn(encoder._resolve_pooling("mean"), False, True)
    return graph_ops(fn.get_concrete_function(tf.TensorSpec([None, None], tf.int32),
                                              tf.TensorSpec([None, None], tf.int32)))


@pytest.mark.parametrize("make", [make_tiny_encoder, make_tiny_roberta], ids=["bert", "roberta"])
def test_float32_encode_runs_it_with_keras_hubs_vectors(make, monkeypatch):
    encoder = make()
    ops = _encode_graph_ops(encoder)
    assert "Einsum" not in ops and ops.count("BatchMatMulV2") >= 2 * encoder.num_layers
    fused = encoder.encode(SENTENCES, pooling="mean")
    monkeypatch.setenv(DISABLE_ENV, "1")
    encoder._encode_fns.clear()
    assert "Einsum" in _encode_graph_ops(encoder)  # keras-hub's layer
    assert_close_vectors(fused, encoder.encode(SENTENCES, pooling="mean"), rtol=1e-5)


def test_float64_keeps_keras_hubs_layer(monkeypatch):
    calls = []
    real = fused_transformer.fused_call
    monkeypatch.setattr(fused_transformer, "fused_call", lambda *a, **k: calls.append(1) or real(*a, **k))
    x, padding = transformer_inputs()
    for dtype in ("float64", "float32"):
        layer = keras_hub.layers.TransformerEncoder(intermediate_dim=32, num_heads=2, dtype=dtype)
        layer.build([None, None, 16])
        assert install_fused_transformer([layer]) == 1
        run_in_graph(lambda: layer(tf.cast(x, dtype), padding_mask=padding, training=False),
                     forward_only=True)
    assert calls == [1]  # the float32 layer only


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_only_forward_only_graphs_take_it(monkeypatch, dtype):
    encoder = make_tiny_encoder().clone(dtype=dtype)
    layer = encoder.backbone.transformer_layers[0]
    calls = []
    real = fused_transformer.fused_call
    monkeypatch.setattr(fused_transformer, "fused_call", lambda *a, **k: calls.append(1) or real(*a, **k))
    x, padding = transformer_inputs(width=32, dtype=dtype)
    layer(x, padding_mask=padding, training=False)
    assert calls == []  # not forward-only
    run_in_graph(lambda: layer(x, padding_mask=padding, training=False))  # undeclared graph
    assert calls == []

    def forward_only(*args, **kwargs):
        return run_in_graph(lambda: layer(*args, **kwargs), forward_only=True)

    forward_only(x, padding_mask=padding, training=True)  # training: dropout, gradients
    forward_only(x, padding_mask=None)  # no padding mask: keras-hub's masks
    assert calls == []
    fused = forward_only(x, padding_mask=padding, training=False)
    assert calls == [1]
    monkeypatch.setenv(DISABLE_ENV, "1")
    plain = forward_only(x, padding_mask=padding, training=False)
    assert calls == [1]
    as_float = lambda t: tf.reshape(tf.cast(t, "float32"), [15, -1]).numpy()  # noqa: E731
    assert_close_vectors(as_float(fused), as_float(plain), rtol=2e-2)


def test_a_row_of_pure_padding_gives_finite_values():
    layer = make_transformer_layer(False)
    x, _ = transformer_inputs()
    padding = tf.constant([[1, 1, 0, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    for dtype in ("bfloat16", "float16"):
        out = fused_call(layer, tf.cast(x, dtype), padding)
        assert np.isfinite(tf.cast(out, "float32").numpy()).all()


def test_lora_enabled_after_install_falls_back(monkeypatch):
    encoder = make_tiny_encoder().clone(dtype="bfloat16")
    layer = encoder.backbone.transformer_layers[0]
    layer._self_attention_layer._query_dense.enable_lora(2)
    calls = []
    real = fused_transformer.fused_call
    monkeypatch.setattr(fused_transformer, "fused_call", lambda *a, **k: calls.append(1) or real(*a, **k))
    x, padding = transformer_inputs(width=32, dtype="bfloat16")
    run_in_graph(lambda: (layer(x, padding_mask=padding, training=False),
                          encoder.backbone.transformer_layers[1](x, padding_mask=padding,
                                                                training=False)),
                 forward_only=True)
    assert calls == [1]  # only the layer without LoRA
