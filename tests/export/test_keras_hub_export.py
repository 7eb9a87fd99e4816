"""Export to a keras-hub `TextEmbedder` preset folder (`export --format keras-hub`, `to_text_embedder`).

The folder must load with `keras_hub.models.TextEmbedder.from_preset` in a
process that never imports keras_sentemb and reproduce `encode()` in float32;
what a `TextEmbedder` cannot carry is refused before anything is written.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import keras_sentemb

from keras_sentemb.export.huggingface import NotExportableError
from keras_sentemb.export.keras_hub_preset import cleans_alike
from keras_sentemb.export.keras_hub_preset import export_keras_hub
from keras_sentemb.export.parity import ExportVerificationError
from keras_sentemb.export.parity import relative_errors
from tests.conftest import SHARED
from tests.conftest import make_tiny_encoder
from tests.helpers.keras_hub_starts import make_xlm_roberta_text_embedder
from tests.helpers.models import make_tiny_roberta

SENTENCES = ["a man is playing a guitar .", "the cat sits on the mat", "hello world !", ""]
PRESET_FILES = {"assets", "config.json", "metadata.json", "model.weights.h5", "preprocessor.json",
                "task.json", "tokenizer.json"}

# Runs in a fresh interpreter: keras-hub alone loads the folder and encodes the sentences.
KERAS_HUB_ONLY = """
import json, sys
import numpy as np
import keras_hub
folder, sentences_file, out = sys.argv[1:4]
sentences = json.load(open(sentences_file, encoding="utf-8"))
embedder = keras_hub.models.TextEmbedder.from_preset(folder)
# Padding changes no vector; a shorter width than the preset's 256 only saves time.
width = min(128, embedder.preprocessor.sequence_length)
lengths = [len(ids) + 2 for ids in embedder.preprocessor.tokenizer(sentences)]
assert max(lengths) <= width, max(lengths)
embedder.preprocessor.sequence_length = width
np.save(out, np.asarray(embedder.encode_text(sentences, batch_size=64, verbose=0), np.float32))
print(json.dumps({"class": type(embedder).__name__, "pooling": embedder.pooling_mode,
                  "normalize": embedder.normalize,
                  "keras_sentemb_imported": any(m.startswith("keras_sentemb") for m in sys.modules)}))
"""


def _load_with_keras_hub_only(folder, sentences, tmp_path):
    """`(vectors, info)` from `TextEmbedder.from_preset(folder)` in an interpreter without keras_sentemb."""
    (tmp_path / "sentences.json").write_text(json.dumps(sentences), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "-c", KERAS_HUB_ONLY, str(folder), str(tmp_path / "sentences.json"),
         str(tmp_path / "vectors.npy")],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return np.load(tmp_path / "vectors.npy"), json.loads(result.stdout.strip().splitlines()[-1])


def test_a_tiny_bert_folder_loads_with_keras_hub_alone_and_encodes_as_encode(tmp_path):
    encoder = make_tiny_encoder(pooling="cls", normalize=True, max_length=48)
    assert export_keras_hub(encoder, tmp_path / "kh") == str(tmp_path / "kh")
    assert set(os.listdir(tmp_path / "kh")) == PRESET_FILES
    task = json.loads((tmp_path / "kh" / "task.json").read_text())
    assert task["registered_name"] == "keras_hub>BertTextEmbedder"
    assert task["config"]["pooling_mode"] == "cls" and task["config"]["normalize"] is True
    assert task["config"]["preprocessor"]["config"]["sequence_length"] == 48
    vectors, info = _load_with_keras_hub_only(tmp_path / "kh", SENTENCES, tmp_path)
    assert info == {"class": "BertTextEmbedder", "pooling": "cls", "normalize": True,
                    "keras_sentemb_imported": False}
    errors, cosines = relative_errors(vectors, encoder.encode(SENTENCES, precision="float32"))
    assert errors.max() < 1e-4 and cosines.min() > 0.99999


def test_to_text_embedder_returns_the_embedder_and_export_keras_hub_writes_the_folder(tmp_path):
    import keras_hub

    encoder = make_tiny_encoder(pooling="max", normalize=False)
    embedder = keras_sentemb.to_text_embedder(encoder)
    assert isinstance(embedder, keras_hub.models.BertTextEmbedder)
    assert (embedder.pooling_mode, embedder.normalize) == ("max", False)
    assert embedder.backbone is not encoder.backbone  # a copy: training one leaves the other
    errors, _ = relative_errors(embedder.encode_text(SENTENCES, verbose=0),
                                encoder.encode(SENTENCES, precision="float32"))
    assert errors.max() < 1e-4
    written = keras_sentemb.export_keras_hub(encoder, tmp_path / "kh", probe_sentences=SENTENCES)
    assert str(written) == str(tmp_path / "kh")


def test_an_xlm_roberta_encoder_exports_as_an_xlm_roberta_text_embedder_and_loads_back(tmp_path):
    import keras_hub

    from keras_sentemb.models import SentenceEncoder

    encoder = SentenceEncoder.from_preset(make_xlm_roberta_text_embedder(pooling_mode="mean"))
    export_keras_hub(encoder, tmp_path / "kh", probe_sentences=SENTENCES)
    embedder = keras_hub.models.TextEmbedder.from_preset(str(tmp_path / "kh"))
    assert isinstance(embedder, keras_hub.models.XLMRobertaTextEmbedder)
    back = SentenceEncoder.from_preset(tmp_path / "kh")
    assert (back.pooling, back.normalize, back.max_length) == ("mean", True, 32)
    errors, _ = relative_errors(back.encode(SENTENCES, precision="float32"),
                                encoder.encode(SENTENCES, precision="float32"))
    assert errors.max() < 1e-4


# ------------------------------------------------------------ refusals
def _refusals():
    from keras_sentemb.models.glow_flow import GlowFlow
    from tests.helpers.models import make_whitening

    whitened = make_tiny_encoder(pooling="mean")
    whitened.postprocess = make_whitening(np.random.default_rng(0).normal(size=(40, 32)))
    flowed = make_tiny_encoder(pooling="mean")
    flow = GlowFlow(32, levels=1, depth=1, coupling_width=8, pooling="mean", seed=0)
    flow.build()
    flowed.postprocess = flow
    return [
        (make_tiny_encoder(projection_dim=8), "no projection head.*--format sentence-transformers"),
        (whitened, "no Whitening.*--format sentence-transformers"),
        (flowed, "no GlowFlow.*--format saved-model"),
        (make_tiny_encoder(pooling="first_last"), "not 'first_last'.*--format saved-model"),
        (make_tiny_roberta(), "not for a RobertaBackbone.*--format sentence-transformers"),
    ]


def test_what_a_text_embedder_cannot_carry_is_refused_naming_the_format_that_can(tmp_path):
    for encoder, message in _refusals():
        with pytest.raises(NotExportableError, match=message) as caught:
            export_keras_hub(encoder, tmp_path / "kh")
        assert "\n" not in str(caught.value)
    assert not list(tmp_path.iterdir())


def test_the_gate_refuses_a_folder_that_computes_something_else(tmp_path, monkeypatch):
    from keras_sentemb.export import keras_hub_preset

    encoder = make_tiny_encoder(pooling="mean")
    real = keras_hub_preset.to_text_embedder

    def wrong_pooling(enc):
        embedder = real(enc)
        return type(embedder)(embedder.backbone, embedder.preprocessor, pooling_mode="cls")

    monkeypatch.setattr(keras_hub_preset, "to_text_embedder", wrong_pooling)
    with pytest.raises(ExportVerificationError, match="keras-hub TextEmbedder folder differs"):
        export_keras_hub(encoder, tmp_path / "new" / "kh")
    assert not (tmp_path / "new" / "kh").exists() and not list((tmp_path / "new").iterdir())


def test_text_that_the_two_cleanings_read_apart_is_recognised():
    assert cleans_alike("Résumé of a naïve café", "bert_uncased")
    assert cleans_alike("Москва — столица России.", "bert_uncased")
    assert not cleans_alike("Straße", "bert_uncased")  # NFKC case folding: "ss"
    assert not cleans_alike("서울", "bert_uncased")  # Hangul recomposed by keras-hub
    assert not cleans_alike("👨\u200d👩", "bert_cased")  # a format character Hugging Face deletes
    assert not cleans_alike("bad \ufffd byte", "bert_cased")
    assert cleans_alike("Straße \u200d", None)  # keras-hub's own cleaning on both sides


# ------------------------------------------------------------ keras_hub.upload_preset
def test_the_folder_passes_upload_presets_local_checks_and_a_broken_one_does_not(tmp_path):
    # upload_preset checks the folder (config.json parses, model.weights.h5 is there) before it
    # reads the URI; an unknown scheme then stops it with no network touched.
    import keras_hub

    export_keras_hub(make_tiny_encoder(), tmp_path / "kh")
    with pytest.raises(ValueError, match="Unknown URI"):
        keras_hub.upload_preset("local://nowhere", str(tmp_path / "kh"))
    (tmp_path / "kh" / "model.weights.h5").unlink()
    with pytest.raises(FileNotFoundError, match="weights file is missing"):
        keras_hub.upload_preset("local://nowhere", str(tmp_path / "kh"))
    (tmp_path / "kh" / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match="config.json"):
        keras_hub.upload_preset("local://nowhere", str(tmp_path / "kh"))


# ------------------------------------------------------------ command line
def test_cli_export_keras_hub_and_its_refusals(tmp_path, capsys):
    from keras_sentemb.cli import main

    make_tiny_encoder(pooling="mean", normalize=True).save(tmp_path / "model")
    model, out = str(tmp_path / "model"), str(tmp_path / "kh")
    assert main(["export", "--model", model, "--output", out, "--format", "keras-hub"]) == 0
    assert capsys.readouterr().out.strip() == out
    assert main(["encode", "--model", out, "--input", _lines(tmp_path), "--output",
                 str(tmp_path / "v.npy"), "--precision", "float32"]) == 0
    capsys.readouterr()
    import keras_hub

    embedder = keras_hub.models.TextEmbedder.from_preset(out)
    errors, _ = relative_errors(np.load(tmp_path / "v.npy"),
                                embedder.encode_text(SENTENCES, verbose=0))
    assert errors.max() < 1e-4
    for argv, message in (
        (["--overwrite", "--pooling", "first_last"], "not 'first_last'"),
        (["--overwrite", "--dtype", "float16"], "float32 weights"),
        (["--overwrite", "--truncate-dim", "8"], "--truncate-dim applies"),
    ):
        assert main(["export", "--model", model, "--output", out, "--format", "keras-hub",
                     *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def _lines(tmp_path):
    path = tmp_path / "sentences.txt"
    path.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    return str(path)


# ------------------------------------------------------------ the bundled model
def _stsb_dev_sentences(limit):
    sentences = []
    with open(SHARED / "data" / "STS" / "STSBenchmark" / "sts-dev.csv", encoding="utf-8") as f:
        for line in f:
            columns = line.rstrip("\n").split("\t")
            sentences += columns[5:7]
    return list(dict.fromkeys(sentences))[:limit]


def test_the_default_model_exports_and_keras_hub_alone_matches_encode(default_encoder, tmp_path):
    # keras-hub's BertBackbone computes the tanh GELU, all-MiniLM-L6-v2 the exact one: the
    # folder still matches encode() in float32 to a cosine of 0.99999 on STS-B sentences.
    sentences = _stsb_dev_sentences(400)
    export_keras_hub(default_encoder, tmp_path / "kh")
    vectors, info = _load_with_keras_hub_only(tmp_path / "kh", sentences, tmp_path)
    assert info == {"class": "BertTextEmbedder", "pooling": "mean", "normalize": True,
                    "keras_sentemb_imported": False}
    _, cosines = relative_errors(vectors, default_encoder.encode(sentences, precision="float32"))
    assert cosines.min() >= 0.99999, cosines.min()
