"""Broken model folders and unreachable presets give one line naming the problem."""

import os
import shutil

import pytest

from keras_sentemb import cli
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.models.loading import ModelLoadError
from keras_sentemb.models.presets import default_model_dir
from tests.conftest import make_tiny_encoder


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("broken") / "tiny"
    make_tiny_encoder().save(folder)
    return folder


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _hf_copy(tmp_path):
    """The default model's folder, big files linked, so one can be broken cheaply."""
    src = default_model_dir()
    dst = tmp_path / "hf"
    dst.mkdir()
    for entry in src.iterdir():
        target = dst / entry.name
        if entry.is_dir():
            shutil.copytree(entry, target)
        elif entry.stat().st_size > 1_000_000:
            os.symlink(entry, target)
        else:
            shutil.copy(entry, target)
    return dst


@pytest.mark.parametrize(
    "name, damage, message",
    [
        ("model.weights.h5", lambda p: p.write_bytes(p.read_bytes()[:2000]),
         "model.weights.h5 is truncated or not an HDF5 weights file"),
        ("model.weights.h5", lambda p: p.write_bytes(b""), "is truncated or not an HDF5"),
        ("sentemb_config.json", lambda p: p.write_text("{pooling: mean"),
         "sentemb_config.json is not valid JSON (line 1)"),
        ("tokenizer.json", lambda p: p.write_bytes(b""), "tokenizer.json is empty (expected JSON)"),
        ("config.json", lambda p: p.write_text("[1, 2,"), "config.json is not valid JSON"),
    ],
)
def test_broken_keras_sentemb_folder(saved, tmp_path, name, damage, message):
    folder = _copy(saved, tmp_path / "m")
    damage(folder / name)
    with pytest.raises(ModelLoadError) as error:
        SentenceEncoder.from_preset(str(folder))
    assert message in str(error.value) and str(folder) in str(error.value)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p, src: p.write_bytes(open(src, "rb").read()[: 5_000_000]), "is truncated: its tensors need"),
        (lambda p, src: p.write_bytes(os.urandom(4096)), "model.safetensors is"),
        (lambda p, src: p.write_bytes(b""), "is empty or truncated (not a safetensors file)"),
    ],
    ids=["truncated", "random", "empty"],
)
def test_broken_safetensors(tmp_path, damage, message):
    folder = _hf_copy(tmp_path)
    weights = folder / "model.safetensors"
    source = os.path.realpath(weights)
    weights.unlink()
    damage(weights, source)
    with pytest.raises(ModelLoadError) as error:
        SentenceEncoder.from_preset(str(folder))
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    "content, message",
    [('{"model_type": "bert", ', "config.json is not valid JSON (line 1)"),
     ("", "config.json is empty (expected JSON)")],
    ids=["invalid", "empty"],
)
def test_broken_hugging_face_config(tmp_path, content, message):
    """The folder's kind is read from config.json: its error names the file too."""
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(content)
    (folder / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n")
    with pytest.raises(ValueError) as error:
        SentenceEncoder.from_preset(str(folder))
    assert message in str(error.value) and str(folder) in str(error.value)
    assert "\n" not in str(error.value)


def test_cli_reports_one_line_and_exit_2(saved, tmp_path, capsys):
    folder = _copy(saved, tmp_path / "m")
    (folder / "model.weights.h5").write_bytes(b"\x89HDF\r\n")
    (tmp_path / "in.txt").write_text("hello\n")
    code = cli.main(["encode", "--model", str(folder), "--input", str(tmp_path / "in.txt"),
                     "--output", str(tmp_path / "o.npy")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "model.weights.h5 is truncated or not an HDF5 weights file" in err[0]
    assert not (tmp_path / "o.npy").exists()


def test_preset_without_network_fails_fast_with_advice(monkeypatch):
    import socket

    def unreachable(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(socket, "create_connection", unreachable)
    for handle, host in [("bert_base_en_uncased", "www.kaggle.com"),
                         ("hf://google-bert/bert-base-uncased", "huggingface.co")]:
        with pytest.raises(ModelLoadError, match=f"must be downloaded from {host}.*local folder"):
            SentenceEncoder.from_preset(handle)
