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
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest

from keras_sentemb import cli
from keras_sentemb.models.folder_inspection import LIMITS
from keras_sentemb.models.folder_inspection import UnsafeFolderError
from keras_sentemb.models.folder_inspection import inspect_model_folder
from tests.conftest import TINY_VOCAB
from tests.conftest import make_tiny_encoder
from tests.helpers.processes import worker_env

EVIL_MODULE = "sentemb_evil_marker"
MARKER = "ran.txt"


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


class Pickled:
    """Unpickling this writes the marker file (what a hostile pickle does, harmlessly)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A module on sys.path that writes the marker when imported; the marker's path."""
    marker = tmp_path / MARKER
    code = f"open({str(marker)!r}, 'w').write('imported')\nclass Evil:\n    pass\n"
    (tmp_path / f"{EVIL_MODULE}.py").write_text(code)
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


def _copy(src, dst):
    shutil.copytree(src, dst, symlinks=True)
    return dst


def _edit_json(path, edit):
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _write_safetensors(path, tensors):
    from safetensors.numpy import save_file

    save_file(tensors, str(path))


def _hf_folder(folder):
    """A small Hugging Face BERT folder (config, vocabulary, weights of the right size)."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "bert", "vocab_size": len(TINY_VOCAB), "hidden_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
        "max_position_embeddings": 64, "type_vocab_size": 2}))
    (folder / "vocab.txt").write_text("\n".join(TINY_VOCAB) + "\n")
    _write_safetensors(folder / "model.safetensors",
                       {"embeddings.word_embeddings.weight": np.zeros((20000,), "float32")})
    return folder


# ------------------------------------------------------------- the cases
# Each plants a hostile folder in `tmp` from the tiny saved ones and returns
# (folder, the file the refusal must name, a fragment of the reason).

def module_outside_keras(tmp, saved, static):
    folder = _copy(saved, tmp / "m")
    _edit_json(folder / "config.json", lambda c: c.update(
        module=EVIL_MODULE, class_name="Evil", registered_name="evil>Evil"))
    return folder, "config.json", "names the class 'evil>Evil' (module 'sentemb_evil_marker')"


def keras_module_not_registered(tmp, saved, static):
    folder = _copy(saved, tmp / "m")
    _edit_json(folder / "config.json", lambda c: c.update(
        module=EVIL_MODULE, registered_name="keras_hub>BertBackbone"))
    return folder, "config.json", "in module 'sentemb_evil_marker', outside the allowed set"


def class_outside_allowed_set(tmp, saved, static):
    folder = _copy(saved, tmp / "m")
    _edit_json(folder / "tokenizer.json", lambda c: c.update(
        module="keras_sentemb.methods.simcse.trainer", class_name="SimCSETrainer",
        registered_name="keras_sentemb>SimCSETrainer"))
    return folder, "tokenizer.json", "names the class 'keras_sentemb>SimCSETrainer'"


LAMBDA = {"module": "keras.layers", "class_name": "Lambda", "registered_name": None,
          "config": {"name": "x", "function": {
              "class_name": "__lambda__",
              "config": {"code": "4wEAAAAAAAAAAAAAAAEAAAADAAAA", "defaults": None,
                         "closure": None}}}}


def lambda_layer(tmp, saved, static):
    folder = _copy(saved, tmp / "m")

    def edit(config):
        config["format_version"] = 2
        config["postprocess"] = LAMBDA

    _edit_json(folder / "sentemb_config.json", edit)
    np.savez(folder / "sentemb_postprocess.npz", w0=np.zeros(2, "float32"))
    return folder, "sentemb_config.json", "names a Lambda layer"


def serialized_function(tmp, saved, static):
    folder = _copy(saved, tmp / "m")
    _edit_json(folder / "config.json", lambda c: c["config"].update(
        activation=LAMBDA["config"]["function"]))
    return folder, "config.json", "names a serialized function ('__lambda__'"


def pickled_weights_only(tmp, saved, static):
    folder = _hf_folder(tmp / "hf")
    (folder / "model.safetensors").unlink()
    with open(folder / "pytorch_model.bin", "wb") as f:
        pickle.dump(Pickled(tmp / MARKER), f)
    return folder, "pytorch_model.bin", "holds the weights only as a pickle"


def pickle_in_npz(tmp, saved, static):
    folder = _copy(saved, tmp / "m")
    _edit_json(folder / "sentemb_config.json", lambda c: c.update(projection_dim=4))
    objects = np.empty(1, dtype=object)
    objects[0] = Pickled(tmp / MARKER)
    np.savez(folder / "sentemb_projection.npz", kernel=objects, bias=np.zeros(4, "float32"))
    return folder, "sentemb_projection.npz", "holds Python objects (kernel.npy)"


def weights_link_out(tmp, saved, static):
    folder = _copy(saved, tmp / "m")
    outside = tmp / "elsewhere.weights.h5"
    shutil.move(folder / "model.weights.h5", outside)
    os.symlink(outside, folder / "model.weights.h5")
    return folder, "model.weights.h5", "a link to"


def vocabulary_link_out(tmp, saved, static):
    folder = _hf_folder(tmp / "hf")
    (folder / "vocab.txt").unlink()
    os.symlink("/etc/hostname", folder / "vocab.txt")
    return folder, "vocab.txt", "a link to /etc/hostname, outside the folder"


def module_path_out(tmp, saved, static):
    folder = _hf_folder(tmp / "hf")
    (tmp / "outside").mkdir()
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "../outside",
         "type": "sentence_transformers.models.Pooling"}]))
    return folder, "modules.json", "names the path '../outside', outside the folder"


def weight_map_out(tmp, saved, static):
    folder = _hf_folder(tmp / "hf")
    shutil.move(folder / "model.safetensors", tmp / "shard.safetensors")
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"embeddings.word_embeddings.weight":
                                        "../shard.safetensors"}}))
    return folder, "model.safetensors.index.json", "names the path '../shard.safetensors'"


def custom_code(tmp, saved, static):
    folder = _hf_folder(tmp / "hf")
    (folder / f"{EVIL_MODULE}.py").write_text(f"open({str(tmp / MARKER)!r}, 'w')\n")
    _edit_json(folder / "config.json", lambda c: c.update(
        auto_map={"AutoModel": f"{EVIL_MODULE}.Evil"}))
    return folder, "config.json", "asks for the folder's own code (auto_map"


def custom_module_type(tmp, saved, static):
    folder = _hf_folder(tmp / "hf")
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": f"{EVIL_MODULE}.Evil"}]))
    return folder, "modules.json", f"names the module type '{EVIL_MODULE}.Evil'"


def fifo_tokenizer(tmp, saved, static):
    folder = _hf_folder(tmp / "hf")
    os.mkfifo(folder / "tokenizer.json")
    return folder, "tokenizer.json", "neither a regular file nor a folder"


def vocabulary_of_a_billion(tmp, saved, static):
    folder = _copy(saved, tmp / "m")
    _edit_json(folder / "config.json", lambda c: c["config"].update(vocabulary_size=10**9))
    return folder, "config.json", f"vocabulary_size=1,000,000,000 (more than {LIMITS['vocabulary']:,})"


def a_million_layers(tmp, saved, static):
    folder = _hf_folder(tmp / "hf")
    _edit_json(folder / "config.json", lambda c: c.update(num_hidden_layers=10**6))
    return folder, "config.json", "num_hidden_layers=1,000,000 (more than 512)"


def huge_width(tmp, saved, static):
    folder = _copy(saved, tmp / "m")
    _edit_json(folder / "config.json", lambda c: c["config"].update(hidden_dim=10**7))
    return folder, "config.json", "hidden_dim=10,000,000 (more than 65,536)"


def huge_sequence_length(tmp, saved, static):
    folder = _hf_folder(tmp / "hf")
    _edit_json(folder / "config.json", lambda c: c.update(max_position_embeddings=10**8))
    return folder, "config.json", "max_position_embeddings=100,000,000"


def weights_smaller_than_config(tmp, saved, static):
    folder = _copy(saved, tmp / "m")  # 48 layers of 1,024: real sizes, but not these weights
    _edit_json(folder / "config.json", lambda c: c["config"].update(
        num_layers=48, hidden_dim=1024, intermediate_dim=4096, num_heads=16))
    return folder, "config.json", "parameters, but its weights (model.weights.h5) hold"


def gigabyte_tokenizer(tmp, saved, static):
    folder = _hf_folder(tmp / "hf")
    with open(folder / "tokenizer.json", "wb") as f:
        f.truncate(2**30)  # sparse: no disk used
    return folder, "tokenizer.json", "a JSON file of 1,073,741,824 bytes"


def deeply_nested_json(tmp, saved, static):
    folder = _hf_folder(tmp / "hf")
    (folder / "tokenizer_config.json").write_text("[" * 100_000 + "]" * 100_000)
    return folder, "tokenizer_config.json", "JSON nested more than 200 levels deep"


def static_table_of_a_billion_rows(tmp, saved, static):
    folder = _copy(static, tmp / "s")
    header = json.dumps({"embeddings": {"dtype": "F32", "shape": [10**9, 8],
                                        "data_offsets": [0, 32]}}).encode()
    (folder / "model.safetensors").write_bytes(
        len(header).to_bytes(8, "little") + header + bytes(32))
    return folder, "model.safetensors", "the tensor 'embeddings' of shape [1000000000, 8]"


def static_tokenizer_link_out(tmp, saved, static):
    folder = _copy(static, tmp / "s")
    shutil.move(folder / "tokenizer.json", tmp / "tokenizer.json")
    os.symlink(tmp / "tokenizer.json", folder / "tokenizer.json")
    return folder, "tokenizer.json", "outside the folder"


CASES = [module_outside_keras, keras_module_not_registered, class_outside_allowed_set,
         lambda_layer, serialized_function, pickled_weights_only, pickle_in_npz,
         weights_link_out, vocabulary_link_out, module_path_out, weight_map_out, custom_code,
         custom_module_type, fifo_tokenizer, vocabulary_of_a_billion, a_million_layers,
         huge_width, huge_sequence_length, weights_smaller_than_config, gigabyte_tokenizer,
         deeply_nested_json, static_table_of_a_billion_rows, static_tokenizer_link_out]


def _nothing_ran(marker, loads):
    assert EVIL_MODULE not in sys.modules
    assert not marker.exists()
    assert loads == []


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_refused_in_python_and_on_the_command_line(case, saved, static_saved, tmp_path, planted,
                                                   loads, capsys):
    from keras_sentemb.models import SentenceEncoder

    folder, name, reason = case(tmp_path, saved, static_saved)
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
    """`keras-sentemb encode` in its own interpreter: one line, exit 2, the module never imported."""
    folder = _copy(saved, tmp_path / "m")
    _edit_json(folder / "config.json", lambda c: c.update(
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

    folder = _copy(saved, tmp_path / "m")
    (folder / CONFIG_FILE).write_text(json.dumps({"hidden_dim": 8, "encoder": LAMBDA}))
    np.savez(folder / HEADS_FILE, w0=np.zeros(2, "float32"))
    with pytest.raises(UnsafeFolderError, match=r"multitask_config.json: unknown setting\(s\) "
                                                "'encoder'"):
        MultitaskModel.load_from_folder(folder)
    (folder / CONFIG_FILE).write_text(json.dumps({"hidden_dim": 10**9}))
    with pytest.raises(UnsafeFolderError, match="hidden_dim=1,000,000,000"):
        MultitaskModel.load_from_folder(folder)
    (folder / CONFIG_FILE).write_text(json.dumps({"hidden_dim": 8}))
    objects = np.empty(1, dtype=object)
    objects[0] = Pickled(planted)
    np.savez(folder / HEADS_FILE, w0=objects)
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

    objects = np.empty(1, dtype=object)
    objects[0] = Pickled(tmp_path / MARKER)
    np.savez(tmp_path / "dev_best.npz", arr_0=objects)
    with pytest.raises(UnsafeFolderError, match="dev_best.npz: holds Python objects"):
        check_npz(tmp_path / "dev_best.npz")
    assert not (tmp_path / MARKER).exists()
    np.savez(tmp_path / "fine.npz", arr_0=np.zeros(3))
    check_npz(tmp_path / "fine.npz")  # plain arrays pass


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

