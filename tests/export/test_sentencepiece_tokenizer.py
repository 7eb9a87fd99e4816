"""XLM-RoBERTa's SentencePiece tokenizer as a Hugging Face tokenizer.json: the same ids as keras-hub's."""

import io

import keras_hub
import pytest

from keras_sentemb.export.hf_tokenizer import SENTENCEPIECE_FILE
from keras_sentemb.export.hf_tokenizer import write_tokenizer_files
from keras_sentemb.export.sentencepiece_proto import SentencePieceProtoError
from keras_sentemb.export.sentencepiece_proto import read_sentencepiece_model
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.models.static_runtime import load_tokenizer
from tests.helpers.corpora import CORPUS
from tests.helpers.keras_hub_starts import MULTITASK_SENTENCES

sentencepiece = pytest.importorskip("sentencepiece")

TEXTS = [
    "A man is playing a guitar.", "  leading, trailing and   repeated  spaces  ",
    "Ünïcödé café naïve façade", "ｆｕｌｌ ｗｉｄｔｈ ＡＢＣ １２３", "日本語のテキスト 🙂🙂 ok",
    "", " ", "zzz qqq xyzzy", "tab\there\nnew line", "ﬁ ligature ½",
] + CORPUS[:40]
# Text that looks like a special token ("<s>") is text to keras-hub; transformers reads it so by
# the `split_special_tokens` the config sets, as for the BERT and RoBERTa files.


def train_proto(model_type="unigram", **layout):
    layout = layout or {"unk_id": 0, "bos_id": 1, "eos_id": 2, "pad_id": -1}
    proto = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter((CORPUS + MULTITASK_SENTENCES) * 3), model_writer=proto,
        vocab_size=300, model_type=model_type, hard_vocab_limit=False, minloglevel=2, **layout)
    return proto.getvalue()


def xlm_roberta_encoder(proto):
    tokenizer = keras_hub.models.XLMRobertaTokenizer(proto=proto)
    backbone = keras_hub.models.XLMRobertaBackbone(
        vocabulary_size=tokenizer.vocabulary_size(), num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=64)
    return SentenceEncoder(backbone, tokenizer, max_length=32)


@pytest.fixture(scope="module")
def proto():
    return train_proto()


def test_the_model_is_read_as_sentencepiece_reads_it(proto):
    model = read_sentencepiece_model(proto)
    processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
    assert len(model.pieces) == processor.get_piece_size()
    for i, (text, score, _) in enumerate(model.pieces):
        assert text == processor.id_to_piece(i)
        assert score == pytest.approx(processor.get_score(i), abs=1e-6)
    assert model.model_type == "unigram" and model.normalizer == "nmt_nfkc"
    assert model.precompiled_charsmap and model.add_dummy_prefix and model.remove_extra_whitespaces
    assert read_sentencepiece_model(train_proto("word")).model_type == "word"


def test_the_tokenizer_json_gives_keras_hubs_ids(proto, tmp_path):
    encoder = xlm_roberta_encoder(proto)
    written = write_tokenizer_files(encoder, tmp_path)
    assert written[0] == SENTENCEPIECE_FILE
    assert (tmp_path / SENTENCEPIECE_FILE).read_bytes() == proto
    fast = load_tokenizer(tmp_path / "tokenizer.json")
    assert fast.get_vocab_size() == encoder.tokenizer.vocabulary_size()
    for text in TEXTS:
        ids = encoder.tokenize([text]).to_list()[0]  # the TensorFlow path training uses
        assert [int(i) for i in encoder.tokenizer(text)] == ids  # keras-hub's own
        assert fast.encode(text, add_special_tokens=False).ids == ids, text
        assert fast.encode(text).ids == [0, *ids, 2]
    assert fast.token_to_id("<mask>") == encoder.tokenizer.vocabulary_size() - 1
    assert fast.token_to_id("<pad>") == 1


def test_what_keras_hub_would_misread_is_refused_in_one_line(tmp_path):
    word = xlm_roberta_encoder(train_proto("word"))
    with pytest.raises(ValueError, match="^Only a unigram SentencePiece model .* word model"):
        write_tokenizer_files(word, tmp_path)
    other_layout = xlm_roberta_encoder(train_proto(
        "unigram", pad_id=0, unk_id=1, bos_id=2, eos_id=3))
    with pytest.raises(ValueError, match="does not start with <unk> <s> </s>"):
        write_tokenizer_files(other_layout, tmp_path)
    for junk in (b"", b"\x0a\xff\xff\xff", b"\x0f"):
        with pytest.raises(SentencePieceProtoError):
            read_sentencepiece_model(junk)
