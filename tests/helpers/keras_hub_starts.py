"""Tiny random keras-hub starting points: a `BertTextEmbedder`, a RoBERTa pair, an `XLMRobertaTextEmbedder`.

Each is what a keras-hub user holds before training here (a task object, or
a `(Backbone, Tokenizer)` pair: keras-hub has no RoBERTa `TextEmbedder`),
with a few dozen words of vocabulary, 2 layers and width 16 or 32.
"""

import io

from tests.conftest import TINY_VOCAB
from tests.helpers.corpora import MULTITASK_SENTENCES

# The keras-hub starts each test runs, by family.
FAMILIES = ("bert", "roberta", "xlm_roberta")


def make_bert_text_embedder(pooling_mode="mean", normalize=True, sequence_length=32):
    """A 2-layer, 32-wide random `BertTextEmbedder` over `TINY_VOCAB`."""
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(TINY_VOCAB), num_layers=2, num_heads=2, hidden_dim=32,
        intermediate_dim=64, max_sequence_length=64,
    )
    tokenizer = keras_hub.models.BertTokenizer(vocabulary=TINY_VOCAB, lowercase=True,
                                               strip_accents=True)
    preprocessor = keras_hub.models.BertTextEmbedderPreprocessor(
        tokenizer, sequence_length=sequence_length)
    return keras_hub.models.BertTextEmbedder(
        backbone, preprocessor, pooling_mode=pooling_mode, normalize=normalize)


def tiny_sentencepiece_proto(vocab_size=60):
    """A serialized unigram SentencePiece model trained on the test sentences, in XLM-R's layout.

    `<unk> <s> </s>` are its ids 0-2 and it has no padding piece, as XLM-R's own model, which
    keras-hub's `XLMRobertaTokenizer` assumes (it adds `<pad>` and `<mask>` itself).
    """
    import sentencepiece

    sentences = MULTITASK_SENTENCES + ["hello world", "and the mat", "a b c d e x y z"]
    proto = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences * 4), model_writer=proto, vocab_size=vocab_size,
        model_type="unigram", unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        hard_vocab_limit=False, minloglevel=2,
    )
    return proto.getvalue()


def make_xlm_roberta_text_embedder(pooling_mode="mean", normalize=True, sequence_length=32):
    """A 2-layer, 16-wide random `XLMRobertaTextEmbedder` with a tiny SentencePiece vocabulary."""
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    tokenizer = keras_hub.models.XLMRobertaTokenizer(proto=tiny_sentencepiece_proto())
    backbone = keras_hub.models.XLMRobertaBackbone(
        vocabulary_size=tokenizer.vocabulary_size(), num_layers=2, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=64,
    )
    preprocessor = keras_hub.models.XLMRobertaTextEmbedderPreprocessor(
        tokenizer, sequence_length=sequence_length)
    return keras_hub.models.XLMRobertaTextEmbedder(
        backbone, preprocessor, pooling_mode=pooling_mode, normalize=normalize)


def make_roberta_pair():
    """`(RobertaBackbone, RobertaTokenizer)`: 2 layers, width 16, a byte-level BPE over the test words."""
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    words = sorted({w for s in MULTITASK_SENTENCES for w in s.split()} | {"and", "x", "y"})
    # Every character a test sentence holds, alone and after a space: byte-level BPE has no
    # unknown token (a real vocabulary holds all 256 bytes).
    chars = "abcdefghijklmnopqrstuvwxyz0123456789.,!?'"
    tokens = ["<s>", "<pad>", "</s>", "<unk>", "Ġ", *chars, *("Ġ" + c for c in chars)]
    merges = [f"Ġ {c}" for c in chars]
    for word in words + ["Ġ" + w for w in words]:  # each word merged from its characters
        for i, ch in enumerate(word):
            if ch not in tokens:
                tokens.append(ch)
            if i and word[:i + 1] not in tokens:
                merges.append(f"{word[:i]} {ch}")
                tokens.append(word[:i + 1])
    vocabulary = {t: i for i, t in enumerate(tokens + ["<mask>"])}
    tokenizer = keras_hub.models.RobertaTokenizer(vocabulary=vocabulary, merges=merges)
    backbone = keras_hub.models.RobertaBackbone(
        vocabulary_size=len(vocabulary), num_layers=2, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=64,
    )
    return backbone, tokenizer


def make_start(family):
    """The keras-hub object a test trains from, for `family` in `FAMILIES`."""
    return {"bert": make_bert_text_embedder, "roberta": make_roberta_pair,
            "xlm_roberta": make_xlm_roberta_text_embedder}[family]()
