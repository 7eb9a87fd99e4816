"""The one forward pass: hooks, the backbone adapter (BERT / RoBERTa), declared pooling."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.augment.views import make_view
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.models.backbone_adapter import BackboneAdapter
from keras_sentemb.pipelines.plan import resolve_pooling
from keras_sentemb.trainers.training_head import resolve_training_mlp
from tests.conftest import TINY_VOCAB, make_tiny_encoder
from tests.helpers.models import make_tiny_roberta
from tests.numeric import assert_close_vectors

SENTS = ["a man is playing a guitar .", "the cat sits on the mat", "hello"]


@pytest.mark.parametrize("make", [make_tiny_encoder, make_tiny_roberta], ids=["bert", "roberta"])
def test_forward_equals_the_backbone_and_reports_its_mask(make):
    encoder = make()
    inputs = encoder.preprocess(tf.constant(SENTS))
    ref = encoder.backbone({k: inputs[k] for k in encoder.backbone.input})
    ref = ref["sequence_output"] if isinstance(ref, dict) else ref
    states, mask = encoder.forward(inputs)
    assert len(states) == encoder.num_layers + 1
    assert_close_vectors(states[-1].numpy(), ref.numpy(), rtol=1e-5)
    np.testing.assert_array_equal(mask.numpy(), inputs["padding_mask"].numpy())
    assert encoder.adapter.family == ("roberta" if make is make_tiny_roberta else "bert")


def test_hooks_act_where_the_views_act():
    encoder = make_tiny_encoder()
    inputs = encoder.preprocess(tf.constant(SENTS))
    seen = {}

    def positions(p, m):
        seen["positions"] = p
        return tf.reverse(p, axis=[1])

    def embeddings(x, m):
        seen["embeddings"] = x
        return x * 0.0, m

    states, _ = encoder.forward(inputs, position_transform=positions, embedding_transform=embeddings)
    np.testing.assert_array_equal(seen["positions"].numpy()[0], np.arange(inputs["token_ids"].shape[1]))
    np.testing.assert_array_equal(states[0].numpy(), 0.0)  # the transform's output goes on
    reversed_positions = tf.reverse(seen["positions"], axis=[1])
    plain = encoder.adapter.embed(inputs["token_ids"], None, reversed_positions)
    assert_close_vectors(seen["embeddings"].numpy(), plain.numpy(), rtol=1e-5)
    # A view through sentence_vectors: identity out of training, active in training.
    view = make_view("feature_cutoff", rate=0.5, seed=1)
    a = encoder.sentence_vectors(inputs, "mean", training=False, view=view)
    assert_close_vectors(a.numpy(), encoder(inputs).numpy(), rtol=1e-5)
    b = encoder.sentence_vectors(inputs, "mean", training=True, dropout=False, view=view)
    assert not np.allclose(a.numpy(), b.numpy())


def test_dropout_switch_is_separate_from_training():
    encoder = make_tiny_encoder()
    inputs = encoder.preprocess(tf.constant(SENTS))
    off = [encoder.sentence_vectors(inputs, training=True, dropout=False).numpy() for _ in range(2)]
    np.testing.assert_array_equal(off[0], off[1])
    on = [encoder.sentence_vectors(inputs, training=True).numpy() for _ in range(2)]
    assert not np.allclose(on[0], on[1])


def test_adapter_rejects_other_backbones_and_lists_the_embedding_block():
    with pytest.raises(ValueError, match="BERT or RoBERTa"):
        BackboneAdapter(keras.layers.Dense(3))
    bert = make_tiny_encoder().adapter.embedding_block_layers()
    assert [layer.name for layer in bert] == [
        "token_embedding", "position_embedding", "segment_embedding", "embeddings_layer_norm"]
    roberta = make_tiny_roberta().adapter.embedding_block_layers()
    assert [layer.name for layer in roberta] == ["embeddings", "embeddings_layer_norm"]


def test_declared_pooling_and_its_round_trips(tmp_path):
    raw = make_tiny_encoder()
    assert raw.declared_pooling is None and raw.pooling == "mean"
    assert resolve_pooling("auto", raw, "cls") == (
        "cls", "the model declares no pooling; the paper's cls pooling")
    raw.save(tmp_path / "raw")
    again = SentenceEncoder.from_preset(str(tmp_path / "raw"))
    assert again.declared_pooling is None  # saving does not invent a declaration
    assert raw.clone().declared_pooling is None
    declared = make_tiny_encoder(pooling="max")
    assert resolve_pooling("auto", declared, "cls") == ("max", "the model declares max pooling")
    assert resolve_pooling("cls", declared, "mean") == ("cls", "set by the caller")
    declared.save(tmp_path / "max")
    assert SentenceEncoder.from_preset(str(tmp_path / "max")).declared_pooling == "max"
    config = declared.get_config()
    assert config["pooling"] == "max"
    raw.pooling = "layer:-1"
    assert raw.declared_pooling == "layer:2"


def test_default_model_declares_mean(default_encoder):
    assert default_encoder.declared_pooling == "mean"


def test_training_mlp_follows_cls_pooling():
    assert resolve_training_mlp("auto", "cls") == "train"
    assert resolve_training_mlp("auto", "mean") == "none"
    assert resolve_training_mlp("train", "mean") == "train"
    with pytest.raises(ValueError, match="mlp"):
        resolve_training_mlp("always", "cls")


def test_packing_wraps_the_tiny_vocabulary_ids_in_cls_sep_pad():
    # The ids are the positions in TINY_VOCAB: [PAD] 0, [CLS] 2, [SEP] 3; the
    # tokenizer lower-cases and splits "guitars!" into guitar ##s !.
    encoder = make_tiny_encoder()
    vocab = {t: i for i, t in enumerate(TINY_VOCAB)}
    words = [["a", "man", "plays", "guitar", "##s", "!"], ["hello"], []]
    inputs = encoder.preprocess(tf.constant(["A man plays guitars!", "hello", ""]))
    width = len(words[0]) + 2
    expected = [[vocab["[CLS]"]] + [vocab[w] for w in row] + [vocab["[SEP]"]] for row in words]
    expected = [row + [vocab["[PAD]"]] * (width - len(row)) for row in expected]
    assert inputs["token_ids"].numpy().tolist() == expected
    assert inputs["padding_mask"].numpy().tolist() == [
        [1] * (len(row) + 2) + [0] * (width - len(row) - 2) for row in words
    ]
    assert inputs["segment_ids"].numpy().tolist() == [[0] * width] * 3
    # Truncation keeps [CLS] first and [SEP] last.
    short = encoder.preprocess(tf.constant(["A man plays guitars!"]), max_length=4)
    assert short["token_ids"].numpy().tolist() == [[2, vocab["a"], vocab["man"], 3]]
    # "cls" pooling reads the last layer at the [CLS] position.
    states, _ = encoder.forward(inputs)
    np.testing.assert_array_equal(encoder.sentence_vectors(inputs, pooling="cls").numpy(),
                                  states[-1][:, 0].numpy())


@pytest.mark.parametrize("make", [make_tiny_encoder, make_tiny_roberta], ids=["bert", "roberta"])
def test_truncated_backbone_is_the_first_layers(make, tmp_path):
    from keras_sentemb.models.backbone_adapter import truncate_backbone

    encoder = make()
    small = SentenceEncoder(truncate_backbone(encoder.backbone, 1), encoder.tokenizer,
                            max_length=encoder.max_length)
    inputs = encoder.preprocess(tf.constant(SENTS))
    np.testing.assert_array_equal(small.hidden_states(inputs)[-1].numpy(),
                                  encoder.hidden_states(inputs)[1].numpy())
    assert small.num_layers == 1 and len(small.backbone.transformer_layers) == 1
    with pytest.raises(ValueError, match=r"`num_layers` must be in \[1, 2\]"):
        truncate_backbone(encoder.backbone, 3)


def test_from_preset_num_layers_saves_and_reloads(tmp_path):
    make_tiny_encoder(pooling="max").save(tmp_path / "full")
    small = SentenceEncoder.from_preset(str(tmp_path / "full"), num_layers=1)
    assert small.num_layers == 1 and small.declared_pooling == "max"
    small.save(tmp_path / "small")
    again = SentenceEncoder.from_preset(str(tmp_path / "small"))
    assert again.num_layers == 1
    assert_close_vectors(again.encode(SENTS), small.encode(SENTS), rtol=1e-5)
