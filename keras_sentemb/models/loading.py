"""Loading backbones, tokenizers and settings from each kind of model source."""

import contextlib
import dataclasses
import importlib
import json
import logging
import os
import socket
import struct
import tempfile
from pathlib import Path

from safetensors import safe_open
from safetensors.numpy import save_file
import h5py
import keras
import keras_hub
import numpy as np

from keras_sentemb.models import presets
from keras_sentemb.models.folder_inspection import inspect_model_folder
from keras_sentemb.kernels.deferred_init import initializers_deferred
from keras_sentemb.kernels.fused_gelu import HF_HIDDEN_ACT
from keras_sentemb.models.keras_hub_models import task_settings
from keras_sentemb.models.presets import is_cached_preset
from keras_sentemb.models.roberta_keys import prefixed_view
from keras_sentemb.models.st_modules import read_dense_modules

# Folders with a post-processing layer are written as format 2 by
# `SentenceEncoder.save` (older versions, which read format 1, then say the
# folder is newer); its weights go in POSTPROCESS_WEIGHTS.
POSTPROCESS_FORMAT_VERSION = 2
POSTPROCESS_WEIGHTS = "sentemb_postprocess.npz"
# Folders whose encoder frames sentences in a prompt template are format 3
# (older versions, which do not frame, then say the folder is newer).
PROMPT_FORMAT_VERSION = 3

logger = logging.getLogger(__name__)

# The modules that register keras_sentemb's serialisable classes
# (`@keras.saving.register_keras_serializable`) which a saved encoder's
# config can name: its layers, post-processing layers (`Whitening`,
# `GlowFlow`), views and losses. The package loads its modules lazily, so a
# class is registered only once its module is imported;
# `register_serializable_classes` imports them all before a model is built
# from a config. (The trainers, optimizers and schedules register their own
# classes for checkpoints of a training run; a saved encoder names none.)
SERIALIZABLE_MODULES = (
    "keras_sentemb.augment.adversarial_perturbation",
    "keras_sentemb.augment.embedding_dropout",
    "keras_sentemb.augment.feature_cutoff",
    "keras_sentemb.augment.identity_view",
    "keras_sentemb.augment.span_cutoff",
    "keras_sentemb.augment.token_cutoff",
    "keras_sentemb.augment.token_shuffle",
    "keras_sentemb.losses.keras_losses",
    "keras_sentemb.models.glow_flow",
    "keras_sentemb.models.logit_scale",
    "keras_sentemb.models.memory_queue",
    "keras_sentemb.models.pooling",
    "keras_sentemb.models.post_processing",
    "keras_sentemb.models.projection_mlp",
    "keras_sentemb.models.sentence_encoder",
    "keras_sentemb.models.whitening",
)


def register_serializable_classes():
    """Import every module in `SERIALIZABLE_MODULES`, registering their classes with Keras.

    Called wherever a model is loaded from a saved config (`load_components`
    for keras_sentemb and keras-hub folders, `SentenceEncoder.from_config`),
    so that a config naming, e.g., `keras_sentemb>GlowFlow` deserialises in a
    fresh interpreter whatever was imported before. A Hugging Face folder
    names no class of this package, so loading one skips the imports (a
    tenth of a second of a cold start). Cheap after the first call.
    """
    for module in SERIALIZABLE_MODULES:
        importlib.import_module(module)


@dataclasses.dataclass
class Components:
    backbone: object
    tokenizer: object
    settings: dict
    projection_weights: list = None
    postprocess: object = None


def _sentence_transformers_settings(folder):
    """Pooling, normalisation and max length from sentence-transformers files."""
    folder = Path(folder)
    settings = {}
    pooling_file = folder / "1_Pooling" / "config.json"
    modules_file = folder / "modules.json"
    if modules_file.is_file():
        modules = presets.read_json(modules_file)
        types = [m.get("type", "") for m in modules]
        settings["normalize"] = any(t.endswith("Normalize") for t in types)
        for module in modules:
            if module.get("path") and "Pooling" in module.get("type", ""):
                pooling_file = folder / module["path"] / "config.json"
    if pooling_file.is_file():
        cfg = presets.read_json(pooling_file)
        if cfg.get("pooling_mode_cls_token"):
            settings["pooling"] = "cls"
        elif cfg.get("pooling_mode_max_tokens"):
            settings["pooling"] = "max"
        elif cfg.get("pooling_mode_mean_tokens", True):
            settings["pooling"] = "mean"
    st_config = folder / "sentence_bert_config.json"
    if st_config.is_file():
        max_seq = presets.read_json(st_config).get("max_seq_length")
        if max_seq:
            settings["max_length"] = int(max_seq)
    return settings


def _hf_bert_normalization(folder):
    """The reference (Hugging Face) BERT tokenizer's text normalization.

    `BertTokenizer` lower-cases when `do_lower_case` is set and strips accents
    when `strip_accents` is true, or unset (null) on a lower-cased vocabulary.
    keras-hub leaves accents in place when it reads such folders (turning
    "résumé" into [UNK]); see `text_normalization` for the other differences.
    """
    cfg_file = Path(folder) / "tokenizer_config.json"
    cfg = presets.read_json(cfg_file) if cfg_file.is_file() else {}
    lowercase = bool(cfg.get("do_lower_case", False))
    strip = cfg.get("strip_accents")
    strip = lowercase if strip is None else bool(strip)
    if lowercase and strip:
        return "bert_uncased"
    if not lowercase and not strip:
        return "bert_cased"
    raise ValueError(
        f"{folder}: do_lower_case={lowercase} with strip_accents={strip} is not "
        "supported (only the standard uncased and cased BERT settings are)."
    )


def _tokenizer_json_model(folder, kind):
    """The `model` of a folder's `tokenizer.json` when it is a `kind` ("WordPiece"/"BPE") model.

    Folders written by transformers 5 (and sentence-transformers on top of
    it) hold only the fast tokenizer's `tokenizer.json`, without the
    `vocab.txt` / `vocab.json` + `merges.txt` of the slow tokenizers.
    """
    path = Path(folder) / "tokenizer.json"
    model = presets.read_json(path).get("model", {}) if path.is_file() else {}
    if model.get("type") != kind or not isinstance(model.get("vocab"), dict):
        return None
    return model


def _ordered_vocabulary(folder, vocab):
    """The tokens of `{token: id}` in id order; the ids must be 0..n-1."""
    ordered = sorted(vocab, key=vocab.get)
    if [vocab[t] for t in ordered] != list(range(len(ordered))):
        raise ModelLoadError(f"{folder}/tokenizer.json: the vocabulary ids are not 0..{len(vocab) - 1}.")
    return ordered


def _wordpiece_vocabulary(folder):
    """`vocab.txt`, or the WordPiece vocabulary of `tokenizer.json` (a list in id order)."""
    path = Path(folder) / "vocab.txt"
    if path.is_file():
        return str(path)
    model = _tokenizer_json_model(folder, "WordPiece")
    if model is None:
        raise ModelLoadError(
            f"cannot load the model in {folder}: it has neither vocab.txt nor a WordPiece "
            "tokenizer.json."
        )
    return _ordered_vocabulary(folder, model["vocab"])


def _bpe_tokenizer(folder):
    """A RoBERTa tokenizer: keras-hub's from vocab.json + merges.txt, else from tokenizer.json."""
    folder = Path(folder)
    if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
        return keras_hub.models.Tokenizer.from_preset(str(folder))
    model = _tokenizer_json_model(folder, "BPE")
    if model is None:
        raise ModelLoadError(
            f"cannot load the model in {folder}: it has neither vocab.json + merges.txt nor a "
            "BPE tokenizer.json."
        )
    vocabulary = {token: i for i, token in enumerate(_ordered_vocabulary(folder, model["vocab"]))}
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return keras_hub.models.RobertaTokenizer(vocabulary=vocabulary, merges=merges)


POOLER_KEYS = ("pooler.dense.weight", "pooler.dense.bias")


def _safetensors_keys(folder):
    """`{key: file name}` of a Hugging Face folder's safetensors weights."""

    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return dict(presets.read_json(index)["weight_map"])
    path = folder / "model.safetensors"
    if not path.is_file():
        return {}
    with safe_open(str(path), framework="np") as f:
        return {key: path.name for key in f.keys()}


@contextlib.contextmanager
def _bert_with_pooler(folder, config):
    """`folder`, or a view of it that supplies the zero pooler a masked-LM checkpoint lacks.

    A BERT folder saved from a masked-LM model (`BertForMaskedLM`) has no
    pooler weights, and keras-hub's converter requires them. No sentence
    pooling here uses the pooler, so the view adds a zero pooler in a small
    extra safetensors file next to links to the real files (through an index
    file, so nothing large is copied). Prefixed keys (`bert.`) and extra
    tensors (the MLM head) are read as they are by keras-hub.
    """
    keys = _safetensors_keys(folder)
    if config.get("model_type") != "bert" or not keys or any(
        k.endswith(POOLER_KEYS[0]) for k in keys
    ):
        yield folder
        return

    logger.info(
        "%s has no pooler weights (a masked-LM checkpoint?): the pooler is left at zero; "
        "no sentence pooling uses it.", folder,
    )
    hidden = int(config["hidden_size"])
    with tempfile.TemporaryDirectory(prefix="sentemb-hf-") as view:
        view = Path(view)
        for entry in Path(folder).iterdir():
            if entry.name != "model.safetensors.index.json":
                os.symlink(entry.resolve(), view / entry.name)
        save_file(
            {POOLER_KEYS[0]: np.zeros((hidden, hidden), "float32"),
             POOLER_KEYS[1]: np.zeros((hidden,), "float32")},
            str(view / "sentemb_pooler.safetensors"),
        )
        weight_map = dict(keys)
        weight_map.update({k: "sentemb_pooler.safetensors" for k in POOLER_KEYS})
        with open(view / "model.safetensors.index.json", "w", encoding="utf-8") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
        yield str(view)


def _declared_gelu(folder, config):
    """The GELU form `config.json`'s `hidden_act` declares, or None (keras-hub's own).

    keras-hub's converter builds BERT with the tanh approximation whatever the
    checkpoint says; Hugging Face computes `"gelu"` exactly.
    """
    act = config.get("hidden_act", "gelu")
    form = HF_HIDDEN_ACT.get(act) if isinstance(act, str) else None
    if form is None:
        logger.warning("%s declares hidden_act=%r, which is not a GELU form this package "
                       "computes; the backbone keeps keras-hub's activation.", folder, act)
    return form


def _declared_dropout(folder, config):
    """`{"dropout": rate}` of `config.json`'s `hidden_dropout_prob`, or `{}` (keras-hub's 0.1).

    keras-hub's converter builds the backbone with its default dropout whatever the
    checkpoint declares; its backbones have one rate for the hidden states and the
    attention probabilities, so a checkpoint that declares two different ones keeps its
    hidden rate (with a warning).
    """
    hidden = config.get("hidden_dropout_prob")
    if hidden is None:
        return {}
    if isinstance(hidden, bool) or not isinstance(hidden, (int, float)) or not 0 <= hidden < 1:
        logger.warning("%s declares hidden_dropout_prob=%r, not a rate in [0, 1); the backbone "
                       "keeps keras-hub's dropout.", folder, hidden)
        return {}
    attention = config.get("attention_probs_dropout_prob", hidden)
    if attention != hidden:
        logger.warning("%s declares dropout %r on the hidden states and %r on the attention "
                       "probabilities; keras-hub's backbone has one rate: %r for both.",
                       folder, hidden, attention, hidden)
    return {"dropout": float(hidden)}


def _load_hf(folder, dtype):
    config = presets.read_json(Path(folder) / "config.json")
    with _bert_with_pooler(folder, config) as source, prefixed_view(source, config) as source:
        with initializers_deferred():  # every weight is loaded: no random draws first
            backbone = keras_hub.models.Backbone.from_preset(
                source, dtype=dtype, **_declared_dropout(folder, config))
    settings = _sentence_transformers_settings(folder)
    settings["feedforward_gelu"] = _declared_gelu(folder, config)
    # Dense modules: the projection head and a whitening (see st_modules).
    dense = read_dense_modules(folder, settings.get("pooling"))
    projection_weights = None
    if dense["projection"] is not None:
        kernel, bias, activation = dense["projection"]
        settings.update(projection_dim=int(kernel.shape[1]), projection_activation=activation)
        projection_weights = [kernel.astype("float32"), bias.astype("float32")]
    if config["model_type"] == "bert":
        settings["text_normalization"] = _hf_bert_normalization(folder)
        tokenizer = keras_hub.models.BertTokenizer(
            vocabulary=_wordpiece_vocabulary(folder),
            lowercase=False,
            strip_accents=False,
        )
    else:
        tokenizer = _bpe_tokenizer(folder)
    settings.setdefault(
        "max_length", min(512, int(config.get("max_position_embeddings", 512)))
    )
    if config["model_type"] != "bert":
        # RoBERTa reserves two position rows; keras-hub drops them on load.
        settings["max_length"] = min(
            settings["max_length"], int(backbone.max_sequence_length)
        )
    return Components(backbone, tokenizer, settings, projection_weights, dense["postprocess"])


def _load_backbone_and_tokenizer(handle, dtype):
    with initializers_deferred():  # every weight is loaded: no random draws first
        backbone = keras_hub.models.Backbone.from_preset(handle, dtype=dtype)
    tokenizer = keras_hub.models.Tokenizer.from_preset(handle)
    settings = {"max_length": min(512, int(backbone.max_sequence_length))}
    return Components(backbone, tokenizer, settings)


def _load_keras_hub(handle, dtype):
    """A keras-hub preset; a `TextEmbedder` preset's pooling, normalisation and length kept."""
    parts = _load_backbone_and_tokenizer(handle, dtype)
    declared = task_settings(handle)
    if "max_length" in declared:
        declared["max_length"] = min(declared["max_length"], parts.settings["max_length"])
    parts.settings.update(declared)
    return parts


def _load_sentemb(folder, dtype):
    folder = Path(folder)
    parts = _load_backbone_and_tokenizer(str(folder), dtype)
    stored = presets.read_json(folder / presets.SENTEMB_CONFIG)
    version = stored.pop("format_version", 1)
    if version > PROMPT_FORMAT_VERSION:
        raise ValueError(
            f"{folder} was written by a newer keras_sentemb (format "
            f"{version}); this version reads formats 1 to {PROMPT_FORMAT_VERSION}."
        )
    postprocess = stored.pop("postprocess", None)
    if postprocess is not None:
        parts.postprocess = _load_postprocess(folder, postprocess)
    parts.settings.update(stored)
    weights_file = folder / "sentemb_projection.npz"
    if stored.get("projection_dim") is not None:
        if not weights_file.is_file():
            raise ValueError(f"{folder} declares a projection head but has no {weights_file.name}.")
        with np.load(weights_file) as data:
            parts.projection_weights = [data["kernel"], data["bias"]]
    return parts


def _load_postprocess(folder, config):
    """The post-processing layer of a keras_sentemb folder, weights loaded."""

    weights_file = folder / POSTPROCESS_WEIGHTS
    if not weights_file.is_file():
        raise ModelLoadError(
            f"{folder} declares a post-processing layer but has no {weights_file.name}."
        )
    layer = keras.saving.deserialize_keras_object(config)
    if not layer.built:
        layer.build((None, layer.input_dim))
    with np.load(weights_file) as data:
        weights = [data[f"w{i}"] for i in range(len(data.files))]
    layer.set_weights(weights)
    return layer


class ModelLoadError(presets.ModelNotFoundError):
    """A model folder or preset that exists but cannot be loaded (one line)."""

JSON_FILES = (
    "config.json", "sentemb_config.json", "tokenizer.json", "metadata.json",
    "preprocessor.json", "task.json", "modules.json", "sentence_bert_config.json",
    "tokenizer_config.json", "special_tokens_map.json", "1_Pooling/config.json",
)
# Hosts keras-hub downloads presets from, by handle scheme.
PRESET_HOSTS = {"kaggle": ("www.kaggle.com", 443), "hf": ("huggingface.co", 443),
                "modelscope": ("www.modelscope.cn", 443), "gs": ("storage.googleapis.com", 443)}


def _check_safetensors(path):
    """The header of a safetensors file parses and its tensors fit in the file."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ModelLoadError(f"{path} is empty or truncated (not a safetensors file).")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise ModelLoadError(f"{path} is truncated or not a safetensors file (bad header).")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ModelLoadError(f"{path} is not a safetensors file (its header is not JSON).") from None
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end > size:
        raise ModelLoadError(
            f"{path} is truncated: its tensors need {8 + n + end} bytes, the file has {size}."
        )


def _check_h5(path):
    try:
        with h5py.File(path, "r"):
            pass
    except OSError:
        raise ModelLoadError(f"{path} is truncated or not an HDF5 weights file.") from None


def check_model_files(folder):
    """Check a model folder's files before loading; raise one-line errors naming them.

    Empty or invalid JSON files, truncated or foreign safetensors / HDF5
    weights are reported with the file and what is wrong, instead of the
    parser's traceback.
    """
    folder = Path(folder)
    for name in JSON_FILES:
        path = folder / name
        if not path.is_file():
            continue
        text = path.read_bytes()
        if not text.strip():
            raise ModelLoadError(f"{path} is empty (expected JSON).")
        try:
            json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            where = f" (line {e.lineno})" if isinstance(e, json.JSONDecodeError) else ""
            raise ModelLoadError(f"{path} is not valid JSON{where}.") from None
    for path in folder.glob("*.safetensors"):
        _check_safetensors(path)
    for path in folder.glob("*.h5"):
        _check_h5(path)


def check_network_for_preset(handle, timeout=3.0):
    """Fail fast, with advice, when a preset needs a download and no network is there."""
    scheme = handle.split("://", 1)[0] if "://" in handle else "kaggle"
    host = PRESET_HOSTS.get(scheme)
    if host is None:
        return
    try:
        socket.create_connection(host, timeout=timeout).close()
    except OSError:
        raise ModelLoadError(
            f"keras-hub preset {handle!r} must be downloaded from {host[0]}, which cannot "
            "be reached (no network?). Download it where there is network "
            "(keras_hub.models.Backbone.from_preset(...).save_to_preset(folder)) and "
            "pass the local folder instead."
        ) from None


def load_components(resolved, dtype=None):
    """Load backbone, tokenizer and stored settings for a `ResolvedModel`.

    Raises `ModelLoadError` (one line, naming the file or preset) for a
    broken folder or an unreachable preset, and `UnsafeFolderError` for a
    folder that names code or sizes no model has (see `folder_inspection`),
    before anything is loaded.
    """
    location = resolved.location
    # Data, never code: a folder (a downloaded preset's too) is refused before anything is built.
    local = [location] if Path(location).is_dir() else (
        presets.cached_preset_dirs(location) if resolved.kind == "keras_hub" else [])
    for folder in local:
        inspect_model_folder(folder, resolved.kind)
    if resolved.kind != "huggingface":
        register_serializable_classes()
    if resolved.kind == "keras_hub" and not Path(location).is_dir():

        if not is_cached_preset(location):
            check_network_for_preset(location)
    if Path(location).is_dir():
        check_model_files(location)
    loaders = {"sentemb": _load_sentemb, "huggingface": _load_hf, "keras_hub": _load_keras_hub}
    try:
        return loaders[resolved.kind](location, dtype)
    except (ModelLoadError, presets.ModelNotFoundError):
        raise
    except Exception as e:  # keras-hub, safetensors, h5py and tokenizers raise many types
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ModelLoadError(
            f"cannot load the model in {location}: {type(e).__name__}: {first[:300]}"
        ) from e
