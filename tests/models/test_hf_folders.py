"""Every Hugging Face BERT folder a researcher has loads, checked against the encoder it came from.

The folders are written here from a tiny random encoder in Hugging Face's
layout (the inverse of keras-hub's converter), in the variants found in the
wild: with and without the pooler (a masked-LM checkpoint has none), with
`bert.` key prefixes and masked-LM head tensors, with the original BERT
`gamma`/`beta` LayerNorm names, and with float16 weights.
"""

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from keras_sentemb.export.hf_weights import hidden_act
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.kernels.fused_gelu import gelu_form
from tests.conftest import TINY_VOCAB, make_tiny_encoder
from tests.numeric import assert_close_vectors

SENTS = ["a man is playing a guitar .", "the cat sits on the mat", "hello world"]


def hf_weights(backbone, ln=("weight", "bias")):
    """The backbone's weights under Hugging Face BERT names, HF layouts."""
    w, b = ln
    out = {
        "embeddings.word_embeddings.weight": backbone.get_layer("token_embedding").embeddings,
        "embeddings.position_embeddings.weight":
            backbone.get_layer("position_embedding").position_embeddings,
        "embeddings.token_type_embeddings.weight": backbone.get_layer("segment_embedding").embeddings,
        f"embeddings.LayerNorm.{w}": backbone.get_layer("embeddings_layer_norm").gamma,
        f"embeddings.LayerNorm.{b}": backbone.get_layer("embeddings_layer_norm").beta,
        "pooler.dense.weight": np.transpose(backbone.get_layer("pooled_dense").kernel),
        "pooler.dense.bias": backbone.get_layer("pooled_dense").bias,
    }
    for i in range(backbone.num_layers):
        block = backbone.get_layer(f"transformer_layer_{i}")
        attn, p = block._self_attention_layer, f"encoder.layer.{i}."
        for name, dense in (("self.query", attn.query_dense), ("self.key", attn.key_dense),
                            ("self.value", attn.value_dense), ("output.dense", attn.output_dense)):
            kernel = np.asarray(dense.kernel)
            rows = kernel.shape[0] * (kernel.shape[1] if name == "output.dense" else 1)
            out[f"{p}attention.{name}.weight"] = np.transpose(np.reshape(kernel, (rows, -1)))
            out[f"{p}attention.{name}.bias"] = np.reshape(np.asarray(dense.bias), (-1,))
        out[f"{p}attention.output.LayerNorm.{w}"] = block._self_attention_layer_norm.gamma
        out[f"{p}attention.output.LayerNorm.{b}"] = block._self_attention_layer_norm.beta
        out[f"{p}intermediate.dense.weight"] = np.transpose(block._feedforward_intermediate_dense.kernel)
        out[f"{p}intermediate.dense.bias"] = block._feedforward_intermediate_dense.bias
        out[f"{p}output.dense.weight"] = np.transpose(block._feedforward_output_dense.kernel)
        out[f"{p}output.dense.bias"] = block._feedforward_output_dense.bias
        out[f"{p}output.LayerNorm.{w}"] = block._feedforward_layer_norm.gamma
        out[f"{p}output.LayerNorm.{b}"] = block._feedforward_layer_norm.beta
    return {k: np.ascontiguousarray(np.asarray(v)) for k, v in out.items()}


def write_hf_bert(encoder, folder, prefix="", pooler=True, mlm_head=False, dtype="float32",
                  ln=("weight", "bias")):
    folder.mkdir(parents=True)
    backbone = encoder.backbone
    weights = hf_weights(backbone, ln)
    if not pooler:
        weights = {k: v for k, v in weights.items() if not k.startswith("pooler.")}
    weights = {prefix + k: v.astype(dtype) for k, v in weights.items()}
    if mlm_head:
        hidden, vocab = backbone.hidden_dim, backbone.vocabulary_size
        weights.update({
            "cls.predictions.bias": np.zeros(vocab, dtype),
            "cls.predictions.transform.dense.weight": np.eye(hidden, dtype=dtype),
            "cls.predictions.transform.dense.bias": np.zeros(hidden, dtype),
            "cls.predictions.transform.LayerNorm.weight": np.ones(hidden, dtype),
            "cls.predictions.transform.LayerNorm.bias": np.zeros(hidden, dtype),
        })
    save_file(weights, str(folder / "model.safetensors"))
    config = {
        "model_type": "bert", "architectures": ["BertForMaskedLM" if mlm_head else "BertModel"],
        "vocab_size": backbone.vocabulary_size, "hidden_size": backbone.hidden_dim,
        "num_hidden_layers": backbone.num_layers, "num_attention_heads": backbone.num_heads,
        "intermediate_size": backbone.intermediate_dim,
        "max_position_embeddings": backbone.max_sequence_length, "type_vocab_size": 2,
        "hidden_act": hidden_act(backbone), "layer_norm_eps": 1e-12,
    }
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "vocab.txt").write_text("\n".join(TINY_VOCAB) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return folder


VARIANTS = {
    "plain": {},
    "no_pooler": {"pooler": False},
    "masked_lm_checkpoint": {"prefix": "bert.", "pooler": False, "mlm_head": True,
                             "ln": ("gamma", "beta")},
    "prefixed_with_pooler": {"prefix": "bert."},
    "float16": {"dtype": "float16", "pooler": False},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_hf_bert_folders_load_and_equal_the_source(variant, tmp_path, caplog):
    import logging

    source = make_tiny_encoder(max_length=32)
    folder = write_hf_bert(source, tmp_path / variant, **VARIANTS[variant])
    with caplog.at_level(logging.INFO):
        loaded = SentenceEncoder.from_preset(str(folder))
    rtol = 2e-3 if variant == "float16" else 1e-5
    for pooling in ("mean", "cls", "first_last"):
        assert_close_vectors(
            loaded.encode(SENTS, pooling=pooling),
            source.encode(SENTS, pooling=pooling),
            rtol=rtol,
            err_msg=pooling,
        )
    has_pooler = VARIANTS[variant].get("pooler", True)
    assert ("has no pooler weights" in caplog.text) is (not has_pooler)
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt"]


@pytest.mark.parametrize("act,form", [("gelu", "exact"), ("gelu_new", "tanh"),
                                      ("gelu_pytorch_tanh", "tanh")])
def test_the_checkpoints_declared_gelu_is_the_one_computed(act, form, tmp_path):
    """Hugging Face computes `hidden_act="gelu"` exactly; keras-hub's converter builds BERT
    with the tanh approximation whatever the checkpoint says. The encoder follows the
    checkpoint, and keeps its form when saved and reloaded."""
    source = make_tiny_encoder(max_length=32, feedforward_gelu=form)
    folder = write_hf_bert(source, tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_act": act}))
    loaded = SentenceEncoder.from_preset(str(folder))
    assert loaded.feedforward_gelu == form
    assert_close_vectors(loaded.encode(SENTS), source.encode(SENTS), rtol=1e-5)
    again = SentenceEncoder.from_preset(loaded.save(tmp_path / "saved"))
    assert again.feedforward_gelu == form
    assert_close_vectors(again.encode(SENTS), source.encode(SENTS), rtol=1e-5)
    # (The tiny model's activations are too small for the two forms' vectors to differ
    # visibly: the layers themselves say which one runs.)
    assert gelu_form(again.backbone.transformer_layers) == form


def test_a_non_gelu_hidden_act_keeps_keras_hubs_activation_and_says_so(tmp_path, caplog):
    import logging

    source = make_tiny_encoder(max_length=32)
    folder = write_hf_bert(source, tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_act": "quick_gelu"}))
    with caplog.at_level(logging.WARNING):
        loaded = SentenceEncoder.from_preset(str(folder))
    assert "hidden_act='quick_gelu'" in caplog.text
    assert loaded.feedforward_gelu is None
    assert_close_vectors(loaded.encode(SENTS), source.encode(SENTS), rtol=1e-5)
