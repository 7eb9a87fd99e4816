"""Tiny random encoders for the Hugging Face export tests."""

import keras
import keras_hub

from keras_sentemb.models import SentenceEncoder
from tests.conftest import make_tiny_encoder

# Sentences whose vectors are compared with sentence-transformers / transformers.
SENTS = [
    "a man is playing a guitar .",
    "The woman plays the piano, and the dog runs in the park!",
    "hello world",
    "résumé of a naïve café",
    "中文 the cat sits on the mat",
    "",
]
MERGES = ["Ġ t", "h e", "Ġt he", "Ġ a", "a n", "Ġ m", "Ġm an", "i n", "in g", "Ġ p", "l a",
          "Ġp la", "Ġpla y", "Ġ c", "a t", "Ġc at"]


def byte_alphabet():
    """GPT-2's printable stand-ins for the 256 bytes (what byte-level BPE vocabularies hold)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def make_tiny_roberta(**kwargs):
    """A 2-layer, 16-wide random RoBERTa whose byte-level BPE covers every byte."""
    keras.utils.set_random_seed(0)
    tokens = ["<s>", "<pad>", "</s>", "<unk>"] + byte_alphabet()
    tokens += [m.replace(" ", "") for m in MERGES] + ["<mask>"]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(tokens))}
    tokenizer = keras_hub.models.RobertaTokenizer(vocabulary=vocab, merges=MERGES)
    backbone = keras_hub.models.RobertaBackbone(
        vocabulary_size=len(vocab), num_layers=2, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=32,
    )
    kwargs.setdefault("max_length", 32)
    return SentenceEncoder(backbone, tokenizer, **kwargs)


def make_tiny_bert(**kwargs):
    """The tiny random BERT with Hugging Face's (uncased) text normalization."""
    kwargs.setdefault("text_normalization", "bert_uncased")
    return make_tiny_encoder(**kwargs)
