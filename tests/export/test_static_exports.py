"""Every static export loads in its consumer and reproduces `encode`."""

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import tensorflow as tf

import keras_sentemb
from keras_sentemb.export.litert_check import INPUT_NAMES
from keras_sentemb.export.litert_check import run_litert
from keras_sentemb.export.litert_metadata import read_metadata
from keras_sentemb.export.static_serving import pack_probe_ids
from tests.conftest import REPO
from tests.static_fixtures import TINY_SENTENCES
from tests.static_fixtures import consumer_vectors
from tests.static_fixtures import cosines
from tests.static_fixtures import tiny_static


@pytest.fixture(scope="module")
def static():
    return tiny_static(dims=8)[0]


@pytest.mark.parametrize("fmt", ["sentence-transformers", "model2vec"])
def test_the_folder_loads_in_its_consumer_with_the_same_vectors(static, tmp_path, fmt):
    report = keras_sentemb.export_static(static, tmp_path / "out", format=fmt)
    assert report["min_cosine"] > 0.9999
    vectors = consumer_vectors(fmt, tmp_path / "out", TINY_SENTENCES)
    assert cosines(vectors, static.encode(TINY_SENTENCES)).min() >= 0.9999


def test_the_saved_model_takes_strings(static, tmp_path):
    report = keras_sentemb.export_static(static, tmp_path / "served", format="saved-model")
    assert report["path"].endswith(os.sep + "1")
    serve = tf.saved_model.load(report["path"]).signatures["serving_default"]
    got = serve(sentences=tf.constant(TINY_SENTENCES))["embeddings"].numpy()
    assert got.shape == (len(TINY_SENTENCES), 8)
    assert cosines(got, static.encode(TINY_SENTENCES)).min() >= 0.9999


@pytest.mark.parametrize("quantize,floor", [("float32", 0.9999), ("int8", 0.999)])
def test_the_litert_file_keeps_the_transformers_contract(static, tmp_path, quantize, floor):
    path = tmp_path / "static.tflite"
    report = keras_sentemb.export_static(static, path, format="litert", quantize=quantize,
                                         max_length=16)
    assert report["mediapipe_tokenizer"] and path.is_file()
    content = path.read_bytes()
    ids, mask = pack_probe_ids(static, TINY_SENTENCES, 16)
    got = run_litert(content, ids, mask)
    assert got.shape == (len(TINY_SENTENCES), 8)
    assert cosines(got, static.encode(TINY_SENTENCES, max_length=14)).min() >= floor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tf.lite.Interpreter's notice that ai_edge_litert exists
        interpreter = tf.lite.Interpreter(model_content=content)
    runner = interpreter.get_signature_runner("serving_default")
    inputs = {k: (tuple(v["shape"]), np.dtype(v["dtype"]).name)
              for k, v in runner.get_input_details().items()}
    assert inputs == {name: ((1, 16), "int32") for name in INPUT_NAMES}
    outputs = runner.get_output_details()
    assert list(outputs) == ["embedding"] and tuple(outputs["embedding"]["shape"]) == (1, 8)
    meta = read_metadata(content)
    assert meta["tokenizer"]["type"] == "BertTokenizerOptions"
    assert meta["outputs"] == ["embedding"] and "vocab.txt" in meta["files"]


def test_a_failed_verification_leaves_nothing(static, tmp_path, monkeypatch):
    from keras_sentemb.export.parity import ExportVerificationError
    from keras_sentemb.models.static_encoder import StaticEncoder

    table = static.folded_table()
    monkeypatch.setattr(StaticEncoder, "folded_table", lambda self: table[:, ::-1].copy())
    for fmt in ("model2vec", "sentence-transformers"):
        with pytest.raises(ExportVerificationError):
            keras_sentemb.export_static(static, tmp_path / "out", format=fmt)
    assert os.listdir(tmp_path) == []


def test_the_command_line_encodes_a_static_folder_without_tensorflow(static, tmp_path):
    static.save(tmp_path / "static")
    (tmp_path / "in.txt").write_text("\n".join(TINY_SENTENCES) + "\n", encoding="utf-8")
    code = ("import sys; from keras_sentemb.cli.program import main; "
            f"code = main(['encode', '--model', {str(tmp_path / 'static')!r}, '--input', "
            f"{str(tmp_path / 'in.txt')!r}, '--output', {str(tmp_path / 'out.npy')!r}]); "
            "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules; "
            "sys.exit(code)")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    vectors = np.load(tmp_path / "out.npy")
    np.testing.assert_allclose(vectors, static.encode(TINY_SENTENCES), atol=1e-6)


def test_the_command_line_exports_a_static_folder(static, tmp_path):
    from keras_sentemb.cli import main

    static.save(tmp_path / "static")
    assert main(["export", "--model", str(tmp_path / "static"), "--format", "model2vec",
                 "--output", str(tmp_path / "m2v")]) == 0
    assert (tmp_path / "m2v" / "config.json").is_file()
    assert main(["export", "--model", str(tmp_path / "static"), "--format", "litert",
                 "--precision", "int8", "--output", str(tmp_path / "x.tflite")]) == 2


def test_mediapipe_text_embedder_embeds_raw_text_with_the_static_file(static, tmp_path):
    runtime = REPO / "tests" / "export" / "litert_runtime.py"
    check = subprocess.run([sys.executable, str(runtime), "check"], capture_output=True,
                           text=True, timeout=300)
    if check.returncode != 0 or not all(json.loads(check.stdout).values()):
        pytest.skip("the LiteRT test extra (ai-edge-litert, mediapipe) is not installed")
    path = tmp_path / "static.tflite"
    keras_sentemb.export_static(static, path, format="litert", quantize="int8", max_length=16)
    (tmp_path / "request.json").write_text(json.dumps(TINY_SENTENCES), encoding="utf-8")
    result = subprocess.run([sys.executable, str(runtime), "mediapipe", str(path),
                             str(tmp_path / "request.json"), str(tmp_path / "out.npy")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    got = np.load(tmp_path / "out.npy")
    assert cosines(got, static.encode(TINY_SENTENCES, max_length=14)).min() >= 0.999
