"""SavedModels that compute in bfloat16 and int8: same contract, verified against `encode`.

Each precision's serving graph is loaded back (here and in a process without
Keras) and compared with `encode` in that precision; the signature stays
`sentences` tf.string `[None]` -> `embeddings` float32 `[None, dim]`.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb import cli
from keras_sentemb import compat
from keras_sentemb.export.saved_model import METADATA_FILE
from keras_sentemb.export.saved_model import export_saved_model
from keras_sentemb.export.saved_model import required_custom_ops
from keras_sentemb.export.standalone import run_standalone
from tests.conftest import make_tiny_encoder
from tests.numeric import cosines
from tests.numeric import relative_errors

SENTENCES = ["a man is playing a guitar .", "the cat sits on the mat", "",
             "a woman plays the piano in the park and the dog runs on the mat", "中文 hello"]


def _embed(path, sentences):
    loaded = tf.saved_model.load(path)
    batch = tf.constant(sentences, tf.string, shape=[len(sentences)])
    return loaded.signatures["serving_default"](sentences=batch)["embeddings"].numpy()


def _op_types(path):
    proto = compat.saved_model_proto(path)
    graph = proto.meta_graphs[0].graph_def
    ops = {node.op for node in graph.node}
    for function in graph.library.function:
        ops.update(node.op for node in function.node_def)
    return ops


@pytest.fixture(scope="module")
def encoder():
    return make_tiny_encoder(normalize=True)


@pytest.mark.parametrize("precision", ["bfloat16", "int8"])
def test_each_precision_serves_what_encode_computes(encoder, precision, tmp_path):
    path = export_saved_model(encoder, tmp_path / "tiny", precision=precision,
                              check_standalone=True)
    meta = json.loads((tmp_path / "tiny" / "1" / METADATA_FILE).read_text())
    assert meta["precision"] == precision
    assert meta["verification"]["float32_min_cosine"] > 0.99
    served = _embed(path, SENTENCES)
    assert served.dtype == np.float32 and served.shape == (len(SENTENCES), 32)
    reference = encoder.precision_twin(precision).encode(
        SENTENCES, precision="int8" if precision == "int8" else "float32")
    assert relative_errors(served, reference).max() < (1e-3 if precision == "int8" else 5e-2)
    assert cosines(served, encoder.encode(SENTENCES, precision="float32")).min() > 0.99
    # In a TensorFlow process without Keras or keras_sentemb.
    outside = run_standalone(path, [s.encode() for s in SENTENCES], strict=True)
    assert relative_errors(outside, served).max() < 1e-5


def test_the_int8_graph_multiplies_in_int8(encoder, tmp_path):
    path = export_saved_model(encoder, tmp_path / "tiny", precision="int8")
    ops = _op_types(path)
    assert compat.QUANTIZED_MATMUL_OP in ops and "QuantizeV2" in ops
    # A core TensorFlow op, though `tf.raw_ops` does not list it.
    assert compat.QUANTIZED_MATMUL_OP not in required_custom_ops(path)
    float_path = export_saved_model(encoder, tmp_path / "float", precision="float32")
    assert compat.QUANTIZED_MATMUL_OP not in _op_types(float_path)


def test_int8_export_calibrates_on_the_sentences_given(tmp_path):
    encoder = make_tiny_encoder()
    export_saved_model(encoder, tmp_path / "a", precision="int8",
                       calibration=["hello world", "the cat sits"])
    assert encoder.int8_calibration == ("hello world", "the cat sits")
    with pytest.raises(ValueError, match="precision='int8'"):
        export_saved_model(encoder, tmp_path / "b", calibration=["hello"])
    with pytest.raises(ValueError, match="precision"):
        export_saved_model(encoder, tmp_path / "c", precision="float16")
    assert not os.path.exists(tmp_path / "b") and not os.path.exists(tmp_path / "c")


def test_cli_export_precision(tmp_path, capsys):
    model = tmp_path / "tiny"
    make_tiny_encoder().save(model)
    calibration = tmp_path / "calibration.txt"
    calibration.write_text("hello world\n\nthe dog runs in the park\n", encoding="utf-8")
    assert cli.main(["export", "--model", str(model), "--output", str(tmp_path / "sm"),
                     "--precision", "int8", "--calibration", str(calibration)]) == 0
    path = capsys.readouterr().out.strip()
    meta = json.loads((tmp_path / "sm" / "1" / METADATA_FILE).read_text())
    assert path.endswith("1") and meta["precision"] == "int8"
    assert meta["int8"]["calibration_sentences"] == 2
    for flags, message in [
        (["--calibration", str(calibration)], "--calibration applies to --precision int8"),
        (["--precision", "int8", "--format", "litert", "--output", str(tmp_path / "m.tflite")],
         "--precision applies to --format saved-model"),
        (["--precision", "bfloat16", "--format", "transformers"],
         "--precision applies to --format saved-model"),
    ]:
        argv = ["export", "--model", str(model), "--output", str(tmp_path / "other")] + flags
        assert cli.main(argv) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "other").exists()


def test_default_model_int8_saved_model(default_encoder, tmp_path):
    path = export_saved_model(default_encoder, tmp_path / "minilm", precision="int8")
    meta = json.loads((tmp_path / "minilm" / "1" / METADATA_FILE).read_text())
    assert meta["verification"]["max_rel_diff"] < 1e-3
    served = _embed(path, SENTENCES)
    float32 = default_encoder.encode(SENTENCES, precision="float32")
    assert cosines(served, float32).min() > 0.95
