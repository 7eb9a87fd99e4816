"""Every Hugging Face BERT folder a researcher has loads, checked against the encoder it came from.

The folders are written here from a tiny random encoder in Hugging Face's
layout (the inverse of keras-hub's converter), in the variants found in the
wild: with and without the pooler (a masked-LM checkpoint has none), with
`bert.` key prefixes and masked-LM head tensors, with the original BERT
`gamma`/`beta` LayerNorm names, and with float16 weights.
"""

import json

import pytest

from keras_sentemb.models import SentenceEncoder
from keras_sentemb.kernels.fused_gelu import gelu_form
from tests.conftest import make_tiny_encoder
from tests.helpers.files import write_hf_bert
from tests.numeric import assert_close_vectors

SENTS = ["a man is playing a guitar .", "the cat sits on the mat", "hello world"]


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
    for pooling in ("mean", "cls", "first_last"):  # the weights as loaded: float32 arithmetic
        assert_close_vectors(
            loaded.encode(SENTS, pooling=pooling, precision="float32"),
            source.encode(SENTS, pooling=pooling, precision="float32"),
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


@pytest.mark.parametrize("declared,expected,warning", [
    ({"hidden_dropout_prob": 0.25, "attention_probs_dropout_prob": 0.25}, 0.25, None),
    ({"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}, 0.0, None),
    ({"hidden_dropout_prob": 0.2, "attention_probs_dropout_prob": 0.1}, 0.2, "one rate"),
    ({"hidden_dropout_prob": "high"}, 0.1, "not a rate"),
    ({"hidden_dropout_prob": 1.5}, 0.1, "not a rate"),
])
def test_the_checkpoints_declared_dropout_is_the_one_trained(declared, expected, warning,
                                                             tmp_path, caplog):
    """keras-hub's converter builds BERT with dropout 0.1 whatever the checkpoint declares (the
    rate SimCSE's dropout views are made of): the encoder follows the checkpoint, in every
    dropout layer, and keeps it when saved and reloaded; a rate that is not one is named."""
    import logging

    import keras

    source = make_tiny_encoder(max_length=32)
    folder = write_hf_bert(source, tmp_path / "hf")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **declared}))
    with caplog.at_level(logging.WARNING):
        loaded = SentenceEncoder.from_preset(str(folder))
    assert (warning in caplog.text) if warning else "dropout" not in caplog.text
    again = SentenceEncoder.from_preset(loaded.save(tmp_path / "saved"))
    for encoder in (loaded, again):
        rates = [layer.rate for layer in encoder.backbone._flatten_layers()
                 if isinstance(layer, keras.layers.Dropout)]
        assert rates and all(rate == pytest.approx(expected) for rate in rates), rates
    assert_close_vectors(loaded.encode(SENTS), source.encode(SENTS), rtol=1e-5)
