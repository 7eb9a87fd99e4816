"""keras-hub models as `model`: `TextEmbedder` objects and preset folders, `(Backbone, Tokenizer)` pairs."""

import numpy as np
import pytest

from keras_sentemb.export.parity import relative_errors
from keras_sentemb.models import SentenceEncoder
from tests.helpers.files import write_stsb
from tests.helpers.keras_hub_starts import make_bert_text_embedder
from tests.helpers.keras_hub_starts import make_roberta_pair
from tests.helpers.keras_hub_starts import make_xlm_roberta_text_embedder

SENTENCES = ["a man is playing guitar", "the cat sits on the mat", "hello world", ""]


def _assert_same_vectors(encoder, embedder, sentences=SENTENCES):
    errors, _ = relative_errors(encoder.encode(sentences, precision="float32"),
                                np.asarray(embedder.encode_text(sentences, verbose=0)))
    assert errors.max() < 1e-4


@pytest.mark.parametrize("pooling_mode,normalize", [("mean", True), ("cls", False), ("max", True)])
def test_a_bert_text_embedder_encodes_with_its_pooling_normalization_and_length(
        pooling_mode, normalize):
    embedder = make_bert_text_embedder(pooling_mode, normalize, sequence_length=24)
    encoder = SentenceEncoder.from_preset(embedder)
    assert (encoder.pooling, encoder.normalize, encoder.max_length) == (pooling_mode, normalize, 24)
    assert encoder.declared_pooling == pooling_mode
    _assert_same_vectors(encoder, embedder)


def test_an_xlm_roberta_text_embedder_encodes_as_keras_hub_does():
    embedder = make_xlm_roberta_text_embedder(pooling_mode="cls")
    encoder = SentenceEncoder.from_preset(embedder)
    assert encoder.adapter.family == "roberta" and encoder.pooling == "cls"
    _assert_same_vectors(encoder, embedder)


def test_the_keras_hub_object_is_copied_not_changed():
    embedder = make_bert_text_embedder()
    before = [np.array(w) for w in embedder.get_weights()]
    encoder = SentenceEncoder.from_preset(embedder)
    assert encoder.backbone is not embedder.backbone
    encoder.backbone.set_weights([w + 1.0 for w in encoder.backbone.get_weights()])
    assert all(np.array_equal(a, b) for a, b in zip(before, embedder.get_weights()))


def test_a_backbone_comes_with_its_tokenizer():
    backbone, tokenizer = make_roberta_pair()
    encoder = SentenceEncoder.from_preset((backbone, tokenizer), pooling="cls")
    assert encoder.pooling == "cls" and encoder.declared_pooling == "cls"
    assert encoder.max_length == 64 and encoder.encode(SENTENCES).shape == (4, 16)
    bare = SentenceEncoder.from_preset((backbone, tokenizer))
    assert bare.declared_pooling is None  # a raw backbone: the methods use their paper's pooling
    with pytest.raises(TypeError, match=r"carries no tokenizer: pass `\(backbone, tokenizer\)`"):
        SentenceEncoder.from_preset(backbone)
    with pytest.raises(TypeError, match="keras-hub tokenizer second"):
        SentenceEncoder.from_preset((backbone, "vocab.txt"))


def test_what_cannot_be_an_encoder_is_one_clear_error():
    import keras_hub

    embedder = make_bert_text_embedder()
    headless = keras_hub.models.BertTextEmbedder(embedder.backbone, preprocessor=None)
    with pytest.raises(ValueError, match="has no preprocessor"):
        SentenceEncoder.from_preset(headless)
    gpt2 = keras_hub.models.GPT2Backbone(vocabulary_size=10, num_layers=1, num_heads=1,
                                         hidden_dim=4, intermediate_dim=8, max_sequence_length=8)
    tokenizer = embedder.preprocessor.tokenizer
    with pytest.raises(ValueError, match="BERT and RoBERTa backbones.*GPT2Backbone"):
        SentenceEncoder.from_preset((gpt2, tokenizer))


@pytest.mark.parametrize("make", [make_bert_text_embedder, make_xlm_roberta_text_embedder])
def test_a_text_embedder_preset_folder_keeps_its_pooling_normalization_and_length(make, tmp_path):
    embedder = make(pooling_mode="max", normalize=False, sequence_length=20)
    embedder.save_to_preset(str(tmp_path / "preset"))
    encoder = SentenceEncoder.from_preset(tmp_path / "preset")
    assert (encoder.pooling, encoder.normalize, encoder.max_length) == ("max", False, 20)
    _assert_same_vectors(encoder, embedder)


def test_a_backbone_preset_folder_declares_no_pooling(tmp_path):
    embedder = make_bert_text_embedder()
    embedder.backbone.save_to_preset(str(tmp_path / "preset"))
    embedder.preprocessor.tokenizer.save_to_preset(str(tmp_path / "preset"))
    encoder = SentenceEncoder.from_preset(tmp_path / "preset")
    assert encoder.declared_pooling is None and encoder.normalize is False


def test_the_evaluation_helpers_take_a_text_embedder(tmp_path):
    import keras_sentemb

    pairs = [("a man is playing guitar", "a man plays piano", 3.0),
             ("the cat sits on the mat", "the dog sits", 2.0),
             ("hello world", "a woman is playing guitar", 0.5),
             ("a dog runs in the park", "the dog sits", 2.5)]
    write_stsb(tmp_path / "STS" / "STSBenchmark", {"test": pairs})
    embedder = make_bert_text_embedder()
    ours = keras_sentemb.evaluate_sts(SentenceEncoder.from_preset(embedder), tmp_path / "STS",
                                      tasks="stsb", precision="float32")
    theirs = keras_sentemb.evaluate_sts(embedder, tmp_path / "STS", tasks="stsb",
                                        precision="float32")
    assert theirs["STSBenchmark"] == ours["STSBenchmark"]
