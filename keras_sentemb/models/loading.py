"""Loading backbones, tokenizers and settings from each kind of model source."""

import dataclasses
import logging
from pathlib import Path

import numpy as np

from keras_sentemb.models import presets

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Components:
    backbone: object
    tokenizer: object
    settings: dict
    projection_weights: list = None


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
            if module.get("type", "").endswith("models.Dense"):
                logger.warning(
                    "%s has a sentence-transformers Dense module (%s); it is "
                    "not loaded, the encoder outputs the pooled vector.",
                    folder,
                    module.get("path"),
                )
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


def _load_hf(folder, dtype):
    import keras_hub

    config = presets.read_json(Path(folder) / "config.json")
    backbone = keras_hub.models.Backbone.from_preset(folder, dtype=dtype)
    settings = _sentence_transformers_settings(folder)
    if config["model_type"] == "bert":
        settings["text_normalization"] = _hf_bert_normalization(folder)
        tokenizer = keras_hub.models.BertTokenizer(
            vocabulary=str(Path(folder) / "vocab.txt"),
            lowercase=False,
            strip_accents=False,
        )
    else:
        tokenizer = keras_hub.models.Tokenizer.from_preset(folder)
    settings.setdefault(
        "max_length", min(512, int(config.get("max_position_embeddings", 512)))
    )
    if config["model_type"] != "bert":
        # RoBERTa reserves two position rows; keras-hub drops them on load.
        settings["max_length"] = min(
            settings["max_length"], int(backbone.max_sequence_length)
        )
    return Components(backbone, tokenizer, settings)


def _load_keras_hub(handle, dtype):
    import keras_hub

    backbone = keras_hub.models.Backbone.from_preset(handle, dtype=dtype)
    tokenizer = keras_hub.models.Tokenizer.from_preset(handle)
    settings = {"max_length": min(512, int(backbone.max_sequence_length))}
    return Components(backbone, tokenizer, settings)


def _load_sentemb(folder, dtype):
    folder = Path(folder)
    parts = _load_keras_hub(str(folder), dtype)
    stored = presets.read_json(folder / presets.SENTEMB_CONFIG)
    version = stored.pop("format_version", 1)
    if version > 1:
        raise ValueError(
            f"{folder} was written by a newer keras_sentemb (format "
            f"{version}); this version reads format 1."
        )
    parts.settings.update(stored)
    weights_file = folder / "sentemb_projection.npz"
    if stored.get("projection_dim") is not None:
        if not weights_file.is_file():
            raise ValueError(f"{folder} declares a projection head but has no {weights_file.name}.")
        with np.load(weights_file) as data:
            parts.projection_weights = [data["kernel"], data["bias"]]
    return parts


def load_components(resolved, dtype=None):
    """Load backbone, tokenizer and stored settings for a `ResolvedModel`."""
    if resolved.kind == "sentemb":
        return _load_sentemb(resolved.location, dtype)
    if resolved.kind == "huggingface":
        return _load_hf(resolved.location, dtype)
    return _load_keras_hub(resolved.location, dtype)
