"""`import keras_sentemb` and the encoder load no training, evaluation or export code."""

import json
import subprocess
import sys

from tests.conftest import REPO

HEAVY = ("keras_sentemb.trainers", "keras_sentemb.pipelines", "keras_sentemb.evaluation",
         "keras_sentemb.export", "keras_sentemb.api", "keras_sentemb.beam")

SCRIPT = """
import json, sys
sys.path.insert(0, {repo!r})
import keras_sentemb
after_import = sorted(sys.modules)
keras_sentemb.SentenceEncoder
after_encoder = sorted(sys.modules)
keras_sentemb.SentenceEncoder.from_preset({hf_folder!r}).encode(["hello world"])
after_load = sorted(sys.modules)
keras_sentemb.fit_simcse
after_fit = sorted(sys.modules)
print(json.dumps([after_import, after_encoder, after_load, after_fit]))
"""
# Registered for saved configs only (`loading.register_serializable_classes`):
# loading and using a Hugging Face folder imports none of them.
CONFIG_ONLY = ("keras_sentemb.losses", "keras_sentemb.models.glow_flow",
               "keras_sentemb.models.logit_scale", "keras_sentemb.models.memory_queue",
               "keras_sentemb.models.projection_mlp")


def loaded(names, prefixes):
    return sorted(n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes))


def test_import_loads_no_heavy_modules(tmp_path):
    from tests.conftest import make_tiny_encoder
    from tests.helpers.files import write_hf_bert

    hf_folder = str(write_hf_bert(make_tiny_encoder(), tmp_path / "hf"))
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(repo=str(REPO), hf_folder=hf_folder)],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    after_import, after_encoder, after_load, after_fit = json.loads(
        result.stdout.strip().splitlines()[-1])
    # The package itself: nothing heavy, not even TensorFlow.
    assert loaded(after_import, HEAVY + ("tensorflow", "keras", "keras_hub")) == []
    # The encoder: TensorFlow and Keras, but no training, evaluation or export code.
    assert "keras" in after_encoder
    assert loaded(after_encoder, HEAVY) == []
    # A Hugging Face folder, loaded and encoding: still none, nor the config-only classes.
    assert loaded(after_load, HEAVY + CONFIG_ONLY) == []
    # A fit_* function loads the training code (the check above can fail).
    assert loaded(after_fit, ("keras_sentemb.trainers",)) != []


CLI_SCRIPT = """
import json, sys
sys.path.insert(0, {repo!r})
from keras_sentemb.cli import program as cli
cli.import_keras_without_extras(local_model=True)
names = cli.KERAS_IMPORT_TIME_EXTRAS + cli.DOWNLOAD_EXTRAS
hidden = [n for n in names if n in sys.modules]
from keras_hub.src.utils import preset_utils
import importlib.util
available = [n for n in names if importlib.util.find_spec(n) is not None]
for name in available:
    __import__(name)  # importable again afterwards
print(json.dumps(["keras" in sys.modules, "keras_hub" in sys.modules, hidden,
                  preset_utils.kagglehub is None]))
"""


def test_cli_imports_keras_without_its_unused_extras():
    result = subprocess.run([sys.executable, "-c", CLI_SCRIPT.format(repo=str(REPO))],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    has_keras, has_hub, hidden, no_kagglehub = json.loads(result.stdout.strip().splitlines()[-1])
    assert has_keras and has_hub and hidden == []
    # A local model: keras-hub never imported its downloader (kagglehub) in this process.
    assert no_kagglehub


def test_only_a_local_model_hides_the_downloader(tmp_path):
    from keras_sentemb.cli import program

    assert program.is_local_model("default") and program.is_local_model(str(tmp_path))
    for name in ("bert_tiny_en_uncased", "kaggle://keras/bert/keras/bert_tiny_en_uncased",
                 str(tmp_path / "missing")):
        assert not program.is_local_model(name)
