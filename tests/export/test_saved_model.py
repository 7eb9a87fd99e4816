"""String-in SavedModel export on a tiny random encoder: contract, layout,
versions, verification, robustness, keras-free loading, saved_model_cli."""

import json
import logging
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.export import saved_model as sm
from keras_sentemb.export.saved_model import (
    ExportVerificationError,
    VersionExistsError,
    export_saved_model,
    next_version,
)
from keras_sentemb.export.standalone import run_standalone
from keras_sentemb.models import SentenceEncoder
from tests.conftest import make_tiny_encoder
from tests.numeric import assert_close_vectors

DIM = 32
SENTS = [
    "a man is playing a guitar .",
    "the cat sits on the mat",
    "",
    "a woman plays the piano in the park and the dog runs on the mat",
    "résumé café naïve",
    "中文 hello",
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One export of a tiny encoder (mean + normalize), shared by the module."""
    encoder = make_tiny_encoder(normalize=True)
    # encode() before export: the encoder's function caches must not get in
    # the way of tracking.
    encoder.encode(["warm up"])
    base = tmp_path_factory.mktemp("export") / "tiny"
    path = export_saved_model(encoder, base)
    loaded = tf.saved_model.load(path)
    return encoder, base, path, loaded


def _embed(loaded, sentences):
    batch = tf.constant(sentences, dtype=tf.string, shape=[len(sentences)])
    return loaded.signatures["serving_default"](sentences=batch)["embeddings"].numpy()


# ------------------------------------------------------------- contract
def test_layout_and_metadata(exported):
    _, base, path, _ = exported
    assert path == str(base / "1")
    assert sorted(os.listdir(base)) == ["1"]  # no temporary folders left
    for name in ("saved_model.pb", "variables", "assets.extra"):
        assert os.path.exists(os.path.join(path, name))
    meta = json.loads((base / "1" / sm.METADATA_FILE).read_text())
    assert meta["version"] == 1 and meta["output_dim"] == DIM
    assert meta["verification"]["max_rel_diff"] <= 1e-4
    assert meta["verification"]["min_cosine"] >= 0.99999
    assert meta["required_custom_ops"] == [
        "CaseFoldUTF8", "FastWordpieceTokenizeWithOffsets", "NormalizeUTF8",
        "RegexSplitWithOffsets",
    ]


def test_weights_are_saved_once(exported):
    encoder, _, path, _ = exported
    reader = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
    saved = sum(
        int(np.prod(shape)) for name, shape in reader.get_variable_to_shape_map().items()
        if name != "_CHECKPOINTABLE_OBJECT_GRAPH"
    )
    # Every weight the graph uses, once (BERT's unused pooler is left out).
    assert saved <= encoder.backbone.count_params()
    assert saved > 0.9 * encoder.backbone.count_params()


def test_signature_contract(exported):
    _, _, _, loaded = exported
    assert set(loaded.signatures) == {"serving_default", "token_embeddings"}
    sig = loaded.signatures["serving_default"]
    args, kwargs = sig.structured_input_signature
    assert args == () and list(kwargs) == ["sentences"]
    assert kwargs["sentences"].dtype == tf.string
    assert kwargs["sentences"].shape.as_list() == [None]
    outputs = sig.structured_outputs
    assert list(outputs) == ["embeddings"]
    assert outputs["embeddings"].dtype == tf.float32
    assert outputs["embeddings"].shape.as_list() == [None, DIM]


@pytest.mark.parametrize("signature", ["serving_default", "token_embeddings"])
@pytest.mark.parametrize("batch", [[["a man", "b"], ["c", "d"]], [["a"], ["b"]], "a man"],
                         ids=["2x2", "2x1", "scalar"])
def test_only_a_1d_batch_is_accepted(exported, signature, batch):
    """Servers feed tensors without checking the declared [None]: the graph checks."""
    _, _, _, loaded = exported
    with pytest.raises(tf.errors.InvalidArgumentError, match="must be a 1-D tf.string tensor"):
        loaded.signatures[signature](sentences=tf.constant(batch))


def test_matches_encode(exported):
    encoder, _, _, loaded = exported
    assert_close_vectors(_embed(loaded, SENTS), encoder.encode(SENTS, precision="float32"), rtol=1e-5)


def test_large_batches_are_chunked_by_length(exported):
    # 150 > chunk_size (16): the sorted, chunked path; order must be kept.
    encoder, _, _, loaded = exported
    rng = np.random.default_rng(0)
    words = ["man", "woman", "guitar", "piano", "cat", "dog", "park", "x"]
    sentences = [
        " ".join(rng.choice(words, size=rng.integers(0, 40))) for _ in range(150)
    ]
    out = _embed(loaded, sentences)
    assert_close_vectors(out, encoder.encode(sentences, precision="float32"), rtol=1e-5)
    assert_close_vectors(out[::-1], _embed(loaded, sentences[::-1]), rtol=1e-5)


@pytest.mark.parametrize(
    "sentences",
    [
        [],
        [""],
        ["   \t\n  "],
        ["x" * 100_000],
        ["guitar " * 15_000, "a"],
        ["😀👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️", "🤖"],
        ["我喜欢在公园里散步。", "Москва — столица", "القاهرة", "नई दिल्ली", "서울"],
        [b"bad \xff\xfe bytes \xe2\x82", b"\xc3\x28\x80", b"caf\xc3\xa9"],
    ],
    ids=["empty-batch", "empty-string", "whitespace", "100k-chars", "100k-words",
         "emoji", "scripts", "invalid-utf8"],
)
def test_input_robustness(exported, sentences):
    encoder, _, _, loaded = exported
    out = _embed(loaded, sentences)
    assert out.shape == (len(sentences), DIM) and out.dtype == np.float32
    assert np.isfinite(out).all()
    assert_close_vectors(out, encoder.encode(sentences, precision="float32"), rtol=1e-5)


def test_batch_of_1000(exported):
    _, _, _, loaded = exported
    sentences = [f"the man {'plays ' * (i % 50)}guitar {i}" for i in range(1000)]
    out = _embed(loaded, sentences)
    assert out.shape == (1000, DIM) and np.isfinite(out).all()
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_long_input_is_truncated_to_max_length(exported):
    _, _, _, loaded = exported
    # max_length 64 = [CLS] + 62 tokens + [SEP].
    out = _embed(loaded, ["guitar " * 15_000, "guitar " * 62, "guitar " * 61])
    assert_close_vectors(out[0], out[1], rtol=1e-5)
    assert np.abs(out[1] - out[2]).max() > 1e-4


def test_token_signature(exported):
    encoder, _, _, loaded = exported
    out = loaded.signatures["token_embeddings"](sentences=tf.constant(SENTS))
    assert set(out) == {"token_embeddings", "padding_mask", "token_ids"}
    states, mask, ids = (out[k].numpy() for k in ("token_embeddings", "padding_mask", "token_ids"))
    lengths = encoder.tokenize(tf.constant(SENTS)).row_lengths().numpy()
    assert states.shape == (len(SENTS), lengths.max() + 2, DIM)
    np.testing.assert_array_equal(mask.sum(axis=1), lengths + 2)
    assert (ids[:, 0] == encoder.start_token_id).all()
    # Masked mean + L2 normalisation of the tokens = the sentence embedding.
    mean = (states * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
    mean /= np.linalg.norm(mean, axis=1, keepdims=True)
    assert_close_vectors(mean, _embed(loaded, SENTS), rtol=1e-5)


# ------------------------------------------------------- layout/versions
def test_versions_and_overwrite(exported):
    encoder, base, _, _ = exported
    assert next_version(base) == 2
    fast = dict(verify=False, token_signature=False, chunk_size=None)
    assert export_saved_model(encoder, base, **fast) == str(base / "2")
    with pytest.raises(VersionExistsError, match="already exists"):
        export_saved_model(encoder, base, version=2)
    with pytest.raises(ValueError):  # the CLI reports ValueErrors in one line
        export_saved_model(encoder, base, version=1)
    stamp = base / "2" / "stamp"
    stamp.write_text("old")
    assert export_saved_model(encoder, base, version=2, overwrite=True, **fast) == str(
        base / "2"
    )
    assert not stamp.exists()
    assert sorted(os.listdir(base)) == ["1", "2"]
    shutil.rmtree(base / "2")


def test_next_version(tmp_path):
    assert next_version(tmp_path / "missing") == 1
    for name in ("1", "3", "abc", ".tmp-export-9-1-x", "０"):
        (tmp_path / name).mkdir()
    (tmp_path / "12").write_text("a file, not a version")
    assert next_version(tmp_path) == 4


def test_verification_failure_leaves_nothing(tmp_path, monkeypatch):
    encoder = make_tiny_encoder()
    original = encoder.encode
    monkeypatch.setattr(encoder, "encode", lambda *a, **k: original(*a, **k) + 1e-3)
    with pytest.raises(ExportVerificationError, match="differs from encode"):
        export_saved_model(
            encoder, tmp_path / "new" / "model", token_signature=False, chunk_size=None
        )
    # Neither the version folder, nor the temporary one, nor the base folder
    # that the export created is left behind.
    assert not (tmp_path / "new" / "model").exists()
    assert os.listdir(tmp_path / "new") == []


def test_invalid_arguments(tmp_path, tiny_encoder):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        export_saved_model(tiny_encoder, tmp_path / "file")
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"")
    with pytest.raises(ValueError, match="itself a SavedModel"):
        export_saved_model(tiny_encoder, tmp_path / "sm")
    for kwargs, match in (
        ({"version": 0}, "version"),
        ({"version": "2"}, "version"),
        ({"version": True}, "version"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"tolerance": -1.0}, "tolerance"),
        ({"tolerance": 0}, "tolerance"),
        ({"tolerance": "1e-4"}, "tolerance"),
    ):
        with pytest.raises(ValueError, match=match):
            export_saved_model(tiny_encoder, tmp_path / "m", **kwargs)
    with pytest.raises(TypeError, match="SentenceEncoder"):
        export_saved_model(object(), tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_export_logs_no_tensorflow_info(tmp_path, tiny_encoder, caplog):
    # A program that logs at INFO (the recipes, the README's main job among
    # them) got TensorFlow's "Assets written to: .../.tmp-export-.../assets"
    # from every export, twice.
    tf_logger = logging.getLogger("tensorflow")
    level = tf_logger.level
    caplog.set_level(logging.INFO)
    export_saved_model(tiny_encoder, tmp_path / "m", verify=False)
    tensorflow_info = [r.getMessage() for r in caplog.records
                       if r.name == "tensorflow" and r.levelno < logging.WARNING]
    assert not tensorflow_info, tensorflow_info
    assert tf_logger.level == level  # restored


def test_accepts_a_trainer_with_an_encoder(tiny_encoder):
    class Trainer:
        encoder = tiny_encoder

    assert sm._as_encoder(Trainer()) is tiny_encoder


# ------------------------------------------------ serving-side loading
def test_runs_without_keras_sentemb_keras_hub_or_keras(exported):
    # Strict mode: keras_sentemb, keras-hub *and* Keras are unimportable in the
    # child, and tensorflow-text's kernels are registered from their shared
    # libraries (`import tensorflow_text` would import Keras). The
    # `import tensorflow_text` route is exercised by test_saved_model_cli_run.
    _, _, path, loaded = exported
    sentences = SENTS + [b"bad \xff bytes"]
    out, report = run_standalone(path, sentences, strict=True, return_report=True)
    assert report["blocked_modules_imported"] == []
    assert report["signatures"] == ["serving_default", "token_embeddings"]
    assert report["inputs"] == ["sentences"] and report["outputs"] == ["embeddings"]
    assert_close_vectors(out, _embed(loaded, sentences), rtol=1e-5)


def _clean_env():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("PYTHONPATH", None)
    return env


def test_saved_model_cli_show(exported):
    _, _, path, _ = exported
    cli = shutil.which("saved_model_cli")
    command = [cli] if cli else [sys.executable, "-m", "tensorflow.python.tools.saved_model_cli"]
    proc = subprocess.run(
        command + ["show", "--dir", path, "--tag_set", "serve",
                   "--signature_def", "serving_default"],
        capture_output=True, text=True, env=_clean_env(), timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = proc.stdout
    assert "inputs['sentences']" in text and "DT_STRING" in text
    assert "outputs['embeddings']" in text and "DT_FLOAT" in text
    assert f"(-1, {DIM})" in text


def test_saved_model_cli_run(exported, tmp_path):
    _, _, path, loaded = exported
    proc = subprocess.run(
        [sys.executable, "-m", "keras_sentemb.export.saved_model_cli", "run",
         "--dir", path, "--tag_set", "serve", "--signature_def", "serving_default",
         "--input_exprs", 'sentences=["a","b"]', "--outdir", str(tmp_path)],
        capture_output=True, text=True, env=_clean_env(), cwd=tmp_path, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = np.load(tmp_path / "embeddings.npy")
    assert_close_vectors(out, _embed(loaded, ["a", "b"]), rtol=1e-5)


# ------------------------------------------------------------ the CLI
def test_cli_export(tmp_path, capsys):
    from keras_sentemb.cli import main

    encoder = make_tiny_encoder(pooling="cls", max_length=32)
    encoder.save(tmp_path / "model")
    base = tmp_path / "saved_models" / "tiny"
    assert main(["export", "--model", str(tmp_path / "model"), "--output", str(base),
                 "--version", "5"]) == 0
    assert capsys.readouterr().out.strip() == str(base / "5")
    loaded = tf.saved_model.load(str(base / "5"))
    assert_close_vectors(_embed(loaded, SENTS), encoder.encode(SENTS, precision="float32"), rtol=1e-5)
    # An existing version is a user mistake: one line on stderr, exit 2.
    assert main(["export", "--model", str(tmp_path / "model"), "--output", str(base),
                 "--version", "5"]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "Traceback" not in err


# ------------------------------------------------------- .keras saving
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"pooling": "cls", "normalize": True, "projection_dim": 8,
         "projection_activation": "tanh", "max_length": 16},
    ],
    ids=["mean", "cls-head-normalize"],
)
def test_keras_archive_safe_mode(tmp_path, kwargs):
    encoder = make_tiny_encoder(**kwargs)
    # Trainers keep SentenceEncoders too, some of them clones (CT's towers).
    models = [encoder.clone(name="kept")] if kwargs else [encoder]
    for i, model in enumerate(models):
        expected = model.encode(SENTS)
        model.save(tmp_path / f"enc{i}.keras")
        loaded = keras.saving.load_model(tmp_path / f"enc{i}.keras", safe_mode=True)
        assert isinstance(loaded, SentenceEncoder)
        assert (loaded.pooling, loaded.normalize, loaded.output_dim) == (
            model.pooling, model.normalize, model.output_dim)
        assert_close_vectors(loaded.encode(SENTS), expected, rtol=1e-5)
