"""Every registered method trains from a keras-hub start: a `BertTextEmbedder`, a RoBERTa
`(Backbone, Tokenizer)` pair and an `XLMRobertaTextEmbedder` (tiny random ones; the bundled model
as a `BertTextEmbedder` loaded by keras-hub itself, which encodes as keras-hub does and trains).

Every method trains from BERT. A method that only calls the encoder runs the same forward pass
whatever the family, so RoBERTa and XLM-RoBERTa train the methods that reach further into the
backbone or the tokenizer (`MethodTest.every_family`: views on the embeddings, hidden layers,
an LM head, copies of the weights, the vocabulary), each of which also runs that forward pass."""

import numpy as np
import pytest

import keras_sentemb
from tests.helpers.every_method import RUNS
from tests.helpers.keras_hub_starts import FAMILIES
from tests.helpers.keras_hub_starts import make_start
from tests.helpers.methods import write_tiny_data


def _train(method, start, tmp_path):
    # Each method's tiny data and options come from its folder's `MethodTest` (the registry).
    run = RUNS[method]
    return keras_sentemb.fit(method, str(write_tiny_data(run.data, tmp_path)), model=start,
                             steps=1, batch_size=8, max_length=16, dev=None, verbose=0,
                             **run.options)


def _methods(family):
    """Every method from BERT; from the other families, those that reach past the encoder's
    forward pass into the backbone or the tokenizer (`MethodTest.every_family`)."""
    methods = keras_sentemb.list_methods()
    return methods if family == "bert" else [m for m in methods if RUNS[m].every_family]


def test_every_family_trains_a_method_of_each_kind():
    """Each family trains at least a method that only calls the encoder (through the methods
    that also reach further) and one that reaches into the backbone."""
    for family in FAMILIES:
        assert any(RUNS[m].every_family for m in _methods(family)), family
    assert not all(RUNS[m].every_family for m in _methods("bert"))


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_every_method_trains_from_a_keras_hub_start(family, tmp_path):
    start = make_start(family)
    before = [np.array(w) for w in (start[0] if family == "roberta" else start).get_weights()]
    for method in _methods(family):
        encoder = _train(method, start, tmp_path)
        vectors = encoder.encode(["a man plays piano", "the cat sits"])
        assert vectors.shape[0] == 2 and np.isfinite(vectors).all(), method
    after = (start[0] if family == "roberta" else start).get_weights()
    assert all(np.array_equal(a, b) for a, b in zip(before, after))  # the start is never trained


def test_a_text_embedder_start_keeps_its_pooling_and_normalization(tmp_path):
    from tests.helpers.keras_hub_starts import make_bert_text_embedder

    encoder = _train("simcse", make_bert_text_embedder(pooling_mode="cls", normalize=False),
                     tmp_path)
    assert (encoder.pooling, encoder.normalize) == ("cls", False)
    assert encoder.training_report.pooling == "cls"


@pytest.mark.integration
def test_the_bundled_model_as_a_keras_hub_text_embedder_encodes_as_keras_hub_does_and_trains(
        tmp_path):
    """keras-hub's own loader reads the bundled model; the copy encodes as keras-hub does, and trains.

    Every method from a `BertTextEmbedder` start is the family test above; what the real
    model adds is keras-hub's preset loader and the weights it reads, so one method trains here.
    keras-hub builds BERT with the tanh approximation of GELU where the default model runs the
    exact GELU the checkpoint was trained with: the two are near, not equal.
    """
    import keras_hub

    from keras_sentemb.export.parity import relative_errors
    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.models.presets import default_model_dir

    start = keras_hub.models.TextEmbedder.from_preset(str(default_model_dir()))
    assert isinstance(start, keras_hub.models.BertTextEmbedder)
    converted, default = SentenceEncoder.from_preset(start), SentenceEncoder.from_preset("default")
    assert (converted.pooling, converted.normalize) == (default.pooling, default.normalize)
    sentences = ["a man plays piano", "the cat sits on the mat", ""]
    ours = converted.encode(sentences, precision="float32")
    assert relative_errors(ours, np.asarray(start.encode_text(sentences, verbose=0)))[0].max() < 1e-4
    assert relative_errors(ours, default.encode(sentences, precision="float32"))[0].max() < 4e-3
    encoder = _train("simcse", start, tmp_path)
    assert np.isfinite(encoder.encode(["a man plays piano"])).all()


def test_a_sentencepiece_tokenizer_made_before_the_runs_seed_tokenizes_in_tf_data():
    """`tf.random.set_seed` clears the kernel that holds tensorflow-text's SentencePiece model;
    `renew_sentencepiece` (every run calls it on its start) makes a new one."""
    import keras
    import tensorflow as tf

    from keras_sentemb.data.batching import tokenize_columns
    from keras_sentemb.models import SentenceEncoder
    from keras_sentemb.models.keras_hub_models import renew_sentencepiece

    encoder = SentenceEncoder.from_preset(make_start("xlm_roberta"))
    before = encoder.tokenize(["a man plays piano"]).to_list()
    keras.utils.set_random_seed(0)
    renew_sentencepiece(encoder)
    rows = tf.data.Dataset.from_tensor_slices({"sentence": ["a man plays piano"] * 4}).batch(4)
    batch = next(iter(tokenize_columns(encoder, rows, ["sentence"], 16)))
    assert batch["sentence"]["token_ids"].shape[0] == 4
    assert encoder.tokenize(["a man plays piano"]).to_list() == before
