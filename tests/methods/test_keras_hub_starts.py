"""Every registered method trains from a keras-hub start: a `BertTextEmbedder`, a RoBERTa
`(Backbone, Tokenizer)` pair and an `XLMRobertaTextEmbedder` (tiny random ones; the bundled model
as a `BertTextEmbedder` loaded by keras-hub itself)."""

import numpy as np
import pytest

import keras_sentemb
from tests.helpers.corpora import MULTITASK_SENTENCES as WORDS
from tests.helpers.files import write_multitask_folder
from tests.helpers.keras_hub_starts import FAMILIES
from tests.helpers.keras_hub_starts import make_start

SENTENCES = [f"{WORDS[i % 8]} and {WORDS[(i * 3) % 8]} {i} ." for i in range(48)]
# Options that keep each method tiny (the method's own data shape aside).
OPTIONS = {"ct": {"negatives": "k3"}, "sg": {"projection_dim": 16},
           "parallel": {"eval_size": 10, "dev_size": 10, "queue_size": 8,
                        "track_alignment": False},
           "multitask": {"pretrain": "none"}, "static": {"dims": 8}}


def _data(method, tmp_path):
    if method == "parallel":
        return list(zip(SENTENCES, SENTENCES[1:] + SENTENCES[:1]))
    if method == "sts":
        return [(a, b, float(i % 6)) for i, (a, b) in enumerate(zip(SENTENCES, SENTENCES[2:]))]
    if method == "multitask":
        write_multitask_folder(tmp_path / "multitask")
        return str(tmp_path / "multitask")
    return SENTENCES


def _train(method, start, tmp_path):
    return keras_sentemb.fit(method, _data(method, tmp_path), model=start, steps=1, batch_size=8,
                             max_length=16, dev=None, verbose=0, **OPTIONS.get(method, {}))


def test_the_options_name_only_registered_methods():
    assert set(OPTIONS) <= set(keras_sentemb.list_methods())


# Training from an XLM-RoBERTa start does not work yet: the SentencePiece tokenizer's resource is
# missing when the tf.data pipeline tokenizes ("Resource ... SentencepieceResource does not
# exist"), and the static method cannot write a SentencePiece tokenizer. Encoding and exporting
# one work (tests/models/test_keras_hub_models.py, tests/export/test_keras_hub_export.py).
XLM_ROBERTA_TRAINING = pytest.mark.xfail(
    strict=True, reason="training tokenizes XLM-RoBERTa's SentencePiece in tf.data: resource missing")


@pytest.mark.slow
@pytest.mark.parametrize("family", [f if f != "xlm_roberta" else
                                    pytest.param(f, marks=XLM_ROBERTA_TRAINING) for f in FAMILIES])
def test_every_method_trains_from_a_keras_hub_start(family, tmp_path):
    start = make_start(family)
    before = [np.array(w) for w in (start[0] if family == "roberta" else start).get_weights()]
    for method in keras_sentemb.list_methods():
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
@pytest.mark.slow
def test_every_method_trains_from_the_bundled_model_as_a_keras_hub_text_embedder(tmp_path):
    import keras_hub

    from keras_sentemb.models.presets import default_model_dir

    start = keras_hub.models.TextEmbedder.from_preset(str(default_model_dir()))
    assert isinstance(start, keras_hub.models.BertTextEmbedder)
    for method in keras_sentemb.list_methods():
        encoder = _train(method, start, tmp_path)
        assert np.isfinite(encoder.encode(["a man plays piano"])).all(), method
