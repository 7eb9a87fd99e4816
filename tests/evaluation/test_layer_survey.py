"""Layer survey: one pass equals L + 1 `layer:K` encodes; Spearman per layer; PNG."""

import json

import numpy as np
from scipy.stats import spearmanr

from keras_sentemb.evaluation.layer_survey import encode_all_layers
from keras_sentemb.evaluation.layer_survey import layer_survey
from keras_sentemb.evaluation.layer_survey import plot_layer_survey
from keras_sentemb.evaluation.sts import cosine_scores
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import STS_PAIRS as PAIRS, STS_SENTENCES as SENTENCES
from tests.numeric import assert_close_vectors


def test_encode_all_layers_equals_layer_pooling():
    encoder = make_tiny_encoder(num_layers=3, normalize=True)
    sentences = SENTENCES + ["a man and a woman are playing in the park on the mat"]
    got = encode_all_layers(encoder, sentences, batch_size=3)
    assert got.shape == (4, len(sentences), encoder.output_dim)
    for k in range(4):
        want = encoder.encode(sentences, pooling=f"layer:{k}", batch_size=3, precision="float32")
        assert_close_vectors(got[k], want, rtol=1e-5)
    assert encode_all_layers(encoder, []).shape == (4, 0, encoder.output_dim)


def test_layer_survey_matches_separate_evaluation(tmp_path):
    encoder = make_tiny_encoder(num_layers=2)
    path = tmp_path / "layers.png"
    result = layer_survey(encoder, data=PAIRS, path=path)
    json.dumps(result)
    assert [l["layer"] for l in result["layers"]] == [0, 1, 2]
    assert result["num_layers"] == 2 and result["num_pairs"] == len(PAIRS)
    gold = [p[2] for p in PAIRS]
    index = {s: i for i, s in enumerate(SENTENCES)}
    for entry in result["layers"]:
        vectors = encoder.encode(SENTENCES, pooling=entry["pooling"], precision="float32")
        a = vectors[[index[p[0]] for p in PAIRS]]
        b = vectors[[index[p[1]] for p in PAIRS]]
        want = spearmanr(cosine_scores(a, b), gold).correlation * 100
        np.testing.assert_allclose(entry["spearman"], want, atol=1e-6)
    assert path.exists() and path.read_bytes()[:4] == b"\x89PNG"
    plot_layer_survey({"before": result, "after": result}, tmp_path / "two.png")
    assert (tmp_path / "two.png").exists()


def test_cls_and_max_per_layer_from_one_pass(tmp_path):
    encoder = make_tiny_encoder(num_layers=2)
    got = encode_all_layers(encoder, SENTENCES, batch_size=3, poolings=("cls", "max", "mean"))
    assert_close_vectors(got["cls"][-1], encoder.encode(SENTENCES, pooling="cls", precision="float32"), rtol=1e-5)
    assert_close_vectors(got["max"][-1], encoder.encode(SENTENCES, pooling="max", precision="float32"), rtol=1e-5)
    assert_close_vectors(got["mean"][1], encoder.encode(SENTENCES, pooling="layer:1", precision="float32"), rtol=1e-5)
    # Earlier layers: the first token / masked max of that layer's states.
    inputs = encoder.preprocess(SENTENCES)
    states = encoder.hidden_states(inputs)
    mask = inputs["padding_mask"].numpy().astype(bool)
    first = np.asarray(states[1])[:, 0]
    masked = np.where(mask[:, :, None], np.asarray(states[1]), -np.inf).max(axis=1)
    assert_close_vectors(got["cls"][1], first, rtol=1e-5)
    assert_close_vectors(got["max"][1], masked, rtol=1e-5)
    surveys = layer_survey(encoder, data=PAIRS, pooling=("cls", "mean", "max"), path=tmp_path / "p.png")
    assert list(surveys) == ["cls", "mean", "max"]
    assert surveys["cls"]["layers"][2]["pooling"] == "cls@layer:2"
    assert surveys["mean"]["layers"] == layer_survey(encoder, data=PAIRS)["layers"]
    assert (tmp_path / "p.png").exists()
