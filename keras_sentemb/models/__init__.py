"""Sentence encoder, pooling layers and model resolution."""

from keras_sentemb.compat import require_tensorflow_backend

require_tensorflow_backend()

from keras_sentemb.models.pooling import SentencePooling, parse_pooling
from keras_sentemb.models.sentence_encoder import SentenceEncoder

__all__ = ["SentenceEncoder", "SentencePooling", "parse_pooling"]
