"""`fit_whitening`: closed-form fit on the frozen encoder's vectors, dim chosen on dev, saving, CLI."""

import json

import numpy as np
import pytest

import keras_sentemb
from keras_sentemb import cli
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.models.whitening import Whitening
from keras_sentemb.pipelines.callbacks import sts_spearman
from keras_sentemb.methods.whitening import parse_dims
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS, DEV
from tests.numeric import assert_close_vectors


def test_fit_keeps_the_best_dev_dim_and_whitens_the_fitting_set(tmp_path):
    encoder = make_tiny_encoder()
    weights = [w.copy() for w in encoder.get_weights()]
    out = tmp_path / "white"
    kept = keras_sentemb.fit_whitening(CORPUS, model=encoder, dim="8,16,all", dev=DEV,
                                       output=str(out), verbose=0)
    report = kept.training_report
    # A raw backbone: the paper's first-last average; the encoder is frozen.
    assert report.pooling == "first_last" and kept.declared_pooling == "first_last"
    for a, b in zip(weights, kept.get_weights()):
        np.testing.assert_array_equal(a, b)
    scores = report.selection["history"][0][1]
    assert set(scores) == {"dim=8", "dim=16", "dim=31"}  # all = the 31 spanned
    best = max(scores, key=scores.get)
    assert report.selection["kept"] == best and f"dim={kept.output_dim}" == best
    assert sts_spearman(kept, DEV) == pytest.approx(scores[best], abs=1e-3)
    assert report.data == {"sentences": 300} and report.steps_trained == 0
    # The kept layer whitens exactly the vectors it was fitted on.
    whitened = kept.encode(CORPUS, precision="float32")  # as the fitting set was encoded
    np.testing.assert_allclose(np.cov(whitened.T), np.eye(kept.output_dim), atol=1e-3)
    raw = kept.encode(CORPUS, postprocess=False, precision="float32")
    assert_close_vectors(whitened, np.asarray(kept.postprocess(raw)), rtol=1e-5)
    saved = json.loads((out / "training_report.json").read_text())
    assert saved["extras"]["fitted_on"] == {"vectors": 300, "input_dim": 32}
    loaded = SentenceEncoder.from_preset(str(out))
    assert_close_vectors(loaded.encode(CORPUS[:6], precision="float32"), whitened[:6], rtol=1e-5)


def test_precomputed_vectors_give_the_same_layer_and_errors():
    encoder = make_tiny_encoder()
    vectors = encoder.encode(CORPUS, pooling="mean", precision="float32")  # as fit encodes
    from_sentences = keras_sentemb.fit_whitening(CORPUS, model=encoder, pooling="mean",
                                                 dim=8, dev=None).postprocess.get_weights()
    encoder.postprocess = None
    from_vectors = keras_sentemb.fit_whitening(vectors, model=encoder, pooling="mean",
                                               dim=8, dev=None).postprocess.get_weights()
    for a, b in zip(from_sentences, from_vectors):
        assert_close_vectors(a, b, rtol=1e-5)
    with pytest.raises(ValueError, match="takes no learning rate"):
        keras_sentemb.fit_whitening(CORPUS, model=encoder, learning_rate=1e-3)
    # A random LayerNorm's outputs sum to zero: the vectors span 31 dimensions
    # ("all" keeps those 31, as the dev-selection test shows).
    with pytest.raises(ValueError, match="span only 31 of 32 dimensions"):
        keras_sentemb.fit_whitening(vectors, model=encoder, dim=32, dev=None)
    with pytest.raises(ValueError, match="needs a dev set"):
        keras_sentemb.fit_whitening(CORPUS, model=encoder, dim=[4, 8], dev=None)
    with pytest.raises(ValueError, match="have 5 dimensions; the model outputs 32"):
        keras_sentemb.fit_whitening(np.ones((10, 5)), model=encoder, dev=None)
    assert parse_dims("128, all,128") == [128, None] and parse_dims(None) == [None]
    with pytest.raises(ValueError, match="comma-separated"):
        parse_dims("12,x")


def test_train_whitening_from_the_command_line(tmp_path, capsys):
    model = tmp_path / "tiny"
    make_tiny_encoder().save(model)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS), encoding="utf-8")
    out = tmp_path / "white"
    assert cli.main(["train", "whitening", "--model", str(model), "--train-file", str(corpus),
                     "--output", str(out), "--dim", "8", "--pooling", "mean", "--dev", "none",
                     "--verbose", "0"]) == 0
    loaded = SentenceEncoder.from_preset(str(out))
    assert isinstance(loaded.postprocess, Whitening) and loaded.output_dim == 8
    assert loaded.declared_pooling == "mean"


def test_moments_merged_batch_by_batch_equal_numpys_covariance():
    from keras_sentemb.models.whitening import VectorMoments

    rng = np.random.default_rng(0)
    x = 1e4 + rng.normal(size=(1000, 6)) @ rng.normal(size=(6, 6))  # far from the origin
    moments = VectorMoments()
    for start in range(0, 1000, 64):
        moments.update(x[start:start + 64])
    assert moments.count == 1000
    np.testing.assert_allclose(moments.mean, x.mean(axis=0), rtol=1e-12)
    reference = np.cov(x.T)
    assert np.abs(moments.covariance() - reference).max() <= 1e-9 * np.abs(reference).max()
    with pytest.raises(ValueError, match="size 6"):
        moments.update(np.zeros((2, 5)))


def test_a_streamed_corpus_whitens_as_the_same_sentences_in_memory(tmp_path):
    for i in range(2):
        (tmp_path / f"part-{i}.txt").write_text("\n".join(CORPUS[i * 60:(i + 1) * 60]) + "\n")
    common = dict(dev=None, batch_size=16, verbose=0, dim=8)
    streamed = keras_sentemb.fit_whitening(str(tmp_path / "part-*.txt"),
                                           model=make_tiny_encoder(), **common)
    listed = keras_sentemb.fit_whitening(CORPUS[:120], model=make_tiny_encoder(), **common)
    report = streamed.training_report
    assert report.data["sentences"] == 120 and "2 txt file(s)" in report.data["streamed"]
    assert report.extras["fitted_on"]["vectors"] == 120
    for a, b in zip(streamed.postprocess.get_weights(), listed.postprocess.get_weights()):
        assert_close_vectors(a, b, rtol=1e-4)
    # `steps` caps the sentences read: the first steps * batch_size of the stream.
    capped = keras_sentemb.fit_whitening(str(tmp_path / "part-*.txt"), model=make_tiny_encoder(),
                                         steps=3, **common)
    assert capped.training_report.extras["fitted_on"]["vectors"] == 48
