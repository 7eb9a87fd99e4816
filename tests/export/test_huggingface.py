"""export_huggingface on tiny random encoders: layouts, files, round trip, errors, atomicity.

No PyTorch here: the folders are read back with safetensors, json and
`SentenceEncoder.from_preset` (test_huggingface_interop.py loads them with
the real sentence-transformers and transformers).
"""

import json
import os

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file

from keras_sentemb.export.huggingface import NotExportableError
from keras_sentemb.export.huggingface import export_huggingface
from keras_sentemb.export.saved_model import ExportVerificationError
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.models.backbone_adapter import truncate_backbone
from keras_sentemb.models.glow_flow import GlowFlow
from keras_sentemb.models.vocabulary import extend_vocabulary
from keras_sentemb.models.whitening import Whitening
from tests.export.hf_helpers import SENTS, make_tiny_bert, make_tiny_roberta

CORPUS = [f"{a} {b} on the mat ." for a in ("a man", "the cat", "a dog", "the woman", "x y")
          for b in ("sits", "runs", "is playing", "plays the piano", "z")]


def _json(path):
    return json.loads(path.read_text(encoding="utf-8"))


def _cosines(a, b):
    return np.sum(a * b, 1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)


def _assert_round_trip(encoder, folder, sentences=SENTS):
    loaded = SentenceEncoder.from_preset(str(folder))
    ours, back = encoder.encode(sentences), loaded.encode(sentences)
    assert back.shape == ours.shape
    assert _cosines(back, ours).min() >= 0.99999
    np.testing.assert_allclose(np.linalg.norm(back, axis=1), np.linalg.norm(ours, axis=1), rtol=1e-4)
    return loaded


# ------------------------------------------------------------ weights and layout
def test_bert_weights_use_hugging_face_names_and_layouts(tmp_path):
    encoder = make_tiny_bert()
    export_huggingface(encoder, tmp_path / "m", format="transformers", verify=False)
    weights = load_file(str(tmp_path / "m" / "model.safetensors"))
    block = encoder.backbone.transformer_layers[1]
    query = np.asarray(block._self_attention_layer.query_dense.kernel)  # [hidden, heads, head_dim]
    np.testing.assert_array_equal(weights["encoder.layer.1.attention.self.query.weight"],
                                  query.reshape(32, 32).T)
    out = np.asarray(block._self_attention_layer.output_dense.kernel)  # [heads, head_dim, hidden]
    np.testing.assert_array_equal(weights["encoder.layer.1.attention.output.dense.weight"],
                                  out.reshape(32, 32).T)
    np.testing.assert_array_equal(weights["encoder.layer.1.intermediate.dense.weight"],
                                  np.asarray(block._feedforward_intermediate_dense.kernel).T)
    assert weights["encoder.layer.1.intermediate.dense.weight"].shape == (64, 32)
    assert weights["pooler.dense.weight"].shape == (32, 32)
    assert weights["embeddings.token_type_embeddings.weight"].shape == (2, 32)
    assert len(weights) == 5 + 16 * 2 + 2 and all(v.dtype == np.float32 for v in weights.values())
    with safe_open(str(tmp_path / "m" / "model.safetensors"), "np") as f:
        assert f.metadata() == {"format": "pt"}
    config = _json(tmp_path / "m" / "config.json")
    assert config["architectures"] == ["BertModel"] and config["model_type"] == "bert"
    assert (config["vocab_size"], config["hidden_size"], config["num_hidden_layers"],
            config["num_attention_heads"], config["intermediate_size"],
            config["max_position_embeddings"]) == (encoder.backbone.vocabulary_size, 32, 2, 2, 64, 64)
    assert config["torch_dtype"] == "float32" and config["layer_norm_eps"] == 1e-12
    assert config["hidden_act"] == "gelu_new"  # keras-hub BERT's GELU is the tanh approximation


def test_roberta_positions_are_offset_and_there_is_no_pooler(tmp_path):
    encoder = make_tiny_roberta()
    # The gate's probes (long text) take a tiny byte-level BPE many seconds;
    # the round trip below is the same check on short sentences.
    export_huggingface(encoder, tmp_path / "m", verify=False)
    weights = load_file(str(tmp_path / "m" / "model.safetensors"))
    positions = weights["embeddings.position_embeddings.weight"]
    assert positions.shape == (34, 16)
    np.testing.assert_array_equal(positions[:2], 0.0)
    np.testing.assert_array_equal(
        positions[2:], np.asarray(encoder.adapter.position_embedding.position_embeddings))
    assert not any(k.startswith(("pooler.", "roberta.")) for k in weights)
    config = _json(tmp_path / "m" / "config.json")
    assert config["model_type"] == "roberta" and config["max_position_embeddings"] == 34
    assert config["type_vocab_size"] == 1 and config["hidden_act"] == "gelu"
    assert config["pad_token_id"] == 1 and config["layer_norm_eps"] == 1e-5
    for name in ("vocab.json", "merges.txt", "tokenizer.json"):
        assert (tmp_path / "m" / name).is_file()
    assert (tmp_path / "m" / "merges.txt").read_text().startswith("#version: 0.2\nĠ t\n")
    _assert_round_trip(encoder, tmp_path / "m")


# ------------------------------------------------------------ sentence-transformers files
def test_sentence_transformers_folder(tmp_path):
    encoder = make_tiny_bert(pooling="cls", normalize=True, projection_dim=8,
                             projection_activation="tanh", max_length=48)
    path = export_huggingface(encoder, tmp_path / "m", prompts={"query": "query: "})
    folder = tmp_path / "m"
    assert path == str(folder)
    modules = _json(folder / "modules.json")
    assert [(m["path"], m["type"].rsplit(".", 1)[1]) for m in modules] == [
        ("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Dense", "Dense"),
        ("3_Normalize", "Normalize")]
    pooling = _json(folder / "1_Pooling" / "config.json")
    assert pooling["word_embedding_dimension"] == 32 and pooling["pooling_mode_cls_token"]
    assert not pooling["pooling_mode_mean_tokens"] and not pooling["pooling_mode_max_tokens"]
    dense = _json(folder / "2_Dense" / "config.json")
    assert dense == {"in_features": 32, "out_features": 8, "bias": True,
                     "activation_function": "torch.nn.modules.activation.Tanh"}
    kernel, bias = encoder.projection.get_weights()
    dense_weights = load_file(str(folder / "2_Dense" / "model.safetensors"))
    np.testing.assert_array_equal(dense_weights["linear.weight"], kernel.T)
    np.testing.assert_array_equal(dense_weights["linear.bias"], bias)
    assert _json(folder / "sentence_bert_config.json")["max_seq_length"] == 48
    st_config = _json(folder / "config_sentence_transformers.json")
    assert st_config["similarity_fn_name"] == "cosine" and st_config["prompts"] == {"query": "query: "}
    tok = _json(folder / "tokenizer_config.json")
    assert tok["do_lower_case"] is True and tok["model_max_length"] == 48
    assert tok["tokenizer_class"] == "BertTokenizer" and tok["cls_token"] == "[CLS]"
    assert _json(folder / "special_tokens_map.json")["unk_token"] == "[UNK]"
    assert (folder / "vocab.txt").read_text().split("\n")[:3] == ["[PAD]", "[UNK]", "[CLS]"]
    fast = _json(folder / "tokenizer.json")
    assert fast["model"]["type"] == "WordPiece" and fast["normalizer"]["lowercase"] is True
    assert not list(tmp_path.glob(".*"))  # no temporary folder left
    loaded = _assert_round_trip(encoder, folder)
    assert (loaded.pooling, loaded.normalize, loaded.projection_dim, loaded.max_length) == (
        "cls", True, 8, 48)


@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "normalized"])
def test_whitening_is_a_dense_module_with_the_mean_in_the_bias(tmp_path, normalize):
    encoder = make_tiny_bert(normalize=normalize, pooling="mean")
    encoder.postprocess = Whitening.from_vectors(encoder.encode(CORPUS), dim=8, pooling="mean")
    export_huggingface(encoder, tmp_path / "m")
    modules = [m["path"] for m in _json(tmp_path / "m" / "modules.json")]
    assert modules == ["", "1_Pooling"] + (["2_Normalize", "3_Whitening"] if normalize
                                           else ["2_Whitening"])
    mean, kernel = encoder.postprocess.get_weights()
    weights = load_file(str(tmp_path / "m" / modules[-1] / "model.safetensors"))
    np.testing.assert_allclose(weights["linear.weight"], kernel.T, rtol=1e-6)
    np.testing.assert_allclose(weights["linear.bias"], -mean @ kernel, rtol=1e-4, atol=1e-4)
    loaded = _assert_round_trip(encoder, tmp_path / "m")
    assert isinstance(loaded.postprocess, Whitening) and loaded.output_dim == 8


def test_every_model_kind_exports(tmp_path):
    # An extended vocabulary: the new rows and vocab.txt agree.
    base = make_tiny_bert(pooling="mean")
    grown = extend_vocabulary(base, ["我喜欢在公园里散步。", "我喜欢猫。"] * 2, min_count=1)
    export_huggingface(grown, tmp_path / "vocab")
    vocab = (tmp_path / "vocab" / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(vocab) == _json(tmp_path / "vocab" / "config.json")["vocab_size"] > 42
    assert "喜" in vocab
    _assert_round_trip(grown, tmp_path / "vocab", ["我喜欢猫。", "a man 我喜欢在公园里散步。"])
    # A model cut to its first layer.
    cut = make_tiny_bert(pooling="max")
    cut = SentenceEncoder(truncate_backbone(cut.backbone, 1), cut.tokenizer, pooling="max",
                          max_length=64, text_normalization="bert_uncased")
    export_huggingface(cut, tmp_path / "cut")
    assert _json(tmp_path / "cut" / "config.json")["num_hidden_layers"] == 1
    _assert_round_trip(cut, tmp_path / "cut")


def test_a_bfloat16_model_is_written_in_float32_unless_asked(tmp_path):
    encoder = make_tiny_bert().clone(dtype="mixed_bfloat16")
    export_huggingface(encoder, tmp_path / "f32")
    with safe_open(str(tmp_path / "f32" / "model.safetensors"), "np") as f:
        assert f.get_tensor("embeddings.word_embeddings.weight").dtype == np.float32
    export_huggingface(encoder, tmp_path / "bf16", dtype="bfloat16", verify=False)
    header = (tmp_path / "bf16" / "model.safetensors").read_bytes()[:4000]
    assert b'"dtype":"BF16"' in header and b'"dtype":"F32"' not in header
    assert _json(tmp_path / "bf16" / "config.json")["torch_dtype"] == "bfloat16"
    export_huggingface(encoder, tmp_path / "f16", dtype="float16", format="transformers",
                       verify=False)
    assert _json(tmp_path / "f16" / "config.json")["torch_dtype"] == "float16"


# ------------------------------------------------------------ model card
def test_readme_is_a_hub_model_card(tmp_path):
    encoder = make_tiny_bert()
    encoder.model_card = {
        "base_model": "default", "training": None, "previous": None,
        "evaluation": [
            {"name": "STSBenchmark", "protocol": "cosine, Spearman x100, pooling mean",
             "split": "test", "value": 82.03},
            {"name": "MR", "protocol": "SentEval, accuracy %", "split": "test", "value": 75.0},
        ],
    }
    export_huggingface(encoder, tmp_path / "my-model", datasets=["sentence-transformers/stsb"])
    text = (tmp_path / "my-model" / "README.md").read_text(encoding="utf-8")
    head, body = text.split("\n---\n", 1)
    assert head.startswith("---\nlibrary_name: sentence-transformers\npipeline_tag: sentence-similarity")
    assert 'base_model: "sentence-transformers/all-MiniLM-L6-v2"' in head
    assert 'license: "apache-2.0"' in head and '- "sentence-transformers/stsb"' in head
    assert "model-index:" in head and "value: 0.8203" in head and "MR" not in head
    assert "# my-model" in body and "SentenceTransformer(" in body and "## Evaluation" in body
    card = _json(tmp_path / "my-model" / "model_card.json")
    assert card["export"]["format"] == "sentence-transformers"
    assert card["export"]["verified_min_cosine"] >= 0.99999


# ------------------------------------------------------------ refusals
@pytest.mark.parametrize("pooling", ["first_last", "mean_last2", "layer:1", "sbert_wk:0:1"])
def test_a_pooling_sentence_transformers_cannot_express_is_refused(tmp_path, pooling):
    encoder = make_tiny_bert(pooling=pooling)
    with pytest.raises(NotExportableError, match=r"cannot express .*cls, mean, max"):
        export_huggingface(encoder, tmp_path / "m")
    assert not tmp_path.joinpath("m").exists() and not list(tmp_path.iterdir())


def test_flow_and_heads_the_format_cannot_hold_are_refused(tmp_path):
    encoder = make_tiny_bert(pooling="mean")
    flow = GlowFlow(32, levels=1, depth=1, coupling_width=8, pooling="mean", seed=0)
    flow.build()
    encoder.postprocess = flow
    with pytest.raises(NotExportableError, match="GlowFlow"):
        export_huggingface(encoder, tmp_path / "m")
    with pytest.raises(NotExportableError, match="projection head"):
        export_huggingface(make_tiny_bert(projection_dim=8), tmp_path / "m", format="transformers")
    with pytest.raises(NotExportableError, match="activation 'softplus'"):
        export_huggingface(make_tiny_bert(projection_dim=8, projection_activation="softplus"),
                           tmp_path / "m")
    for kwargs, match in (({"format": "onnx"}, "format"), ({"dtype": "int8"}, "dtype"),
                          ({"tolerance": -1}, "tolerance"), ({"prompts": ["q"]}, "prompts")):
        with pytest.raises(ValueError, match=match):
            export_huggingface(make_tiny_bert(), tmp_path / "m", **kwargs)
    assert not list(tmp_path.iterdir())


def test_existing_output_is_refused_unless_overwrite_then_replaced_atomically(tmp_path):
    first, second = make_tiny_bert(pooling="mean"), make_tiny_bert(pooling="cls")
    export_huggingface(first, tmp_path / "m")
    before = (tmp_path / "m" / "1_Pooling" / "config.json").read_text()
    with pytest.raises(FileExistsError, match="already holds a model"):
        export_huggingface(second, tmp_path / "m")
    assert (tmp_path / "m" / "1_Pooling" / "config.json").read_text() == before
    # A failing overwrite leaves the earlier folder as it was.
    original = second.encode
    second.encode = lambda *a, **k: original(*a, **k) * 1.01
    with pytest.raises(ExportVerificationError, match="relative error"):
        export_huggingface(second, tmp_path / "m", overwrite=True)
    assert (tmp_path / "m" / "1_Pooling" / "config.json").read_text() == before
    assert sorted(os.listdir(tmp_path)) == ["m"]
    second.encode = original
    export_huggingface(second, tmp_path / "m", overwrite=True)
    assert _json(tmp_path / "m" / "1_Pooling" / "config.json")["pooling_mode_cls_token"]
    assert sorted(os.listdir(tmp_path)) == ["m"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="holding other files"):
        export_huggingface(first, tmp_path / "other", overwrite=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="cannot be created"):
        export_huggingface(first, tmp_path / "file" / "m")


def test_the_gate_refuses_a_folder_that_computes_something_else(tmp_path):
    # keras-hub's own normalization (text_normalization=None) is not what Hugging
    # Face's BERT tokenizer does on odd text (U+FFFD, format characters): the
    # folder would encode the probes differently, so it is refused, and the
    # message says how to export.
    from tests.conftest import make_tiny_encoder

    with pytest.raises(ExportVerificationError, match="text_normalization"):
        export_huggingface(make_tiny_encoder(), tmp_path / "new" / "m")
    assert not (tmp_path / "new" / "m").exists() and not list((tmp_path / "new").iterdir())


# ------------------------------------------------------------ command line
def test_cli_export_formats(tmp_path, capsys):
    from keras_sentemb.cli import main

    make_tiny_bert(pooling="cls").save(tmp_path / "model")
    model = str(tmp_path / "model")
    out = tmp_path / "hf"
    assert main(["export", "--model", model, "--output", str(out),
                 "--format", "sentence-transformers", "--num-layers", "1"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert _json(out / "config.json")["num_hidden_layers"] == 1
    for argv, message in (
        (["--format", "sentence-transformers"], "already holds a model"),
        (["--format", "sentence-transformers", "--pooling", "first_last", "--overwrite"],
         "cannot express 'first_last' pooling"),
        (["--format", "transformers", "--version", "2"], "--version applies"),
        (["--dtype", "float16"], "--dtype applies"),
    ):
        assert main(["export", "--model", model, "--output", str(out)] + argv) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["export", "--model", model, "--output", str(out), "--format", "transformers",
                 "--overwrite", "--dtype", "float16", "--tolerance", "1e-2"]) == 0
    assert not (out / "modules.json").exists()
    assert _json(out / "config.json")["torch_dtype"] == "float16"


# ------------------------------------------------------------ fast-tokenizer-only folders
@pytest.mark.parametrize("make, slow_files", [(make_tiny_bert, ("vocab.txt",)),
                                              (make_tiny_roberta, ("vocab.json", "merges.txt"))],
                         ids=["bert", "roberta"])
def test_a_folder_with_only_tokenizer_json_loads(tmp_path, make, slow_files):
    # transformers 5 (and sentence-transformers over it) saves tokenizer.json only.
    encoder = make()
    export_huggingface(encoder, tmp_path / "m", verify=False)
    for name in slow_files:
        os.remove(tmp_path / "m" / name)
    loaded = _assert_round_trip(encoder, tmp_path / "m")
    def ids(model):
        tokens = model.tokenize(SENTS)
        return tokens.to_list() if hasattr(tokens, "to_list") else np.asarray(tokens).tolist()

    assert ids(loaded) == ids(encoder)


def test_a_folder_without_any_vocabulary_is_one_clear_error(tmp_path):
    from keras_sentemb.models.loading import ModelLoadError

    export_huggingface(make_tiny_bert(), tmp_path / "m", verify=False)
    for name in ("vocab.txt", "tokenizer.json"):
        os.remove(tmp_path / "m" / name)
    with pytest.raises(ModelLoadError, match="neither vocab.txt nor a WordPiece tokenizer.json"):
        SentenceEncoder.from_preset(str(tmp_path / "m"))


def test_hidden_act_names_the_form_every_layer_computes_and_refuses_others():
    import keras

    from keras_sentemb.export.hf_weights import hidden_act
    from keras_sentemb.kernels.fused_gelu import unfuse_gelu
    from tests.conftest import make_tiny_encoder

    assert hidden_act(make_tiny_encoder().backbone) == "gelu_new"
    assert hidden_act(make_tiny_encoder(feedforward_gelu="exact").backbone) == "gelu"
    mixed = make_tiny_encoder()
    layers = mixed.backbone.transformer_layers
    unfuse_gelu(layers)
    layers[1]._feedforward_intermediate_dense.activation = keras.activations.gelu
    with pytest.raises(ValueError, match="the same in every layer"):
        hidden_act(mixed.backbone)
    layers[1]._feedforward_intermediate_dense.activation = keras.activations.relu
    with pytest.raises(ValueError, match="has no Hugging Face equivalent"):
        hidden_act(mixed.backbone)
