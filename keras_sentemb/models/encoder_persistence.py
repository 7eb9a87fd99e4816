"""How a `SentenceEncoder` is configured, saved, loaded and copied.

`EncoderPersistence` is the part of `SentenceEncoder` that deals with
folders and configs: `save` writes a keras_sentemb model folder atomically
(the backbone and tokenizer as keras-hub presets, the projection and
post-processing weights, the training report and the model card),
`from_preset` resolves a preset name, a Hugging Face / sentence-transformers
folder or a keras_sentemb folder, and `clone` copies an encoder (e.g. to
compute in another precision).
"""

import json
import os

import keras
import numpy as np

from keras_sentemb.io_utils import atomic_folder
from keras_sentemb.io_utils import check_room
from keras_sentemb.io_utils import h5_weights_size
from keras_sentemb.model_card import build_model_card
from keras_sentemb.model_card import read_model_card
from keras_sentemb.model_card import write_model_card
from keras_sentemb.models import presets
from keras_sentemb.models import static_runtime
from keras_sentemb.models.backbone_adapter import truncate_backbone
from keras_sentemb.models.keras_hub_models import is_keras_hub_model
from keras_sentemb.models.keras_hub_models import keras_hub_components
from keras_sentemb.models.loading import Components
from keras_sentemb.models.loading import POSTPROCESS_FORMAT_VERSION
from keras_sentemb.models.loading import POSTPROCESS_WEIGHTS
from keras_sentemb.models.loading import PROMPT_FORMAT_VERSION
from keras_sentemb.models.loading import load_components
from keras_sentemb.models.loading import register_serializable_classes

FORMAT_VERSION = 1
PROJECTION_WEIGHTS = "sentemb_projection.npz"
TRAINING_REPORT = "training_report.json"


class EncoderPersistence:
    """Config, save, load and copy for `SentenceEncoder` (a mixin)."""

    # ----------------------------------------------------------- save / load
    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "backbone": keras.saving.serialize_keras_object(self.backbone),
                "tokenizer": keras.saving.serialize_keras_object(self.tokenizer),
                **self._encoding_settings(),
                "postprocess": (
                    None if self.postprocess is None
                    else keras.saving.serialize_keras_object(self.postprocess)
                ),
                "kernels": self.kernels.to_config(),
            }
        )
        return config

    def _encoding_settings(self):
        """The constructor settings that shape how the encoder encodes."""
        return {
            "pooling": self.declared_pooling,
            "normalize": self.normalize,
            "max_length": self.max_length,
            "projection_dim": self.projection_dim,
            "projection_activation": self.projection_activation,
            "text_normalization": self.text_normalization,
            "feedforward_gelu": self.feedforward_gelu,
            "prompt": self.prompt_template,
        }

    @classmethod
    def from_config(cls, config):
        register_serializable_classes()  # the post-processing layer's class, for one
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        config["tokenizer"] = keras.saving.deserialize_keras_object(config["tokenizer"])
        return cls(**config)

    def sentemb_config(self):
        """The settings written to `sentemb_config.json` by `save`."""
        config = {"format_version": FORMAT_VERSION, **self._encoding_settings()}
        if config["feedforward_gelu"] is None:  # older readers never see the key for the default
            del config["feedforward_gelu"]
        if not self.kernels.is_auto:  # older readers never see the key for the default
            config["kernels"] = self.kernels.to_config()
        if self.postprocess is not None:
            config["format_version"] = POSTPROCESS_FORMAT_VERSION
            config["postprocess"] = keras.saving.serialize_keras_object(self.postprocess)
        if config["prompt"] is None:  # older readers never see the key for the default
            del config["prompt"]
        else:
            config["format_version"] = PROMPT_FORMAT_VERSION
        return config

    def save(self, filepath, overwrite=True, **kwargs):
        """Save to a folder (a keras-hub preset plus `sentemb_config.json`).

        The folder is written under a temporary sibling and renamed into
        place when complete (`keras_sentemb.io_utils.atomic_folder`): a crash
        or a full disk never leaves a half-written model, and an earlier
        model at `filepath` is replaced only by a complete new one. A folder
        holding anything but a model is refused. A path ending in `.keras`
        is saved as a single Keras archive instead (`keras.saving.load_model`
        reads it back, `safe_mode=True` included). A folder also gets the
        model card (`model_card.json`, `MODEL_CARD.md`; see
        `keras_sentemb.model_card`).

        Args:
            filepath: str or path. The folder (created if needed) or a
                `.keras` file.
            overwrite: bool. Replace an existing model. Defaults to `True`.
        """

        filepath = os.fspath(filepath)
        if filepath.endswith(".keras"):
            return super().save(filepath, overwrite=overwrite, **kwargs)
        with atomic_folder(filepath, overwrite=overwrite) as folder:
            # A clean error instead of h5py's crash when the weights cannot fit.
            check_room(folder / "model.weights.h5", h5_weights_size(self.backbone.weights))
            self.backbone.save_to_preset(str(folder))
            self.tokenizer.save_to_preset(str(folder))
            if self.projection is not None:
                kernel, bias = (np.asarray(w) for w in self.projection.get_weights())
                np.savez(folder / PROJECTION_WEIGHTS, kernel=kernel, bias=bias)
            if self.postprocess is not None:
                weights = self.postprocess.get_weights()
                np.savez(folder / POSTPROCESS_WEIGHTS,
                         **{f"w{i}": np.asarray(w) for i, w in enumerate(weights)})
            if self.training_report is not None:
                with open(folder / TRAINING_REPORT, "w", encoding="utf-8") as f:
                    json.dump(self.training_report.to_dict(), f, indent=2)
            write_model_card(folder, build_model_card(self))
            with open(folder / presets.SENTEMB_CONFIG, "w", encoding="utf-8") as f:
                json.dump(self.sentemb_config(), f, indent=2)
        return filepath

    @classmethod
    def from_preset(
        cls,
        preset="default",
        pooling=None,
        normalize=None,
        max_length=None,
        dtype=None,
        num_layers=None,
        kernels=None,
        **kwargs,
    ):
        """Load an encoder from `"default"`, a folder, or a keras-hub preset.

        Settings are taken, in order of precedence, from the arguments, the
        folder's `sentemb_config.json` (keras_sentemb folders) or its
        sentence-transformers config files (`1_Pooling/config.json`,
        `modules.json`, `sentence_bert_config.json`), else mean pooling, no
        normalisation and the backbone's maximum length (capped at 512).

        A keras-hub `TextEmbedder` (object, preset folder or handle) keeps
        its pooling (`pooling_mode`), normalisation and sequence length; an
        object is copied, never changed (`keras_sentemb.models.keras_hub_models`).

        Args:
            preset: str, path or keras-hub object. `"default"` (the bundled
                all-MiniLM-L6-v2), a folder written by `save`, a Hugging Face /
                sentence-transformers folder, a keras-hub preset name, handle
                or folder (a `TextEmbedder` preset included), or a keras-hub
                `TextEmbedder` (or other task with a preprocessor) or
                `(Backbone, Tokenizer)` pair.
            pooling: str or None. Overrides the stored pooling.
            normalize: bool or None. Overrides the stored normalisation.
            max_length: int or None. Overrides the stored maximum length.
            dtype: str or None. The backbone's dtype policy.
            num_layers: int or None. Keep only the first `num_layers`
                Transformer layers (a smaller, faster encoder; see
                `truncate_backbone`). Defaults to all.
            kernels: a `KernelPolicy`, `"auto"`, `"fused"`, `"plain"` or a
                dict op -> choice (see `SentenceEncoder`). Overrides the
                stored policy. Defaults to the stored one, else `"auto"`.

        Returns:
            A `SentenceEncoder` (a `StaticEncoder` for a static folder).
        """
        resolved = None
        if is_keras_hub_model(preset):  # a TextEmbedder, another task, or (backbone, tokenizer)
            parts = Components(*keras_hub_components(preset, dtype=dtype))
        elif static_runtime.is_static_folder(preset):  # `keras-sentemb train static`'s output
            from keras_sentemb.models.static_encoder import StaticEncoder

            return StaticEncoder.from_preset(preset, normalize=normalize, max_length=max_length)
        else:
            resolved = presets.resolve_model(preset)
            parts = load_components(resolved, dtype=dtype)
        if num_layers is not None:
            parts.backbone = truncate_backbone(parts.backbone, num_layers)
        settings = parts.settings
        for name, value in (
            ("pooling", pooling),
            ("normalize", normalize),
            ("max_length", max_length),
            ("kernels", kernels),
        ):
            if value is not None:
                settings[name] = value
        if parts.postprocess is not None:
            kwargs.setdefault("postprocess", parts.postprocess)
        encoder = cls(parts.backbone, parts.tokenizer, **settings, **kwargs)
        if parts.projection_weights is not None:
            encoder.projection.set_weights(parts.projection_weights)
        if resolved is not None and resolved.kind == "sentemb":
            encoder.model_card = read_model_card(resolved.location)
        return encoder

    def clone(self, name=None, dtype=None, backbone=None, tokenizer=None):
        """An independent copy with identical weights (e.g. for CT's towers).

        The backbone and head are rebuilt from their configs and given copies
        of the weights; the tokenizer (which has no weights) is shared.

        Args:
            name: str or None. The copy's name. Defaults to `"<name>_copy"`.
            dtype: str or None. A Keras dtype policy for the copy (e.g.
                `"mixed_bfloat16"`, `"float32"`). Defaults to this encoder's.
            backbone: a keras-hub backbone or None. Used instead of a copy of
                this one (e.g. one with a grown vocabulary, see
                `add_vocabulary`); settings and head are copied as usual.
            tokenizer: a keras-hub tokenizer or None. Used instead of this
                one's.
        """
        if backbone is None:
            config = self.backbone.get_config()
            if dtype is not None:
                config["dtype"] = dtype
            backbone = type(self.backbone).from_config(config)
            backbone.set_weights(self.backbone.get_weights())
        elif dtype is not None:
            raise ValueError("Pass either `backbone` or `dtype` to `clone`, not both.")
        copy = type(self)(
            backbone,
            self.tokenizer if tokenizer is None else tokenizer,
            pooling=self.declared_pooling,
            normalize=self.normalize,
            max_length=self.max_length,
            projection_dim=self.projection_dim,
            projection_activation=self.projection_activation,
            text_normalization=self.text_normalization,
            kernels=self.kernels,
            feedforward_gelu=self.feedforward_gelu,
            prompt=self.prompt_template,
            name=name or f"{self.name}_copy",
        )
        if self.projection is not None:
            copy.projection.set_weights(self.projection.get_weights())
        copy.model_card = self.model_card
        if self.postprocess is not None:
            layer = keras.saving.deserialize_keras_object(
                keras.saving.serialize_keras_object(self.postprocess)
            )
            if not layer.built:
                layer.build((None, layer.input_dim))
            layer.set_weights(self.postprocess.get_weights())
            copy.postprocess = layer
        return copy
