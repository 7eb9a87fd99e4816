"""keras-hub's own models as a starting point: a `TextEmbedder`, another task, or a `Backbone`.

keras-hub's `TextEmbedder` (`BertTextEmbedder`, `XLMRobertaTextEmbedder`)
is a backbone, a preprocessor (tokenizer and sequence length) and a pooling
(`pooling_mode`: `"mean"`, `"cls"` or `"max"`) with an optional L2
normalisation. `encoder_from_keras_hub` turns one into a `SentenceEncoder`
with the same pooling, normalisation and token limit, so that every `fit_*`,
`SentenceEncoder.from_preset` and the evaluation helpers take it as `model`.
A keras-hub task with a preprocessor (a `TextClassifier`, a `MaskedLM`)
gives its backbone and tokenizer; a bare `Backbone` carries no tokenizer and
comes as a `(backbone, tokenizer)` pair.

The encoder gets a copy of the backbone (its own variables, the same
values): the caller's object is never trained or changed. A `TextEmbedder`
preset folder (what `save_to_preset` writes: `task.json`,
`preprocessor.json`, the backbone's `config.json` and weights) loads with
`SentenceEncoder.from_preset(folder)`; `task_settings` reads its pooling,
normalisation and sequence length.
"""

import keras
import keras_hub

from keras_sentemb import compat
from keras_sentemb.kernels.deferred_init import initializers_deferred

# The poolings a keras-hub TextEmbedder computes (its `pooling_mode`).
TEXT_EMBEDDER_POOLINGS = ("mean", "cls", "max")
TASK_FILE = "task.json"
PREPROCESSOR_FILE = "preprocessor.json"


def _families():
    return (keras_hub.models.BertBackbone, keras_hub.models.RobertaBackbone)


def is_keras_hub_model(model):
    """Whether `model` is a keras-hub task or backbone object, or a `(backbone, tokenizer)` pair."""
    if isinstance(model, (keras_hub.models.Task, keras_hub.models.Backbone)):
        return True
    return (
        isinstance(model, tuple)
        and len(model) == 2
        and isinstance(model[0], keras_hub.models.Backbone)
    )


def _parts(model):
    """`(backbone, tokenizer, settings, what)` of a keras-hub object (see `is_keras_hub_model`)."""
    settings = {}
    if isinstance(model, tuple):
        backbone, tokenizer = model
        if not isinstance(tokenizer, keras_hub.tokenizers.Tokenizer):
            raise TypeError(
                "A (backbone, tokenizer) pair needs a keras-hub tokenizer second; received "
                f"{type(tokenizer).__name__}."
            )
        return backbone, tokenizer, settings, type(backbone).__name__
    what = type(model).__name__
    if isinstance(model, keras_hub.models.Backbone):
        raise TypeError(
            f"A keras-hub {what} carries no tokenizer: pass `(backbone, tokenizer)` (e.g. "
            f"`(backbone, keras_hub.models.Tokenizer.from_preset(PRESET))`), a TextEmbedder "
            "or a model folder."
        )
    preprocessor = model.preprocessor
    tokenizer = getattr(preprocessor, "tokenizer", None)
    if tokenizer is None:
        raise ValueError(
            f"This {what} has no preprocessor (built with preprocessor=None), so no tokenizer "
            "to encode text with: build it with its preprocessor, or pass "
            "`(embedder.backbone, tokenizer)`."
        )
    if isinstance(model, keras_hub.models.TextEmbedder):
        pooling = getattr(model, "pooling_mode", "mean")
        if pooling not in TEXT_EMBEDDER_POOLINGS:
            raise ValueError(f"{what} has pooling_mode={pooling!r}; expected one of "
                             f"{TEXT_EMBEDDER_POOLINGS}.")
        settings["pooling"] = pooling
        settings["normalize"] = bool(getattr(model, "normalize", True))
    length = getattr(preprocessor, "sequence_length", None)
    if length is not None:
        settings["max_length"] = int(length)
    return model.backbone, tokenizer, settings, what


def _check_family(backbone, what):
    if not isinstance(backbone, _families()):
        raise ValueError(
            f"keras_sentemb trains and encodes with keras-hub BERT and RoBERTa backbones "
            f"(BertTextEmbedder, XLMRobertaTextEmbedder, BertBackbone, RobertaBackbone, "
            f"XLMRobertaBackbone); {what} has a {type(backbone).__name__}."
        )


def copy_backbone(backbone, dtype=None):
    """A new backbone of the same class and config (`dtype` if given) holding the same weights."""
    config = backbone.get_config()
    if dtype is not None:
        config["dtype"] = dtype
    with initializers_deferred():  # every weight is set next: no random draws first
        copy = type(backbone).from_config(config)
    copy.set_weights(backbone.get_weights())
    return copy


def keras_hub_components(model, dtype=None):
    """`(backbone, tokenizer, settings)` for a `SentenceEncoder` from a keras-hub object.

    Args:
        model: a keras-hub `TextEmbedder` (or another task with a
            preprocessor), or a `(Backbone, Tokenizer)` pair.
        dtype: str or None. The copy's dtype policy. Defaults to the
            object's.

    Returns:
        A copy of the backbone, the tokenizer (shared: it has no weights) and
        the settings the object declares (`pooling`, `normalize` for a
        `TextEmbedder`; `max_length` from its preprocessor, capped at the
        backbone's positions).
    """
    backbone, tokenizer, settings, what = _parts(model)
    _check_family(backbone, what)
    if "max_length" in settings:
        settings["max_length"] = min(settings["max_length"], int(backbone.max_sequence_length))
    else:
        settings["max_length"] = min(512, int(backbone.max_sequence_length))
    return copy_backbone(backbone, dtype), tokenizer, settings


def renew_sentencepiece(encoder):
    """Give `encoder`'s SentencePiece tokenizer a new TensorFlow resource; other tokenizers pass.

    tensorflow-text keeps a SentencePiece model in a resource that belongs to
    the kernel which made it, and `tf.random.set_seed` (which
    `keras.utils.set_random_seed`, and so every seeded training run, calls)
    clears TensorFlow's eager kernel cache: a tokenizer made before the seed
    then fails in the run's `tf.data` map ("Resource ...
    SentencepieceResource does not exist"). Reading the model proto again
    makes a new resource; the encoder's traced tokenizer graph, which holds
    the old one, is dropped. The tokenizer object is the same (shared with the
    keras-hub object it came from, which it repairs too).
    """
    tokenizer = getattr(encoder, "tokenizer", None)
    if (isinstance(tokenizer, keras_hub.tokenizers.SentencePieceTokenizer)
            and isinstance(getattr(tokenizer, "proto", None), bytes)):
        tokenizer.set_proto(tokenizer.proto)
        if hasattr(encoder, "_tokenize_graph"):
            encoder._tokenize_graph = None


def task_settings(handle):
    """The pooling, normalisation and sequence length a keras-hub preset's `TextEmbedder` declares.

    Reads `task.json` (a `TextEmbedder` subclass: `pooling_mode`,
    `normalize`) and `preprocessor.json` (`sequence_length`) of a preset
    folder or handle; `{}` for a preset without a `TextEmbedder` task (a
    bare backbone, a classifier), which then declares no pooling.
    """
    settings = {}
    task = compat.preset_json(handle, TASK_FILE)
    if task is not None:
        cls = keras.saving.get_registered_object(task.get("registered_name", ""))
        if isinstance(cls, type) and issubclass(cls, keras_hub.models.TextEmbedder):
            config = task.get("config", {})
            pooling = config.get("pooling_mode", "mean")
            if pooling not in TEXT_EMBEDDER_POOLINGS:
                raise ValueError(f"{handle}: {TASK_FILE} declares pooling_mode={pooling!r}; "
                                 f"expected one of {TEXT_EMBEDDER_POOLINGS}.")
            settings["pooling"] = pooling
            settings["normalize"] = bool(config.get("normalize", True))
            length = config.get("preprocessor", {}).get("config", {}).get("sequence_length")
            if length is not None:
                settings["max_length"] = int(length)
    if "pooling" in settings and "max_length" not in settings:
        preprocessor = compat.preset_json(handle, PREPROCESSOR_FILE)
        length = (preprocessor or {}).get("config", {}).get("sequence_length")
        if length is not None:
            settings["max_length"] = int(length)
    return settings
