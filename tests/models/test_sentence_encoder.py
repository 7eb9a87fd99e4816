import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.kernels.precision import PIN_ENV
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.models.presets import ModelNotFoundError, resolve_model
from keras_sentemb.models.encoding_engine import BUCKETS
from keras_sentemb.models import encoding_engine
from keras_sentemb.models.encoding_engine import EXACT_BUCKETS
from keras_sentemb.models.encoding_engine import EncodingEngine
from keras_sentemb.models.encoding_engine import bucket_length
from tests.conftest import make_tiny_encoder
from tests.numeric import assert_close_vectors



@pytest.fixture(autouse=True)
def float32_encode(monkeypatch):
    """These tests check `encode`'s semantics (batching, pooling, caching of its graphs) against
    the model's own float32 forward pass, so `"auto"` computes float32 here; the default
    precision is tested in tests/test_default_precision.py and tests/models/test_auto_precision.py."""
    monkeypatch.setenv(PIN_ENV, "float32")


SENTS = [
    "a man is playing a guitar .",
    "the cat sits on the mat",
    "hello",
    "",
    "a woman plays the piano in the park and the dog runs",
    "résumé café naïve",
]


def test_hidden_states_match_backbone(tiny_encoder):
    inputs = tiny_encoder.preprocess(tf.constant(SENTS))
    ref = tiny_encoder.backbone(inputs)["sequence_output"]
    states = tiny_encoder.hidden_states(inputs)
    assert len(states) == 3
    np.testing.assert_array_equal(states[-1].numpy(), ref.numpy())


def test_encode_is_order_and_batch_invariant(tiny_encoder):
    together = tiny_encoder.encode(SENTS, batch_size=4)
    one_by_one = np.stack([tiny_encoder.encode([s])[0] for s in SENTS])
    assert together.shape == (len(SENTS), 32) and together.dtype == np.float32
    assert_close_vectors(together, one_by_one, rtol=1e-5)
    direct = tiny_encoder(tiny_encoder.preprocess(tf.constant(SENTS))).numpy()
    assert_close_vectors(together, direct, rtol=1e-5)


def test_encode_edge_cases(tiny_encoder):
    assert tiny_encoder.encode([]).shape == (0, 32)
    assert tiny_encoder.encode("hello").shape == (32,)
    out = tiny_encoder.encode(["", "   ", b"bad \xff\xfe bytes", "x" * 100_000])
    assert np.isfinite(out).all()
    assert_close_vectors(
        tiny_encoder.encode([b"caf\xc3\xa9"]), tiny_encoder.encode(["café"]), rtol=1e-5
    )
    with pytest.raises(TypeError, match="index 1"):
        tiny_encoder.encode(["ok", None])
    with pytest.raises(ValueError, match="batch_size"):
        tiny_encoder.encode(["ok"], batch_size=0)
    with pytest.raises(ValueError, match="max_length"):
        tiny_encoder.encode(["ok"], max_length=1000)


def test_truncation_to_max_length(tiny_encoder):
    long = " ".join(["guitar"] * 200)
    truncated = " ".join(["guitar"] * 6)  # 6 words + [CLS] + [SEP] = 8 tokens
    assert_close_vectors(
        tiny_encoder.encode([long], max_length=8),
        tiny_encoder.encode([truncated], max_length=8),
        rtol=1e-5,
    )


def test_accents_are_stripped_like_the_reference(tiny_encoder):
    a = tiny_encoder.tokenize(tf.constant(["Résumé CAFÉ naïve"])).to_list()
    b = tiny_encoder.tokenize(tf.constant(["resume cafe naive"])).to_list()
    assert a == b and 1 not in a[0]  # no [UNK]


def test_pooling_and_normalize_options(tiny_encoder):
    inputs = tiny_encoder.preprocess(tf.constant(SENTS))
    states = tiny_encoder.hidden_states(inputs)
    cls = tiny_encoder.encode(SENTS, pooling="cls")
    assert_close_vectors(cls, states[-1][:, 0].numpy(), rtol=1e-5)
    normed = tiny_encoder.encode(SENTS, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(normed, axis=1), 1.0, rtol=1e-5)
    enc = make_tiny_encoder(pooling="layer:1", normalize=True)
    out = enc.encode(SENTS)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_bucket_length():
    # encode's widths: every even length up to 128, then coarser steps.
    assert bucket_length(3) == 4 and bucket_length(8) == 8 and bucket_length(9) == 10
    assert bucket_length(128) == 128 and bucket_length(129) == 160 and bucket_length(600) == 640
    # ... every length where the forward pass compiles nothing per shape.
    assert [bucket_length(n, EXACT_BUCKETS) for n in (2, 3, 9, 127, 128, 129)] == [
        2, 3, 9, 127, 128, 160]
    # Training's coarser widths.
    assert bucket_length(3, BUCKETS) == 8 and bucket_length(9, BUCKETS) == 16


def test_save_and_load_round_trip(tmp_path):
    enc = make_tiny_encoder(pooling="max", max_length=16, projection_dim=8, projection_activation="tanh")
    expected = enc.encode(SENTS)
    enc.save(tmp_path / "enc")
    stored = json.loads((tmp_path / "enc" / "sentemb_config.json").read_text())
    assert stored["pooling"] == "max" and stored["max_length"] == 16
    loaded = SentenceEncoder.from_preset(str(tmp_path / "enc"))
    assert (loaded.pooling, loaded.max_length, loaded.output_dim) == ("max", 16, 8)
    assert_close_vectors(loaded.encode(SENTS), expected, rtol=1e-5)
    override = SentenceEncoder.from_preset(str(tmp_path / "enc"), pooling="cls")
    assert override.pooling == "cls"


def test_keras_archive_round_trip(tmp_path):
    enc = make_tiny_encoder(pooling="mean_last2")
    expected = enc.encode(SENTS)
    enc.save(tmp_path / "enc.keras")
    loaded = keras.saving.load_model(tmp_path / "enc.keras", safe_mode=True)
    assert isinstance(loaded, SentenceEncoder) and loaded.pooling == "mean_last2"
    assert_close_vectors(loaded.encode(SENTS), expected, rtol=1e-5)


def test_keras_hub_preset_folder(tmp_path):
    enc = make_tiny_encoder()
    enc.backbone.save_to_preset(str(tmp_path / "p"))
    enc.tokenizer.save_to_preset(str(tmp_path / "p"))
    assert resolve_model(str(tmp_path / "p")).kind == "keras_hub"
    loaded = SentenceEncoder.from_preset(str(tmp_path / "p"), max_length=64)
    assert_close_vectors(loaded.encode(SENTS), enc.encode(SENTS), rtol=1e-5)


def test_clone_is_independent(tiny_encoder):
    copy = tiny_encoder.clone()
    assert_close_vectors(copy.encode(SENTS), tiny_encoder.encode(SENTS), rtol=1e-5)
    copy.backbone.token_embedding.embeddings.assign_add(
        tf.ones_like(copy.backbone.token_embedding.embeddings)
    )
    assert not np.allclose(copy.encode(SENTS), tiny_encoder.encode(SENTS))


def test_resolve_model_errors(tmp_path):
    with pytest.raises(ModelNotFoundError, match="Unknown model 'no_such_model'"):
        resolve_model("no_such_model")
    with pytest.raises(ModelNotFoundError, match="Unknown model"):
        resolve_model(str(tmp_path / "missing"))
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(ModelNotFoundError, match="is a file"):
        resolve_model(str(tmp_path / "f.txt"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="not a model"):
        resolve_model(str(tmp_path / "empty"))


def test_invalid_constructor_args():
    with pytest.raises(ValueError, match="max_length"):
        make_tiny_encoder(max_length=1000)
    with pytest.raises(ValueError, match="Unknown pooling"):
        make_tiny_encoder(pooling="avg")


def test_changing_settings_after_encode_takes_effect(tiny_encoder):
    plain = tiny_encoder.encode(SENTS)
    tiny_encoder.normalize = True
    normed = tiny_encoder.encode(SENTS)
    np.testing.assert_allclose(np.linalg.norm(normed, axis=1), 1.0, rtol=1e-5)
    tiny_encoder.normalize = False
    assert_close_vectors(tiny_encoder.encode(SENTS), plain, rtol=1e-5)
    tiny_encoder.pooling = "cls"
    assert not np.allclose(tiny_encoder.encode(SENTS), plain)


def test_encode_traces_its_graphs_without_autograph(monkeypatch):
    # Autograph's source conversion was most of a cold encode's tracing time;
    # nothing on the encode path needs it (tensor-dependent Python control flow
    # would fail the trace instead).
    from tensorflow.python.autograph.impl import api

    converted = []
    original = api.converted_call
    monkeypatch.setattr(api, "converted_call",
                        lambda f, *a, **k: converted.append(f) or original(f, *a, **k))
    encoder = make_tiny_encoder()
    for pooling in ("mean", "first_last"):
        encoder.encode(["a man plays the guitar", "hello"], pooling=pooling, normalize=True)
    assert converted == []


def _widths_encoded(encoder, sentences, monkeypatch, **kwargs):
    """The padded widths of the batches `encoder.encode(sentences)` computes, and its vectors."""
    widths = []
    run = encoding_engine.run_batches

    def spy(fn, batches, parallel_batches=None):
        def seen():
            for batch in batches:
                widths.append(batch[1].shape[1])
                yield batch
        return run(fn, seen(), parallel_batches)

    monkeypatch.setattr(encoding_engine, "run_batches", spy)
    return widths, encoder.encode(sentences, **kwargs)


@pytest.mark.parametrize("make,want", [
    (lambda: make_tiny_encoder(), [4]),  # the tanh GELU: an XLA kernel, compiled per shape
    (lambda: make_tiny_encoder(feedforward_gelu="exact"), [3]),
    (lambda: make_tiny_encoder(kernels="plain"), [3]),
], ids=["xla-kernel", "exact-gelu", "plain"])
def test_encode_pads_to_every_length_unless_the_graph_compiles_per_shape(make, want,
                                                                         monkeypatch):
    encoder = make()
    widths, vectors = _widths_encoded(encoder, ["hello"], monkeypatch)  # 1 token + 2 specials
    assert widths == want
    plain = make_tiny_encoder(kernels="plain", feedforward_gelu=encoder.feedforward_gelu)
    assert_close_vectors(vectors, plain.encode(["hello"]), rtol=1e-5)


def test_the_forward_pass_is_warmed_up_once_per_graph_while_tokenizing(monkeypatch):
    encoder = make_tiny_encoder(feedforward_gelu="exact")
    calls = []
    warm_up = EncodingEngine._warm_up
    monkeypatch.setattr(EncodingEngine, "_warm_up",
                        lambda self, fn: calls.append(fn) or warm_up(self, fn))
    first = encoder.encode(SENTS)
    assert len(calls) == 1
    assert_close_vectors(encoder.encode(SENTS), first, rtol=1e-6)
    encoder.encode(SENTS, pooling="cls")  # another graph
    assert len(calls) == 2
    # A tokenizing error reaches the caller once the warm-up is done, and nothing stays cached.
    fresh = make_tiny_encoder(feedforward_gelu="exact")

    def broken(*args, **kwargs):
        raise RuntimeError("tokenizer broke")

    monkeypatch.setattr(fresh, "_tokenize_to_numpy", broken)
    with pytest.raises(RuntimeError, match="tokenizer broke"):
        fresh.encode(SENTS)
    assert fresh._warm_encode_fns == {}
