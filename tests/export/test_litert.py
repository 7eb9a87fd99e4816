"""export_litert: builtin-ops LiteRT files, their metadata, quantization, the gate, refusals, CLI.

Tiny random encoders throughout; the stand-alone runtimes (`ai_edge_litert`,
MediaPipe's TextEmbedder) run in their own process (tests/export/litert_runtime.py)
and are skipped where the test extra is not installed.
"""

import json
import os

import numpy as np
import pytest

from keras_sentemb import cli
from keras_sentemb.export import litert
from keras_sentemb.export import litert_check as check
from keras_sentemb.export.huggingface import NotExportableError
from keras_sentemb.export.litert import export_litert
from keras_sentemb.export.litert_metadata import read_metadata
from keras_sentemb.export.parity import ExportVerificationError
from tests.conftest import TINY_VOCAB
from tests.conftest import make_tiny_encoder
from tests.export.hf_helpers import make_tiny_roberta
from tests.helpers.corpora import CORPUS
from tests.helpers.litert_runtimes import run_runtime
from tests.helpers.litert_runtimes import runtimes
from tests.helpers.models import make_whitening

LENGTH = 16
ASCII = ["a man is playing the guitar .", "the cat sits on the mat", "hello world !",
         "a dog runs in the park , and a woman plays the piano ."]


def _cosines(a, b):
    return np.sum(a * b, 1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)


@pytest.fixture(scope="module")
def encoder():
    return make_tiny_encoder(pooling="mean", normalize=True)


@pytest.fixture(scope="module")
def exported(encoder, tmp_path_factory):
    """float32, float16 and int8 files of one encoder: `{mode: (path, report)}`."""
    folder = tmp_path_factory.mktemp("litert")
    return {mode: (folder / f"{mode}.tflite",
                   export_litert(encoder, folder / f"{mode}.tflite", quantize=mode, max_length=LENGTH))
            for mode in litert.QUANTIZE_MODES}


# ------------------------------------------------------------- the file
def test_file_has_the_contract_and_builtin_ops_only(exported, encoder):
    path, report = exported["float32"]
    data = path.read_bytes()
    assert report["path"] == str(path) and report["size_bytes"] == len(data)
    assert sorted(os.listdir(path.parent)) == sorted(f"{m}.tflite" for m in litert.QUANTIZE_MODES)
    builtins, custom = check.operator_codes(data)
    assert custom == [] and builtins and check.CUSTOM_OPERATOR not in builtins
    interpreter = check._interpreter(data)
    assert list(interpreter.get_signature_list()) == ["serving_default"]
    runner = interpreter.get_signature_runner("serving_default")
    assert {k: (tuple(v["shape"]), v["dtype"]) for k, v in runner.get_input_details().items()} == {
        name: ((1, LENGTH), np.int32) for name in check.INPUT_NAMES}
    assert {k: (tuple(v["shape"]), v["dtype"]) for k, v in runner.get_output_details().items()} == {
        "embedding": ((1, encoder.output_dim), np.float32)}
    assert report["min_cosine"] >= 0.99999 and report["max_rel_diff"] <= 1e-4


def test_file_embeds_like_encode_including_truncation(exported, encoder):
    path, _ = exported["float32"]
    sentences = ASCII + ["the man " * 20]  # longer than L: truncated as encode(max_length=L)
    ids, mask = check.pack_ids(encoder, sentences, LENGTH)
    assert ids.shape == (len(sentences), LENGTH) and mask[-1].all()
    got = check.run_litert(path.read_bytes(), ids, mask)
    assert _cosines(got, encoder.encode(sentences, max_length=LENGTH, precision="float32")).min() >= 0.99999
    # Against the full-length encoding the long sentence differs: truncation is real.
    assert _cosines(got, encoder.encode(sentences, precision="float32"))[-1] < 0.9999


def test_metadata_carries_the_vocabulary_in_input_order(exported, encoder):
    data = exported["float32"][0].read_bytes()
    meta = read_metadata(data)
    names = check.subgraph_input_names(data)
    assert sorted(names) == sorted(check.INPUT_NAMES)
    assert meta["inputs"] == [{"input_word_ids": "ids", "input_mask": "mask",
                               "input_type_ids": "segment_ids"}[n] for n in names]
    assert meta["outputs"] == ["embedding"] and meta["min_parser_version"] == "1.1.0"
    assert meta["tokenizer"] == {"type": "BertTokenizerOptions",
                                 "vocab_files": [{"name": "vocab.txt", "type": 5}]}
    assert meta["files"]["vocab.txt"].decode("utf-8").splitlines() == TINY_VOCAB


@pytest.mark.parametrize("mode,min_cosine", [("float16", 0.995), ("int8", 0.98)])
def test_quantized_files_are_smaller_and_close(exported, mode, min_cosine):
    from tensorflow.lite.python import schema_py_generated as schema

    path, report = exported[mode]
    assert report["min_cosine"] >= min_cosine and report["quantize"] == mode
    assert report["size_bytes"] < exported["float32"][1]["size_bytes"]
    root = schema.Model.GetRootAsModel(bytearray(path.read_bytes()), 0)
    subgraph = root.Subgraphs(0)
    types = {subgraph.Tensors(i).Type() for i in range(subgraph.TensorsLength())}
    want = schema.TensorType.FLOAT16 if mode == "float16" else schema.TensorType.INT8
    assert want in types  # the weights really are stored so
    assert read_metadata(path.read_bytes())["tokenizer"] is not None


def test_post_processing_and_truncate_dim_run_inside(tmp_path):
    encoder = make_tiny_encoder(pooling="cls", projection_dim=16, projection_activation="tanh")
    encoder.postprocess = make_whitening(encoder.encode(CORPUS, precision="float32"))
    report = export_litert(encoder, tmp_path / "w.tflite", max_length=LENGTH, truncate_dim=4)
    assert report["output_dim"] == 4 and report["max_rel_diff"] <= 1e-4
    ids, mask = check.pack_ids(encoder, ASCII, LENGTH)
    got = check.run_litert((tmp_path / "w.tflite").read_bytes(), ids, mask)
    want = encoder.encode(ASCII, max_length=LENGTH, truncate_dim=4, precision="float32")
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), np.linalg.norm(want, axis=1), rtol=1e-4)


# ------------------------------------------------------------ refusals
def test_sbert_wk_is_refused_naming_what_exports(tmp_path):
    encoder = make_tiny_encoder(pooling="sbert_wk:0:1")
    with pytest.raises(NotExportableError, match="sbert_wk.*mean.*Whitening") as e:
        export_litert(encoder, tmp_path / "m.tflite", max_length=LENGTH)
    assert "\n" not in str(e.value) and os.listdir(tmp_path) == []
    # The converter itself refuses ops outside the builtin set (the check above only says why first).
    with pytest.raises(NotExportableError, match="does not convert to LiteRT builtin ops"):
        litert.convert(encoder, LENGTH)


@pytest.mark.parametrize("kwargs,match", [
    ({"quantize": "int4"}, "`quantize` must be one of"),
    ({"max_length": 65}, r"`max_length` must be an int in \[3, 64\]"),
    ({"max_length": 2}, "`max_length`"),
    ({"truncate_dim": 33}, "`truncate_dim` must be an int in"),
    ({"tolerance": 0}, "`tolerance` must be a positive number"),
])
def test_bad_arguments_are_refused_before_converting(kwargs, match, tmp_path, monkeypatch):
    monkeypatch.setattr(litert, "convert", lambda *a, **k: pytest.fail("converted"))
    with pytest.raises(ValueError, match=match):
        export_litert(make_tiny_encoder(), tmp_path / "m.tflite", **kwargs)
    assert os.listdir(tmp_path) == []


def test_existing_file_and_folder_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(litert, "convert", lambda *a, **k: pytest.fail("converted"))
    (tmp_path / "m.tflite").write_bytes(b"old")
    with pytest.raises(FileExistsError, match="overwrite"):
        export_litert(make_tiny_encoder(), tmp_path / "m.tflite")
    with pytest.raises(ValueError, match="is a folder"):
        export_litert(make_tiny_encoder(), tmp_path)
    assert (tmp_path / "m.tflite").read_bytes() == b"old"


def test_failed_gate_leaves_the_old_file_and_nothing_else(encoder, tmp_path, monkeypatch):
    (tmp_path / "m.tflite").write_bytes(b"old")
    real = check.run_litert
    monkeypatch.setattr(check, "run_litert", lambda *a: real(*a)[:, ::-1])  # a wrong graph
    with pytest.raises(ExportVerificationError, match="relative error"):
        export_litert(encoder, tmp_path / "m.tflite", max_length=LENGTH, overwrite=True)
    assert os.listdir(tmp_path) == ["m.tflite"] and (tmp_path / "m.tflite").read_bytes() == b"old"


def test_models_mediapipe_cannot_tokenize_get_ids_in_files_and_a_notice(tmp_path, capsys):
    assert "WordPiece" in litert.mediapipe_tokenizer_problem(make_tiny_roberta())
    encoder = make_tiny_encoder(text_normalization="bert_cased")
    report = export_litert(encoder, tmp_path / "c.tflite", max_length=LENGTH)
    assert not report["mediapipe_tokenizer"] and report["max_rel_diff"] <= 1e-4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "MediaPipe's built-in tokenizer does not apply" in err[0]
    assert "cased" in err[0]
    meta = read_metadata((tmp_path / "c.tflite").read_bytes())
    assert meta["tokenizer"] is None and meta["files"] == {}


# ----------------------------------------------------------------- CLI
def test_cli_writes_exactly_the_file(tmp_path, capsys):
    folder = tmp_path / "tiny"
    make_tiny_encoder(normalize=True, pooling="mean").save(folder)
    out = tmp_path / "out" / "m.tflite"
    out.parent.mkdir()
    assert cli.main(["export", "--model", str(folder), "--format", "litert", "--output", str(out),
                     "--quantize", "int8", "--max-length", "12", "--tolerance", "0.3"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert os.listdir(out.parent) == ["m.tflite"]
    runner = check._interpreter(out.read_bytes()).get_signature_runner("serving_default")
    assert tuple(runner.get_input_details()["input_word_ids"]["shape"]) == (1, 12)
    # Again without --overwrite: a one-line refusal, the file kept.
    assert cli.main(["export", "--model", str(folder), "--format", "litert",
                     "--output", str(out)]) == cli.EXIT_USER_ERROR
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize("argv,match", [
    (["--format", "saved-model", "--quantize", "int8"], "--quantize applies to --format litert"),
    (["--format", "litert", "--dtype", "float16"], "use --quantize for litert"),
    (["--format", "litert", "--version", "2"], "--version applies to --format saved-model"),
])
def test_cli_refuses_flags_of_other_formats(argv, match, capsys):
    assert cli.main(["export", "--model", "m", "--output", "o.tflite"] + argv) == cli.EXIT_USER_ERROR
    assert match in capsys.readouterr().err


# ------------------------------------------------- stand-alone runtimes
def test_litert_runtime_and_mediapipe_match_encode(exported, encoder, tmp_path):
    available = runtimes()
    if not all(available.values()):
        pytest.skip("the LiteRT test extra (ai-edge-litert, mediapipe) is not installed")
    ids, mask = check.pack_ids(encoder, ASCII, LENGTH)
    ref = encoder.encode(ASCII, max_length=LENGTH, precision="float32")
    for mode, min_cosine in (("float32", 0.9999), ("int8", 0.98)):
        path = exported[mode][0]
        _, got = run_runtime("litert", path, {"ids": ids.tolist(), "mask": mask.tolist()}, tmp_path)
        assert _cosines(got, ref).min() >= min_cosine, mode
        stdout, got = run_runtime("mediapipe", path, ASCII, tmp_path)
        assert _cosines(got, ref).min() >= min_cosine, mode
        meta = json.loads(stdout.strip().splitlines()[0])
        assert meta["process_units"] == [4] and meta["vocab_files"] == meta["zip"] == ["vocab.txt"]
        assert sorted(meta["inputs"]) == ["ids", "mask", "segment_ids"]


def _check_in_runtimes(path, encoder, length, min_cosine, tmp_path):
    """`path` embeds ASCII sentences like `encode()` in ai_edge_litert and in MediaPipe."""
    available = runtimes()
    if not all(available.values()):
        pytest.skip("the LiteRT test extra (ai-edge-litert, mediapipe) is not installed")
    ids, mask = check.pack_ids(encoder, ASCII, length)
    ref = encoder.encode(ASCII, max_length=length, precision="float32")
    _, got = run_runtime("litert", path, {"ids": ids.tolist(), "mask": mask.tolist()}, tmp_path)
    assert _cosines(got, ref).min() >= min_cosine
    _, got = run_runtime("mediapipe", path, ASCII, tmp_path)
    assert _cosines(got, ref).min() >= min_cosine


def test_a_ct_trained_model_runs_in_both_runtimes(tmp_path):
    import keras_sentemb
    from keras_sentemb.models import SentenceEncoder

    keras_sentemb.fit_ct(CORPUS, model=make_tiny_encoder(pooling="mean"), steps=3, batch_size=8,
                         max_length=16, dev=None, verbose=0, output=str(tmp_path / "ct"))
    trained = SentenceEncoder.from_preset(str(tmp_path / "ct"))  # as a user loads it
    report = export_litert(trained, tmp_path / "ct.tflite", max_length=LENGTH)
    assert report["mediapipe_tokenizer"]
    _check_in_runtimes(tmp_path / "ct.tflite", trained, LENGTH, 0.9999, tmp_path)


# Every STS-B test sentence is at most 46 tokens with the default model's vocabulary, so a
# file of length 48 embeds each one whole: its vectors are the default-length file's.
STSB_LENGTH = 48


@pytest.fixture(scope="module")
def default_files(default_encoder, tmp_path_factory):
    """float32 and int8 files of the default model at `STSB_LENGTH`: `{mode: (path, report)}`."""
    folder = tmp_path_factory.mktemp("minilm")
    return {mode: (folder / f"{mode}.tflite", export_litert(
        default_encoder, folder / f"{mode}.tflite", quantize=mode, max_length=STSB_LENGTH))
        for mode in ("float32", "int8")}


def test_default_model_float32_parity(default_files, default_encoder, tmp_path):
    path, report = default_files["float32"]
    assert report["mediapipe_tokenizer"] and report["min_cosine"] >= 0.9999
    assert report["output_dim"] == default_encoder.output_dim
    _check_in_runtimes(path, default_encoder, STSB_LENGTH, 0.9999, tmp_path)


def test_default_model_scores_sts_b_test_through_mediapipe_like_encode(
        default_files, default_encoder, tmp_path):
    """MediaPipe's TextEmbedder, tokenizing by itself, on all of STS-B test: the Spearman
    correlation of its cosines with the gold scores is within 0.2 (float32) and 1.0 (int8)
    points of `encode()`'s, and float32's vectors are `encode()`'s (cosine >= 0.9999) on every
    ASCII sentence. (MediaPipe lowercases ASCII only and keeps accents, so a few sentences such
    as "résumé" tokenize differently; they count in the Spearman correlation.)"""
    from scipy.stats import spearmanr

    from keras_sentemb.data.resources import bundled_sts_dir
    from keras_sentemb.evaluation.readers import read_stsb

    if not all(runtimes().values()):
        pytest.skip("the LiteRT test extra (ai-edge-litert, mediapipe) is not installed")
    pairs = read_stsb(bundled_sts_dir(), split="test")
    sentences = list(dict.fromkeys(s for a, b, _ in pairs for s in (a, b)))
    _, mask = check.pack_ids(default_encoder, sentences, 256)
    assert np.asarray(mask).sum(1).max() <= STSB_LENGTH  # nothing is cut at this length
    ascii_rows = [i for i, s in enumerate(sentences) if s.isascii()]
    assert len(ascii_rows) > 2500
    row = {s: i for i, s in enumerate(sentences)}
    first = [row[a] for a, _, _ in pairs]
    second = [row[b] for _, b, _ in pairs]

    def spearman(vectors):
        return 100 * spearmanr(_cosines(vectors[first], vectors[second]),
                               [score for _, _, score in pairs]).correlation

    reference = default_encoder.encode(sentences, max_length=STSB_LENGTH, precision="float32")
    expected = spearman(reference)
    assert expected > 75  # all-MiniLM-L6-v2 scores about 82 here
    for mode, bound in (("float32", 0.2), ("int8", 1.0)):
        _, got = run_runtime("mediapipe", default_files[mode][0], sentences, tmp_path)
        assert got.shape == reference.shape
        if mode == "float32":
            assert _cosines(got, reference)[ascii_rows].min() >= 0.9999
        assert abs(spearman(got) - expected) <= bound, (mode, spearman(got), expected)


def test_a_full_disk_while_converting_names_the_file_and_leaves_nothing(tmp_path, monkeypatch):
    import errno

    def full(*args, **kwargs):
        raise RuntimeError("RESOURCE_EXHAUSTED: /tmp/x/saved_model.pb; No space left on device")

    monkeypatch.setattr(litert, "convert", full)
    with pytest.raises(OSError) as info:
        litert.export_litert(make_tiny_encoder(), tmp_path / "m.tflite")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(tmp_path / "m.tflite")
    assert not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match=r"Cannot write /proc/m.tflite: creating a file in /proc"):
        litert.export_litert(make_tiny_encoder(), "/proc/m.tflite")
