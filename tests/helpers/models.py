"""Tiny random models and stand-ins for an encoder: fixed seeds, a few dozen words."""

import numpy as np

from tests.conftest import TINY_VOCAB


def make_tiny_roberta():
    """A 2-layer, 16-wide random RoBERTa with a 15-token vocabulary and one merge."""
    import keras
    import keras_hub

    from keras_sentemb.models import SentenceEncoder

    keras.utils.set_random_seed(0)
    vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>", "a", "Ġ", "Ġa", "man",
                                          "Ġman", "cat", "Ġcat", "Ġsits", "hello", "Ġthe", "<mask>"])}
    tokenizer = keras_hub.models.RobertaTokenizer(vocabulary=vocab, merges=["Ġ a"])
    backbone = keras_hub.models.RobertaBackbone(
        vocabulary_size=len(vocab), num_layers=2, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=32,
    )
    return SentenceEncoder(backbone, tokenizer, max_length=32)


def make_still_encoder(num_layers=1, hidden_dim=32):
    """A tiny random BERT without dropout (deterministic gradients)."""
    import keras
    import keras_hub

    from keras_sentemb.models import SentenceEncoder

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(TINY_VOCAB), num_layers=num_layers, num_heads=2,
        hidden_dim=hidden_dim, intermediate_dim=2 * hidden_dim, max_sequence_length=64,
        dropout=0.0,
    )
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=TINY_VOCAB, lowercase=True)
    return SentenceEncoder(backbone, tokenizer, max_length=64)


def make_transformer_layer(normalize_first, width=16):
    """A built keras-hub `TransformerEncoder` layer (2 heads, dropout 0.1), seeded."""
    import keras
    import keras_hub

    keras.utils.set_random_seed(1)
    layer = keras_hub.layers.TransformerEncoder(
        intermediate_dim=2 * width, num_heads=2, dropout=0.1, normalize_first=normalize_first)
    layer.build([None, None, width])
    return layer


def transformer_inputs(width=16, dtype="float32"):
    """`(x, padding)`: 3 random rows of 5 positions, right-padded to lengths 5, 3 and 1."""
    import tensorflow as tf

    x = tf.cast(tf.random.stateless_normal([3, 5, width], [3, 4]), dtype)
    padding = tf.constant([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    return x, padding


def make_whitening(raw):
    """A `Whitening` to 8 dimensions fitted on the vectors `raw`, for mean pooling."""
    from keras_sentemb.models.whitening import Whitening

    return Whitening.from_vectors(raw, dim=8, pooling="mean")


DIM = 64


def bag_of_chars(sentence):
    """Deterministic embedding: character counts hashed into DIM buckets."""
    vector = np.zeros(DIM, dtype=np.float32)
    for ch in sentence:
        vector[ord(ch) % DIM] += 1.0
    return vector


class FakeEncoder:
    """Has SentenceEncoder's `encode` signature; records every call."""

    pooling = "mean"

    def __init__(self):
        self.calls = []
        self.seen = []

    def encode(
        self,
        sentences,
        batch_size=128,
        max_length=None,
        pooling=None,
        normalize=False,
        show_progress=None,
    ):
        assert isinstance(sentences, list)
        self.calls.append(
            {
                "n": len(sentences),
                "batch_size": batch_size,
                "max_length": max_length,
                "pooling": pooling,
            }
        )
        self.seen.extend(sentences)
        if not sentences:
            return np.zeros((0, DIM), dtype=np.float32)
        return np.stack([bag_of_chars(s) for s in sentences])
