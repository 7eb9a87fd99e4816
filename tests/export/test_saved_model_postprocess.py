"""Whitening and BERT-flow inside the exported SavedModel: same signature, output = encode()
followed by the post-processing, runnable without keras_sentemb / keras-hub / Keras."""

import json

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.export import saved_model as sm
from keras_sentemb.export.saved_model import export_saved_model
from keras_sentemb.export.standalone import run_standalone
from keras_sentemb.models.glow_flow import GlowFlow
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS
from tests.helpers.models import make_whitening
from tests.numeric import assert_close_vectors

SENTS = ["a man is playing a guitar .", "", "the cat sits on the mat", "résumé café 中文"]


def _flow(raw):
    flow = GlowFlow(raw.shape[1], levels=2, depth=1, coupling_width=8, pooling="mean", seed=0)
    flow.build()
    flow.initialize(raw)
    rng = np.random.default_rng(0)  # non-zero coupling outputs: a non-trivial flow
    for coupling in flow.couplings:
        coupling.out.set_weights([0.3 * rng.normal(size=w.shape) for w in coupling.out.get_weights()])
    return flow


@pytest.mark.parametrize("make_layer,dim", [(make_whitening, 8), (_flow, 32)], ids=["whitening", "flow"])
def test_export_applies_the_post_processing(make_layer, dim, tmp_path):
    encoder = make_tiny_encoder(normalize=True)
    layer = make_layer(encoder.encode(CORPUS, precision="float32"))
    encoder.postprocess = layer
    path = export_saved_model(encoder, tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "1" / sm.METADATA_FILE).read_text())
    assert meta["output_dim"] == dim and meta["postprocess"]["class"] == type(layer).__name__
    loaded = tf.saved_model.load(path)
    signature = loaded.signatures["serving_default"]
    assert list(signature.structured_input_signature[1]) == ["sentences"]
    served = signature(sentences=tf.constant(SENTS))["embeddings"].numpy()
    expected = np.asarray(layer(encoder.encode(SENTS, postprocess=False, precision="float32")))
    assert served.shape == (len(SENTS), dim)
    assert_close_vectors(served, expected, rtol=1e-5)
    assert_close_vectors(served, encoder.encode(SENTS, precision="float32"), rtol=1e-5)
    assert meta["verification"]["max_rel_diff"] <= 1e-4
    if isinstance(layer, GlowFlow):
        # The flow's ops (coupling networks, sigmoid, LU product) need no Python code at
        # serving time; the whitening's matmul is covered by the plain export's check.
        standalone = run_standalone(path, SENTS, strict=True)
        assert_close_vectors(standalone, served, rtol=1e-5)


def test_the_gate_is_scale_aware_on_whitened_vectors(tmp_path):
    # Whitened vectors are far from unit length: here a whitening whose
    # outputs have norms of ~1e4, where float rounding alone moves a
    # coordinate by more than any fixed absolute tolerance would allow. The
    # gate compares relative errors, so the export passes, and a relative
    # error above the caller's tolerance is refused with nothing left behind.
    encoder = make_tiny_encoder()
    layer = make_whitening(encoder.encode(CORPUS, precision="float32"))
    mean, kernel = layer.get_weights()
    layer.set_weights([mean, kernel * 1e4])
    encoder.postprocess = layer
    norms = np.linalg.norm(encoder.encode(SENTS, precision="float32"), axis=1)
    assert norms.min() > 1e3
    path = export_saved_model(encoder, tmp_path / "m", token_signature=False)
    meta = json.loads((tmp_path / "m" / "1" / sm.METADATA_FILE).read_text())
    assert meta["verification"]["max_rel_diff"] <= 1e-4
    assert meta["verification"]["min_cosine"] >= 0.99999
    served = tf.saved_model.load(path).signatures["serving_default"](
        sentences=tf.constant(SENTS))["embeddings"].numpy()
    cos = np.sum(served * encoder.encode(SENTS, precision="float32"), 1) / (norms * np.linalg.norm(served, axis=1))
    assert cos.min() >= 0.99999

    original = encoder.encode
    encoder.encode = lambda *a, **k: original(*a, **k) * (1 + 1e-3)  # 1e-3 relative
    with pytest.raises(sm.ExportVerificationError, match="relative error"):
        export_saved_model(encoder, tmp_path / "m2", token_signature=False, tolerance=1e-4)
    assert not (tmp_path / "m2").exists()
    path = export_saved_model(encoder, tmp_path / "m3", token_signature=False, tolerance=1e-2)
    assert path == str(tmp_path / "m3" / "1")
