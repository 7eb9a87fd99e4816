"""`fit_flow` (BERT-flow): maximum likelihood on frozen vectors, dev selection, saving, resume."""

import json

import numpy as np
import pytest

import keras_sentemb
from keras_sentemb import cli
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.models.glow_flow import GlowFlow
from keras_sentemb.pipelines.callbacks import sts_spearman
from keras_sentemb.methods.bert_flow.trainer import BertFlow
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS, DEV
from tests.numeric import assert_close_vectors

FLOW = {"levels": 2, "depth": 1, "coupling_width": 8}


def test_fit_trains_the_flow_only_and_keeps_the_best_dev_step(tmp_path):
    encoder = make_tiny_encoder()
    weights = [w.copy() for w in encoder.get_weights()]
    out = tmp_path / "flow"
    kept = keras_sentemb.fit_flow(CORPUS[:64], model=encoder, steps=4, batch_size=16,
                                  eval_every=2, dev=DEV, output=str(out), verbose=0,
                                  learning_rate=1e-2, **FLOW)
    report = kept.training_report
    assert report.pooling == "mean_last2" and kept.declared_pooling == "mean_last2"
    assert report.steps_trained == 4
    for a, b in zip(weights, kept.get_weights()):  # the encoder is frozen
        np.testing.assert_array_equal(a, b)
    history = report.selection["history"]
    assert [s for s, _ in history] == [0, 2, 4]
    best = max(scores["flow"] for _, scores in history)
    assert sts_spearman(kept, DEV) == pytest.approx(best, abs=1e-3)
    assert isinstance(kept.postprocess, GlowFlow) and kept.output_dim == 32
    raw = kept.encode(CORPUS[:8], postprocess=False)
    assert_close_vectors(kept.encode(CORPUS[:8]), np.asarray(kept.postprocess(raw)), rtol=1e-5)
    saved = json.loads((out / "sentemb_config.json").read_text())
    assert saved["postprocess"]["class_name"] == "GlowFlow"
    loaded = SentenceEncoder.from_preset(str(out))
    assert_close_vectors(loaded.encode(CORPUS[:8]), kept.encode(CORPUS[:8]), rtol=1e-5)


def test_loss_is_the_negative_log_likelihood_per_dimension():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(32, 8)).astype("float32")
    flow = GlowFlow(8, **FLOW, seed=0)
    flow.build()
    flow.initialize(vectors)
    trainer = BertFlow(flow)
    terms = trainer.compute_loss_terms({"vector": vectors})
    loss, metrics = terms.loss, terms.metrics
    expected = -np.mean(flow.log_prob(vectors).numpy()) / 8
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert float(metrics["bits_per_dim"]) == pytest.approx(expected / np.log(2), rel=1e-5)
    with pytest.raises(TypeError, match="must be a GlowFlow"):
        BertFlow("flow")


def test_train_flow_from_the_command_line(tmp_path):
    model = tmp_path / "tiny"
    make_tiny_encoder().save(model)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS[:64]), encoding="utf-8")
    out = tmp_path / "flow"
    assert cli.main(["train", "flow", "--model", str(model), "--train-file", str(corpus),
                     "--output", str(out), "--steps", "2", "--batch-size", "16",
                     "--levels", "2", "--depth", "1", "--coupling-width", "8",
                     "--pooling", "cls", "--dev", "none", "--verbose", "0"]) == 0
    loaded = SentenceEncoder.from_preset(str(out))
    assert isinstance(loaded.postprocess, GlowFlow) and loaded.declared_pooling == "cls"
    assert json.loads((out / "training_report.json").read_text())["steps_trained"] == 2
