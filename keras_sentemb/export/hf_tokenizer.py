"""An encoder's keras-hub tokenizer as Hugging Face tokenizer files.

BERT (WordPiece): `vocab.txt`; RoBERTa (byte-level BPE): `vocab.json` and
`merges.txt`. Both get `tokenizer_config.json` (the slow tokenizer's
arguments: lower-casing, accent stripping, `model_max_length`),
`special_tokens_map.json` and `tokenizer.json`, the fast tokenizer built
with the `tokenizers` library (BERT's normalizer and pre-tokenizer, or
RoBERTa's byte-level pre-tokenizer, with `[CLS] ... [SEP]` / `<s> ... </s>`
templates), as `save_pretrained` writes them.

Text that looks like a special token (a user typing "[CLS]" or "<s>") is
text here, as in keras-hub; `split_special_tokens` in the config makes
transformers tokenize it the same way.
"""

import json

import keras_hub
from tokenizers import AddedToken
from tokenizers import Regex
from tokenizers import Tokenizer
from tokenizers import decoders
from tokenizers import models
from tokenizers import normalizers
from tokenizers import pre_tokenizers
from tokenizers import processors

from keras_sentemb.export.sentencepiece_proto import read_sentencepiece_model
from keras_sentemb.models.backbone_adapter import BackboneAdapter

# The SentencePiece model beside the tokenizer.json, under the name transformers' slow
# XLMRobertaTokenizer reads.
SENTENCEPIECE_FILE = "sentencepiece.bpe.model"


def _write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")


def bert_casing(encoder):
    """`(do_lower_case, strip_accents)` that reproduce the encoder's text normalization.

    An encoder loaded from a Hugging Face folder lower-cases and strips
    accents together (uncased) or does neither (cased), as
    `text_normalization` says. A keras-hub tokenizer may lower-case and keep
    accents (keras-hub reads an uncased BERT preset so); Hugging Face's
    `BertTokenizer` does the same with `strip_accents=False`, written
    explicitly.
    """
    mode = encoder.text_normalization
    if mode is not None:
        return mode == "bert_uncased", mode == "bert_uncased"
    lowercase = bool(getattr(encoder.tokenizer, "lowercase", False))
    strip = bool(getattr(encoder.tokenizer, "strip_accents", False))
    return lowercase, strip


def _bert_files(encoder, folder, max_length):
    tokenizer = encoder.tokenizer
    vocab = [str(t) for t in tokenizer.get_vocabulary()]
    lowercase, strip = bert_casing(encoder)
    with open(folder / "vocab.txt", "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in vocab))
    special = {
        "unk_token": tokenizer.oov_token, "sep_token": tokenizer.sep_token,
        "pad_token": tokenizer.pad_token, "cls_token": tokenizer.cls_token,
        "mask_token": tokenizer.mask_token,
    }
    special = {k: v for k, v in special.items() if v is not None and v in vocab}
    ids = {t: i for i, t in enumerate(vocab)}
    fast = Tokenizer(models.WordPiece(
        vocab=ids, unk_token=tokenizer.oov_token, continuing_subword_prefix="##",
        max_input_chars_per_word=100,
    ))
    fast.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=strip, lowercase=lowercase
    )
    fast.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = tokenizer.cls_token, tokenizer.sep_token
    fast.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0",
        pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, ids[cls]), (sep, ids[sep])],
    )
    fast.decoder = decoders.WordPiece(prefix="##")
    config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": lowercase,
        # None: strip accents exactly when lower-casing (BERT's rule).
        "strip_accents": None if strip == lowercase else strip,
        "tokenize_chinese_chars": True,
        "do_basic_tokenize": True,
        "never_split": None,
        "clean_up_tokenization_spaces": True,
    }
    return fast, special, config


def _roberta_files(encoder, folder, max_length):
    tokenizer = encoder.tokenizer
    if getattr(tokenizer, "add_prefix_space", False):
        raise ValueError(
            "The encoder's byte-level BPE tokenizer adds a prefix space; only the "
            "RoBERTa setting (add_prefix_space=False) is exported."
        )
    vocab = {str(t): int(tokenizer.token_to_id(t)) for t in tokenizer.get_vocabulary()}
    merges = [str(m) for m in tokenizer.merges]
    _write_json(folder / "vocab.json", vocab)
    with open(folder / "merges.txt", "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(m + "\n" for m in merges))
    start, end = tokenizer.start_token, tokenizer.end_token
    special = {
        "bos_token": start, "eos_token": end, "sep_token": end, "cls_token": start,
        "unk_token": "<unk>", "pad_token": tokenizer.pad_token, "mask_token": tokenizer.mask_token,
    }
    special = {k: v for k, v in special.items() if v is not None and v in vocab}
    fast = Tokenizer(models.BPE(
        vocab=vocab, merges=[tuple(m.split(" ")) for m in merges],
        unk_token=special.get("unk_token"), fuse_unk=False,
    ))
    fast.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    # Positional: the name of the second argument differs between versions.
    fast.post_processor = processors.RobertaProcessing(
        (end, vocab[end]), (start, vocab[start]), trim_offsets=True, add_prefix_space=False
    )
    fast.decoder = decoders.ByteLevel()
    config = {
        "tokenizer_class": "RobertaTokenizer",
        "add_prefix_space": False,
        "errors": "replace",
        "trim_offsets": True,
        "clean_up_tokenization_spaces": False,
    }
    return fast, special, config


def _sentencepiece_files(encoder, folder, max_length):
    """XLM-RoBERTa's SentencePiece (unigram) tokenizer, as transformers' converter writes it.

    keras-hub's `XLMRobertaTokenizer` gives `<s> <pad> </s> <unk>` ids 0-3,
    each SentencePiece id `k >= 3` id `k + 1` (`<unk>`, SentencePiece's 0,
    becomes 3) and `<mask>` the last id; the unigram model below has the same
    ids, scores and normalisation (the model's precompiled character map).
    """
    tokenizer = encoder.tokenizer
    model = read_sentencepiece_model(tokenizer.proto)
    if model.model_type != "unigram":
        raise ValueError(f"Only a unigram SentencePiece model (XLM-RoBERTa's) is written as a "
                         f"Hugging Face tokenizer.json; this one is a {model.model_type} model.")
    if [p[0] for p in model.pieces[:3]] != ["<unk>", "<s>", "</s>"]:
        raise ValueError("The SentencePiece model does not start with <unk> <s> </s> "
                         "(XLM-RoBERTa's layout), which keras-hub's XLMRobertaTokenizer assumes.")
    vocab = ([("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
             + [(text, score) for text, score, _ in model.pieces[3:]] + [("<mask>", 0.0)])
    if len(vocab) != int(tokenizer.vocabulary_size()):
        raise ValueError(f"The SentencePiece model gives {len(vocab)} ids; the tokenizer has "
                         f"{tokenizer.vocabulary_size()}.")
    (folder / SENTENCEPIECE_FILE).write_bytes(tokenizer.proto)
    fast = Tokenizer(models.Unigram(vocab, unk_id=3, byte_fallback=False))
    steps = []
    if model.precompiled_charsmap:
        steps.append(normalizers.Precompiled(model.precompiled_charsmap))
    if model.remove_extra_whitespaces:
        steps += [normalizers.Strip(), normalizers.Replace(Regex(" {2,}"), " ")]
    if steps:
        fast.normalizer = normalizers.Sequence(steps)
    scheme = "always" if model.add_dummy_prefix else "never"
    fast.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme)
    fast.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme=scheme)
    fast.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 0), ("</s>", 2)])
    special = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
               "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>"}
    config = {"tokenizer_class": "XLMRobertaTokenizer", "clean_up_tokenization_spaces": False}
    return fast, special, config


def write_tokenizer_files(encoder, folder, max_length=None):
    """Write the Hugging Face tokenizer files of `encoder` into `folder`.

    Args:
        encoder: `SentenceEncoder` with a keras-hub BERT (WordPiece) or
            RoBERTa (byte-level BPE) tokenizer.
        folder: `pathlib.Path`. An existing folder.
        max_length: int or None. `model_max_length`. Defaults to the
            encoder's `max_length`.

    Returns:
        list of the file names written.
    """
    max_length = int(encoder.max_length if max_length is None else max_length)
    if isinstance(encoder.tokenizer, keras_hub.tokenizers.SentencePieceTokenizer):
        family, make = "sentencepiece", _sentencepiece_files
    else:
        family = BackboneAdapter(encoder.backbone).family
        make = _bert_files if family == "bert" else _roberta_files
    fast, special, config = make(encoder, folder, max_length)
    # Special tokens are never split, and never normalized (lower-cased).
    fast.add_special_tokens([AddedToken(t, special=True, normalized=False)
                             for t in dict.fromkeys(special.values())])
    fast.save(str(folder / "tokenizer.json"))
    config.update(special)
    config["model_max_length"] = max_length
    config["split_special_tokens"] = True
    _write_json(folder / "tokenizer_config.json", config)
    _write_json(folder / "special_tokens_map.json", special)
    vocab_files = {"bert": ["vocab.txt"], "sentencepiece": [SENTENCEPIECE_FILE]}.get(
        family, ["vocab.json", "merges.txt"])
    return vocab_files + ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]
