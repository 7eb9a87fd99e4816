"""`truncate_dim`: the first k dimensions, renormalised; through save/load, export and the CLI."""

import json

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb import cli
from keras_sentemb.export.saved_model import export_saved_model
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.kernels.precision import PIN_ENV
from tests.conftest import make_tiny_encoder


@pytest.fixture(autouse=True)
def float32_encode(monkeypatch):
    """These tests check results against float32 references (a SavedModel, closed forms, the
    model's own forward pass), so `"auto"` computes float32 here; the default precision is
    tested in tests/test_default_precision.py."""
    monkeypatch.setenv(PIN_ENV, "float32")


SENTENCES = ["a man is playing a guitar .", "the cat sits on the mat", "hello world !", ""]


def _cosine_rows(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_first_dimensions_renormalised_when_the_model_normalises():
    encoder = make_tiny_encoder(normalize=True)
    full = encoder.encode(SENTENCES)
    cut = encoder.encode(SENTENCES, truncate_dim=8)
    assert cut.shape == (4, 8) and cut.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(cut, axis=1), 1.0, rtol=1e-5)
    assert np.all(_cosine_rows(cut, full[:, :8]) > 1 - 1e-6)
    assert encoder.encode(SENTENCES[0], truncate_dim=8).shape == (8,)


def test_without_normalisation_the_prefix_is_kept_as_is():
    encoder = make_tiny_encoder()
    full = encoder.encode(SENTENCES)
    cut = encoder.encode(SENTENCES, truncate_dim=5)
    np.testing.assert_allclose(cut, full[:, :5], rtol=1e-6, atol=0)
    # `normalize=True` at encode time counts as normalising.
    unit = encoder.encode(SENTENCES, truncate_dim=5, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("bad", [0, -1, 33, 2.5, True, "8"])
def test_out_of_range_is_refused(bad):
    with pytest.raises(ValueError, match=r"truncate_dim` must be an int in \[1, 32\]"):
        make_tiny_encoder().encode(SENTENCES, truncate_dim=bad)


def test_survives_save_load_and_export(tmp_path):
    encoder = make_tiny_encoder(normalize=True)
    expected = encoder.encode(SENTENCES, truncate_dim=12)
    encoder.save(tmp_path / "model")
    loaded = SentenceEncoder.from_preset(str(tmp_path / "model"))
    assert np.all(_cosine_rows(loaded.encode(SENTENCES, truncate_dim=12), expected) > 1 - 1e-6)
    path = export_saved_model(loaded, tmp_path / "served", truncate_dim=12,
                              token_signature=False)
    served = tf.saved_model.load(path).signatures["serving_default"]
    assert list(served.structured_outputs) == ["embeddings"]
    assert served.structured_outputs["embeddings"].shape.as_list() == [None, 12]
    got = served(sentences=tf.constant(SENTENCES))["embeddings"].numpy()
    assert got.shape == (4, 12)
    assert np.all(_cosine_rows(got, expected) > 1 - 1e-6)
    meta = json.loads((tmp_path / "served" / "1" / "assets.extra" / "sentemb_export.json").read_text())
    assert meta["truncate_dim"] == 12 and meta["output_dim"] == 12
    with pytest.raises(ValueError, match="truncate_dim"):
        export_saved_model(loaded, tmp_path / "bad", truncate_dim=40)


def test_cli_encode_and_evaluate_sts(tmp_path, capsys):
    from keras_sentemb.data.resources import bundled_sts_dir

    folder = tmp_path / "tiny"
    make_tiny_encoder(normalize=True).save(folder)
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES[:3]) + "\n")
    out = tmp_path / "out.npy"
    assert cli.main(["encode", "--model", str(folder), "--input", str(tmp_path / "in.txt"),
                     "--output", str(out), "--truncate-dim", "6"]) == 0
    assert np.load(out).shape == (3, 6)
    assert cli.main(["evaluate", "sts", "--model", str(folder), "--data", str(bundled_sts_dir()),
                     "--split", "dev", "--truncate-dim", "6"]) == 0
    capsys.readouterr()
    assert cli.main(["encode", "--model", str(folder), "--input", str(tmp_path / "in.txt"),
                     "--output", str(out), "--truncate-dim", "99"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "truncate_dim" in err[0]
