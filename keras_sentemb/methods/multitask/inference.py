"""What a trained `MultitaskModel` does: predict, save and load its heads.

`MultitaskInference` is the part of `MultitaskModel` used after training:
the dev-selection surface, the three task predictions on raw sentences,
the config and the heads' files beside the saved encoder.
"""

import json
import os
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_sentemb.data.multitask import STSB_TEST_LEAKAGE_WARNING
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.models.folder_inspection import LIMITS
from keras_sentemb.models.folder_inspection import UnsafeFolderError
from keras_sentemb.models.folder_inspection import check_npz
from keras_sentemb.models.folder_inspection import read_json

HEADS_FILE = "multitask_heads.npz"
CONFIG_FILE = "multitask_config.json"
LEAKAGE_FILE = "LEAKAGE_WARNING.txt"


# The keys of CONFIG_FILE (`MultitaskInference.head_config`).
HEAD_CONFIG_KEYS = ("head_sharing", "hidden_dim", "dropout", "num_classes", "pooling",
                    "head_style")


def _read_head_config(path):
    """The heads' config: a JSON object of `HEAD_CONFIG_KEYS` with plain values, sizes bounded."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: not a folder written by fit_multitask.")
    config = read_json(path)
    if not isinstance(config, dict):
        raise UnsafeFolderError(f"{path} is not a JSON object of the heads' settings.")
    unknown = sorted(set(config) - set(HEAD_CONFIG_KEYS))
    if unknown:
        raise UnsafeFolderError(f"{path}: unknown setting(s) {', '.join(map(repr, unknown))}; "
                                f"the heads take {', '.join(HEAD_CONFIG_KEYS)}.")
    for key, value in config.items():
        if not isinstance(value, (str, int, float, bool, type(None))):
            raise UnsafeFolderError(f"{path}: {key} must be a plain value; received "
                                    f"{type(value).__name__}.")
    for key in ("hidden_dim", "num_classes"):
        value = config.get(key)
        if isinstance(value, int) and value > LIMITS["width"]:
            raise UnsafeFolderError(f"{path}: {key}={value:,} (more than {LIMITS['width']:,}); "
                                    "no real model has that, so it is refused before anything "
                                    "is loaded.")
    return config


class MultitaskInference:
    """Prediction, config and persistence for `MultitaskModel` (a mixin)."""

    # ------------------------------------------------------- dev selection
    def candidates(self):
        """The whole model (encoder and heads) is the one candidate."""
        return {"model": self}

    def select(self, name):
        """Nothing to choose: the kept encoder is always `self.encoder`."""
        if name not in self.candidates():
            raise ValueError(f"Unknown candidate {name!r}; expected 'model'.")

    # ----------------------------------------------------------- prediction
    def encode(self, sentences, batch_size=128, max_length=None, pooling=None,
               normalize=False, show_progress=None):
        """`SentenceEncoder.encode` with the heads' pooling (by default)."""
        return self.encoder.encode(
            sentences, batch_size=batch_size, max_length=max_length,
            pooling=self.pooling if pooling is None else pooling,
            normalize=normalize, show_progress=show_progress,
        )

    def _embed(self, sentences, batch_size, max_length):
        return self.encode(
            list(sentences), batch_size=batch_size, max_length=max_length, show_progress=False
        )

    def predict_sentiment(self, sentences, batch_size=128, max_length=None,
                          return_probabilities=False):
        """Sentiment class ids (0 = very negative .. 4 = very positive).

        Args:
            sentences: list of str.
            batch_size: int. Defaults to `128`.
            max_length: int or None. Defaults to the encoder's.
            return_probabilities: bool. Return `[n, num_classes]` softmax
                probabilities instead. Defaults to `False`.
        """
        emb = self._embed(sentences, batch_size, max_length)
        probs = tf.nn.softmax(self.sentiment_logits(emb)).numpy()
        return probs if return_probabilities else probs.argmax(-1)

    def _pair_embeddings(self, sentences1, sentences2, batch_size, max_length):
        if len(sentences1) != len(sentences2):
            raise ValueError(
                "`sentences1` and `sentences2` must have the same length. "
                f"Received: {len(sentences1)} and {len(sentences2)}."
            )
        emb = self._embed(list(sentences1) + list(sentences2), batch_size, max_length)
        return emb[: len(sentences1)], emb[len(sentences1):]

    def predict_paraphrase(self, sentences1, sentences2, batch_size=128, max_length=None):
        """Probability that each pair is a paraphrase, float32 `[n]`."""
        u, v = self._pair_embeddings(sentences1, sentences2, batch_size, max_length)
        return tf.sigmoid(self.paraphrase_logits(u, v)).numpy()

    def predict_similarity(self, sentences1, sentences2, batch_size=128, max_length=None):
        """Similarity scores on the STS 0-5 scale (`5 * cosine`), float32 `[n]`."""
        u, v = self._pair_embeddings(sentences1, sentences2, batch_size, max_length)
        return 5.0 * self.similarity_cosine(u, v).numpy()

    @property
    def training_report(self):
        """The kept encoder's `TrainingReport` (set by `fit_multitask`), or None."""
        return self.encoder.training_report

    # --------------------------------------------------------------- config
    def head_config(self):
        """The constructor arguments that shape the heads (saved with them)."""
        return {
            "head_sharing": self.head_sharing,
            "hidden_dim": self.hidden_dim,
            "dropout": self.dropout_rate,
            "num_classes": self.num_classes,
            "pooling": self.pooling,
            "head_style": self.head_style,
        }

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_classes": self.num_classes,
                "pooling": self.pooling,
                "pcgrad": self.pcgrad,
                "pcgrad_shuffle": self.pcgrad_shuffle,
                "fusion_temperature": self.fusion_temperature,
                "seed": self.seed,
            }
        )
        return config

    def save_heads(self, folder):
        """Write the heads (`multitask_heads.npz`), their config and the leakage note."""
        folder = Path(os.fspath(folder))
        folder.mkdir(parents=True, exist_ok=True)
        np.savez(
            folder / HEADS_FILE,
            **{f"w{i}": np.asarray(v) for i, v in enumerate(self.head_variables())},
        )
        with open(folder / CONFIG_FILE, "w", encoding="utf-8") as f:
            json.dump(self.head_config(), f, indent=2)
        with open(folder / LEAKAGE_FILE, "w", encoding="utf-8") as f:
            f.write(STSB_TEST_LEAKAGE_WARNING + "\n")
        return str(folder)

    def save_to_folder(self, folder):
        """Save the encoder (`SentenceEncoder.save`) and the heads to `folder`.

        The folder loads as a plain encoder with `SentenceEncoder.from_preset`
        and as the full model with `MultitaskModel.load_from_folder`.
        """
        self.encoder.save(folder)
        return self.save_heads(folder)

    @classmethod
    def load_from_folder(cls, folder):
        """Load a model written by `save_to_folder` (or `fit_multitask`).

        The folder is checked as every model folder is (`folder_inspection`),
        and its heads' config may hold only the keys `save_heads` writes, with
        plain values, and sizes within `folder_inspection.LIMITS`.
        """
        folder = Path(os.fspath(folder))
        config = _read_head_config(folder / CONFIG_FILE)
        check_npz(folder / HEADS_FILE)  # arrays only, never a pickle
        model = cls(SentenceEncoder.from_preset(str(folder)), **config)
        with np.load(folder / HEADS_FILE) as weights:
            variables = model.head_variables()
            if len(weights.files) != len(variables):
                raise ValueError(
                    f"{folder / HEADS_FILE} holds {len(weights.files)} head weights; "
                    f"the configuration {config} has {len(variables)}."
                )
            for i, v in enumerate(variables):
                v.assign(weights[f"w{i}"])
        return model

