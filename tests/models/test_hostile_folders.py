"""Hostile model folders are refused in one line naming the file and the reason, and nothing ran.

Each case plants one kind of hostile folder (a config naming a module outside
Keras, a class outside the allowed set, a Lambda layer, a serialized
function, a pickle, links and paths out of the folder, a FIFO, sizes no model
has) and checks, through `SentenceEncoder.from_preset` (or the loader the
folder is for) and through `keras-sentemb encode --model DIR`: the refusal
names the file and the reason in one line (exit status 2 on the command
line, nothing written), the planted module was not imported, the planted
marker file was not written, and no backbone, tokenizer, Keras object or
weights file was loaded.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from keras_sentemb import cli
from keras_sentemb.models.folder_inspection import UnsafeFolderError
from keras_sentemb.models.folder_inspection import inspect_model_folder
from tests.conftest import TINY_VOCAB
from tests.conftest import make_tiny_encoder
from tests.helpers.processes import load_benchmark
from tests.helpers.processes import worker_env

BAD_INPUTS = load_benchmark("bad_inputs")
EVIL_MODULE = BAD_INPUTS.EVIL_MODULE
MARKER = BAD_INPUTS.MARKER
LAMBDA = BAD_INPUTS.LAMBDA


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny keras_sentemb folder (a keras-hub preset plus sentemb_config.json)."""
    folder = tmp_path_factory.mktemp("hostile") / "tiny"
    make_tiny_encoder().save(folder)
    return folder


@pytest.fixture(scope="module")
def static_saved(tmp_path_factory):
    from tests.static_fixtures import tiny_static

    folder = tmp_path_factory.mktemp("hostile") / "static"
    tiny_static()[0].save(folder)
    return folder


@pytest.fixture(scope="module")
def hf_saved(tmp_path_factory):
    """A small Hugging Face BERT folder (config, vocabulary, weights of the right size)."""
    from safetensors.numpy import save_file

    folder = tmp_path_factory.mktemp("hostile") / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "bert", "vocab_size": len(TINY_VOCAB), "hidden_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
        "max_position_embeddings": 64, "type_vocab_size": 2}))
    (folder / "vocab.txt").write_text("\n".join(TINY_VOCAB) + "\n")
    save_file({"embeddings.word_embeddings.weight": np.zeros((20000,), "float32")},
              str(folder / "model.safetensors"))
    return folder


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A module on sys.path that writes the marker when imported; the marker's path."""
    marker = BAD_INPUTS.plant_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return marker


@pytest.fixture
def loads(monkeypatch):
    """Every heavy load this test makes: backbones, tokenizers, Keras objects, weights files."""
    import keras
    import keras_hub
    import safetensors.numpy

    calls = []

    def spy(owner, name, classmethod_=False):
        original = getattr(owner, name)

        def record(*args, **kwargs):
            calls.append(name)
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, classmethod(lambda cls, *a, **k: record(*a, **k))
                            if classmethod_ else record)

    spy(keras_hub.models.Backbone, "from_preset", classmethod_=True)
    spy(keras_hub.models.Tokenizer, "from_preset", classmethod_=True)
    spy(keras.saving, "deserialize_keras_object")
    spy(safetensors.numpy, "load_file")
    return calls


CASES = [plant for _, plant in BAD_INPUTS.HOSTILE]


def _nothing_ran(marker, loads):
    assert EVIL_MODULE not in sys.modules
    assert not marker.exists()
    assert loads == []


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_refused_in_python_and_on_the_command_line(case, saved, hf_saved, static_saved, tmp_path,
                                                   planted, loads, capsys):
    from keras_sentemb.models import SentenceEncoder

    folder, name, reason = case(tmp_path, saved, hf_saved, static_saved)
    with pytest.raises(UnsafeFolderError) as error:
        SentenceEncoder.from_preset(str(folder))
    message = str(error.value)
    assert "\n" not in message
    assert f"{folder}/{name}" in message or f"{os.path.realpath(folder)}/{name}" in message
    assert reason in message
    _nothing_ran(planted, loads)

    (tmp_path / "in.txt").write_text("hello world\n")
    code = cli.main(["encode", "--model", str(folder), "--input", str(tmp_path / "in.txt"),
                     "--output", str(tmp_path / "out.npy")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("keras-sentemb: error: ") and reason in err[0] and name in err[0]
    assert not (tmp_path / "out.npy").exists()
    _nothing_ran(planted, loads)


def test_a_real_process_refuses_without_traceback(saved, tmp_path):
    """`keras-sentemb encode` in its own interpreter: one line, exit 2, the module not imported."""
    folder = BAD_INPUTS.copy_folder(saved, tmp_path / "m")
    BAD_INPUTS.edit_json(folder / "config.json", lambda c: c.update(
        module=EVIL_MODULE, class_name="Evil", registered_name="evil>Evil"))
    marker = tmp_path / MARKER
    (tmp_path / f"{EVIL_MODULE}.py").write_text(f"open({str(marker)!r}, 'w')\nclass Evil: pass\n")
    (tmp_path / "in.txt").write_text("hello\n")
    env = worker_env()
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the program's own quiet start-up
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    result = subprocess.run(
        [sys.executable, "-m", "keras_sentemb", "encode", "--model", str(folder), "--input",
         str(tmp_path / "in.txt"), "--output", str(tmp_path / "out.npy")],
        capture_output=True, text=True, env=env, timeout=300)
    lines = [line for line in result.stderr.splitlines() if "keras-sentemb" in line]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "config.json: names the class 'evil>Evil'" in lines[0]
    assert "Traceback" not in result.stderr
    assert not marker.exists() and not (tmp_path / "out.npy").exists()


def test_multitask_heads_config_refused(saved, tmp_path, planted):
    from keras_sentemb.methods.multitask.inference import CONFIG_FILE
    from keras_sentemb.methods.multitask.inference import HEADS_FILE
    from keras_sentemb.methods.multitask.trainer import MultitaskModel

    folder = BAD_INPUTS.copy_folder(saved, tmp_path / "m")
    (folder / CONFIG_FILE).write_text(json.dumps({"hidden_dim": 8, "encoder": LAMBDA}))
    np.savez(folder / HEADS_FILE, w0=np.zeros(2, "float32"))
    with pytest.raises(UnsafeFolderError, match=r"multitask_config.json: unknown setting\(s\) "
                                                "'encoder'"):
        MultitaskModel.load_from_folder(folder)
    (folder / CONFIG_FILE).write_text(json.dumps({"hidden_dim": 10**9}))
    with pytest.raises(UnsafeFolderError, match="hidden_dim=1,000,000,000"):
        MultitaskModel.load_from_folder(folder)
    (folder / CONFIG_FILE).write_text(json.dumps({"hidden_dim": 8}))
    BAD_INPUTS.write_object_npz(folder / HEADS_FILE, "w0", planted)
    with pytest.raises(UnsafeFolderError, match="multitask_heads.npz: holds Python objects"):
        MultitaskModel.load_from_folder(folder)
    assert not planted.exists()


def test_backup_naming_weights_outside_is_refused(tmp_path):
    from keras_sentemb.pipelines.backup import METADATA_FILE
    from keras_sentemb.pipelines.backup import inspect_backup

    backup = tmp_path / "out.backup"
    backup.mkdir()
    (tmp_path / "stolen.weights.h5").write_bytes(b"")
    (backup / METADATA_FILE).write_text(json.dumps({"epoch": 2,
                                                    "weights": "../stolen.weights.h5"}))
    with pytest.raises(UnsafeFolderError, match=r"names the path '\.\./stolen\.weights\.h5', "
                                                "outside the folder"):
        inspect_backup(backup)
    (backup / METADATA_FILE).write_text(json.dumps({"epoch": 2}))
    os.symlink(tmp_path / "stolen.weights.h5", backup / "epoch-2.weights.h5")
    with pytest.raises(UnsafeFolderError, match="epoch-2.weights.h5: a link to"):
        inspect_backup(backup)


def test_dev_selection_state_with_a_pickle_is_refused(tmp_path):
    from keras_sentemb.models.folder_inspection import check_npz

    BAD_INPUTS.write_object_npz(tmp_path / "dev_best.npz", "arr_0", tmp_path / MARKER)
    with pytest.raises(UnsafeFolderError, match="dev_best.npz: holds Python objects"):
        check_npz(tmp_path / "dev_best.npz")
    assert not (tmp_path / MARKER).exists()
    np.savez(tmp_path / "fine.npz", arr_0=np.zeros(3))
    check_npz(tmp_path / "fine.npz")  # plain arrays pass


def test_a_downloaded_preset_is_inspected_too(saved, tmp_path, monkeypatch, planted, loads):
    """A keras-hub preset name whose files kagglehub cached: the cached folder is inspected."""
    from keras_sentemb.models import SentenceEncoder

    cached = tmp_path / "cache" / "models" / "keras" / "bert" / "keras" / "bert_tiny_en_uncased"
    folder = BAD_INPUTS.copy_folder(saved, cached / "3")
    BAD_INPUTS.edit_json(folder / "config.json", lambda c: c.update(
        module=EVIL_MODULE, class_name="Evil", registered_name="evil>Evil"))
    monkeypatch.setenv("KAGGLEHUB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(UnsafeFolderError, match=r"bert_tiny_en_uncased/3/config.json: names the "
                                                r"class 'evil>Evil'"):
        SentenceEncoder.from_preset("bert_tiny_en_uncased")
    assert EVIL_MODULE not in sys.modules and not planted.exists() and loads == []


def test_the_planted_pickles_run_code_when_read(tmp_path):
    """The hostile pickles are real: read as a pickle reader would, they write the marker."""
    import pickle

    marker = tmp_path / MARKER
    pickle.loads(BAD_INPUTS.pickle_bytes(marker)).close()
    assert marker.exists()
    marker.unlink()
    BAD_INPUTS.write_object_npz(tmp_path / "objects.npz", "w0", marker)
    with np.load(tmp_path / "objects.npz", allow_pickle=True) as data:
        data["w0"][0].close()
    assert marker.exists()


def test_real_folders_pass(saved, static_saved):
    """What this package writes and the bundled Hugging Face folder pass the inspection."""
    from keras_sentemb.models.presets import default_model_dir

    for folder in (saved, static_saved, default_model_dir()):
        inspect_model_folder(folder)


def test_hub_cache_snapshot_links_pass(saved, tmp_path):
    """A Hugging Face hub cache snapshot links into its repository's blobs/: allowed."""
    repo = tmp_path / "models--org--name"
    snapshot = repo / "snapshots" / "abc123"
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for entry in saved.iterdir():
        if entry.is_file():
            blob = repo / "blobs" / f"blob-{entry.name}"
            shutil.copy(entry, blob)
            os.symlink(os.path.relpath(blob, snapshot), snapshot / entry.name)
        else:
            shutil.copytree(entry, snapshot / entry.name)
    inspect_model_folder(snapshot)
    os.symlink(saved / "config.json", snapshot / "other.json")  # elsewhere: refused
    with pytest.raises(UnsafeFolderError, match="other.json: a link to"):
        inspect_model_folder(snapshot)


def test_plugins_come_from_installed_packages_only():
    """No loader reads code from a folder: the registry's only code source is entry points."""
    import inspect as inspect_module

    from keras_sentemb.methods import registry

    source = inspect_module.getsource(registry)
    assert "entry_points" in source
    for forbidden in ("exec(", "eval(", "spec_from_file_location", "sys.path.insert",
                      "sys.path.append"):
        assert forbidden not in source


def test_the_loaders_never_unpickle_or_exec():
    """Loading code: no pickle, no exec, no module import from a folder's JSON."""
    from pathlib import Path

    import keras_sentemb

    root = Path(keras_sentemb.__file__).parent
    hits = []
    for path in list((root / "models").glob("*.py")) + [root / "pipelines" / "backup.py",
                                                       root / "methods" / "multitask" /
                                                       "inference.py"]:
        text = path.read_text()
        for forbidden in ("pickle.load", "allow_pickle=True", "torch.load", "exec(",
                          "safe_mode=False"):
            if forbidden in text:
                hits.append(f"{path.name}: {forbidden}")
    assert hits == []

