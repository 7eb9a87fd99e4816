"""Sentence encoder, its layers (pooling, heads, logit scale, memory queue), model resolution."""

from keras_sentemb.compat import require_tensorflow_backend

require_tensorflow_backend()

from keras_sentemb.models.backbone_adapter import BackboneAdapter  # noqa: E402
from keras_sentemb.models.glow_flow import GlowFlow  # noqa: E402
from keras_sentemb.models.logit_scale import LogitScale  # noqa: E402
from keras_sentemb.models.memory_queue import MemoryQueue  # noqa: E402
from keras_sentemb.models.pooling import SentencePooling, parse_pooling  # noqa: E402
from keras_sentemb.models.post_processing import PostProcessing  # noqa: E402
from keras_sentemb.models.projection_mlp import ProjectionMLP  # noqa: E402
from keras_sentemb.models.sentence_encoder import SentenceEncoder  # noqa: E402
from keras_sentemb.models.whitening import Whitening  # noqa: E402

__all__ = [
    "BackboneAdapter",
    "GlowFlow",
    "LogitScale",
    "MemoryQueue",
    "PostProcessing",
    "ProjectionMLP",
    "SentenceEncoder",
    "SentencePooling",
    "Whitening",
    "parse_pooling",
]
