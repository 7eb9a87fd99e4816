"""bfloat16 precision: encode close to float32, twins follow the weights, training round trip.

`precision="bfloat16"` computes in bfloat16 only where the CPU does so
natively (elsewhere it falls back to float32, see `native_bfloat16`). The
tests of bfloat16 math therefore force it (`KERAS_SENTEMB_BFLOAT16=force`),
and the fallback is tested on its own, so every test checks the same thing
on an AVX2-only CPU and on one with AVX512-BF16.
"""

import numpy as np
import pytest

from keras_sentemb import cli
from keras_sentemb.kernels import native_bfloat16
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.methods.simcse import fit_simcse
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS
from tests.numeric import assert_close_vectors

SENTENCES = ["a man plays the guitar", "the cat sits on the mat", "hello world", "x"]


@pytest.fixture(autouse=True)
def bfloat16_math(monkeypatch):
    """bfloat16 computed as bfloat16 on any CPU (emulated where it is not native)."""
    monkeypatch.setenv("KERAS_SENTEMB_BFLOAT16", "force")


@pytest.fixture
def cpu_without_native_bfloat16(monkeypatch):
    monkeypatch.delenv("KERAS_SENTEMB_BFLOAT16")
    monkeypatch.setattr(native_bfloat16, "has_native_bfloat16", lambda flags=None: False)


def test_bfloat16_encode_is_close_to_float32_and_float32_outputs():
    enc = make_tiny_encoder()
    full = enc.encode(SENTENCES, precision="float32")
    half = enc.encode(SENTENCES, precision="bfloat16")
    assert half.dtype == np.float32 and half.shape == full.shape
    # bfloat16 keeps 8 bits of mantissa: ~1e-2 relative error, far from random.
    cos = (full * half).sum(1) / np.linalg.norm(full, axis=1) / np.linalg.norm(half, axis=1)
    assert cos.min() > 0.999
    assert not np.array_equal(full, half)  # it really ran in bfloat16
    twin = enc.precision_twin("bfloat16")
    # An encoder that only encodes keeps its weights in bfloat16: no float32
    # copy cast in every forward pass.
    assert twin.backbone.dtype_policy.name == "bfloat16"
    assert {w.dtype for w in twin.backbone.weights} == {"bfloat16"}
    assert enc.precision_twin("float32") is enc
    assert twin.precision_twin("bfloat16") is twin
    with pytest.raises(ValueError, match="precision"):
        enc.encode(SENTENCES, precision="float16")


def test_a_mixed_precision_encoder_encodes_through_a_bfloat16_twin():
    enc = make_tiny_encoder()
    mixed = enc.clone(dtype="mixed_bfloat16")
    twin = mixed.precision_twin("bfloat16")
    assert twin is not mixed and twin.backbone.dtype_policy.name == "bfloat16"
    assert_close_vectors(mixed.encode(SENTENCES, precision="bfloat16"),
                         enc.encode(SENTENCES, precision="bfloat16"), rtol=1e-5)


def test_a_mixed_precision_encoder_encodes_float32_when_asked():
    """A model in mixed-precision training (dev scores, a teacher's targets) encodes float32
    through its float32 twin, not through its own bfloat16 compute."""
    enc = make_tiny_encoder()
    mixed = enc.clone(dtype="mixed_bfloat16")
    assert mixed.precision_twin("float32").backbone.dtype_policy.name == "float32"
    assert_close_vectors(mixed.encode(SENTENCES, precision="float32"),
                         enc.encode(SENTENCES, precision="float32"), rtol=1e-5)


def test_without_native_bfloat16_encode_computes_in_float32(cpu_without_native_bfloat16):
    enc = make_tiny_encoder()
    np.testing.assert_array_equal(enc.encode(SENTENCES, precision="bfloat16"),
                                  enc.encode(SENTENCES))


def test_the_bfloat16_twin_follows_the_weights():
    enc = make_tiny_encoder()
    before = enc.encode(SENTENCES, precision="bfloat16")
    enc.set_weights([w * 0.5 for w in enc.get_weights()])
    after = enc.encode(SENTENCES, precision="bfloat16")
    np.testing.assert_allclose(after, enc.encode(SENTENCES), rtol=0.05, atol=0.05)
    assert np.abs(after - before).max() > 0.05


def test_fit_in_bfloat16_returns_a_float32_encoder(tmp_path):
    start = make_tiny_encoder()
    weights = [w.copy() for w in start.get_weights()]
    out = fit_simcse(CORPUS[:64], model=start, steps=2, batch_size=8, dev=None,
                     pooling="mean", mlp="none", precision="bfloat16", verbose=0,
                     output=tmp_path / "model")
    assert out.backbone.dtype_policy.name == "float32"
    assert out.training_report.hyperparameters["precision"] == "bfloat16"
    assert out is start  # trained in place, as in float32, and computing in float32 again
    assert any(not np.array_equal(a, b) for a, b in zip(out.get_weights(), weights))
    loaded = SentenceEncoder.from_preset(str(tmp_path / "model"))
    assert loaded.backbone.dtype_policy.name == "float32"
    assert_close_vectors(loaded.encode(SENTENCES), out.encode(SENTENCES), rtol=1e-5)
    with pytest.raises(ValueError, match="precision"):
        fit_simcse(CORPUS[:64], model=start, steps=1, dev=None, precision="half")


def test_cli_encode_precision(tmp_path, capsys):
    model = tmp_path / "model"
    enc = make_tiny_encoder()
    enc.save(model)
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    assert cli.main(["encode", "--model", str(model), "--input", str(tmp_path / "in.txt"),
                     "--output", str(tmp_path / "out.npy"), "--precision", "bfloat16"]) == 0
    # Two bfloat16 graphs (built from the folder, and the twin of `enc`) may pick different
    # kernels for their shapes (AMX tiles, AVX512-BF16): equal to bfloat16's rounding.
    assert_close_vectors(
        np.load(tmp_path / "out.npy"), enc.encode(SENTENCES, precision="bfloat16"), rtol=2e-2,
        cos=0.9999
    )
    with pytest.raises(SystemExit):
        cli.main(["encode", "--model", str(model), "--input", str(tmp_path / "in.txt"),
                  "--output", str(tmp_path / "o.npy"), "--precision", "half"])
