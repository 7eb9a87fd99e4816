"""Model-aware defaults on the bundled default model (integration tier).

With no option but a few steps, `fit_simcse`, `fit_consert` and `fit_ct`
train the default model with its own mean pooling (no [CLS], no MLP head),
`fit_self_guided` the [CLS] vector its method is defined on; each says so in
the report and never returns an encoder that is worse than the start on the
dev set with the pooling it encodes with.
"""

import pytest

import keras_sentemb
from keras_sentemb.data.resources import bundled_corpus
from keras_sentemb.evaluation.readers import read_stsb
from keras_sentemb.data.resources import bundled_sts_dir
from keras_sentemb.pipelines.callbacks import sts_spearman

DEV = read_stsb(bundled_sts_dir(), "dev")[:100]
CORPUS = [line for line in bundled_corpus().read_text(encoding="utf-8").splitlines() if line][:400]

FITS = {
    "simcse": lambda **kw: keras_sentemb.fit_simcse(CORPUS, batch_size=16, **kw),
    "consert": lambda **kw: keras_sentemb.fit_consert(CORPUS, batch_size=16, **kw),
    "ct": lambda **kw: keras_sentemb.fit_ct(CORPUS, **kw),
    "self_guided": lambda **kw: keras_sentemb.fit_self_guided(CORPUS, projection_dim=256, **kw),
}


@pytest.mark.parametrize("method", sorted(FITS))
def test_defaults_keep_the_models_pooling_and_never_lose_on_dev(method, default_encoder):
    start = default_encoder.clone()
    pooling = "cls" if method == "self_guided" else "mean"
    before = sts_spearman(start, DEV, pooling=pooling)
    kept = FITS[method](model=start, steps=2, eval_every=2, max_length=32, dev=DEV, verbose=0)
    report = kept.training_report
    if method == "self_guided":
        assert report.pooling == "cls" and "SG trains the [CLS] vector" in report.pooling_reason
    else:
        assert (report.pooling, report.pooling_reason) == ("mean", "the model declares mean pooling")
    assert kept.pooling == pooling and kept.projection is None
    assert report.resolved.get("mlp", "none") == "none"
    assert sts_spearman(kept, DEV) >= before - 1e-6
    assert report.selection["history"][0] == (0, pytest.approx(
        {name: before for name in report.selection["history"][0][1]}, abs=1e-3))
