"""The parts of a serialized SentencePiece model a Hugging Face tokenizer needs, read directly.

A SentencePiece model is a protocol buffer (`ModelProto` of sentencepiece's
`sentencepiece_model.proto`). Its generated Python module is tied to one
protobuf runtime version and often fails to import beside TensorFlow's, so
the few fields needed are read from the wire format here:

- `pieces` (field 1): each piece's text (1), score (2) and type (3);
- `trainer_spec` (2): the model type (3: UNIGRAM 1, BPE 2, WORD 3, CHAR 4);
- `normalizer_spec` (3): its name (1), the precompiled character map (2)
  and the flags `add_dummy_prefix` (3), `remove_extra_whitespaces` (4) and
  `escape_whitespaces` (5).

Fields not listed are skipped, whatever their wire type.
"""

import dataclasses
import struct

MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}
# Piece types: NORMAL 1, UNKNOWN 2, CONTROL 3, USER_DEFINED 4, UNUSED 5, BYTE 6.
UNKNOWN, CONTROL, USER_DEFINED, BYTE = 2, 3, 4, 6


class SentencePieceProtoError(ValueError):
    """The bytes are not a SentencePiece model this reader understands."""


@dataclasses.dataclass
class SentencePieceModel:
    pieces: list  # [(text, score, type)] in id order
    model_type: str = "unigram"
    normalizer: str = ""
    precompiled_charsmap: bytes = b""
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True
    escape_whitespaces: bool = True


def _varint(data, i):
    value, shift = 0, 0
    while True:
        if i >= len(data):
            raise SentencePieceProtoError("truncated varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise SentencePieceProtoError("varint longer than 64 bits")


def _fields(data):
    """(field number, wire type, value) of each field of a message; LEN values as bytes."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i:i + size], i + size
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise SentencePieceProtoError(f"unsupported wire type {wire}")
        if i > len(data):
            raise SentencePieceProtoError("truncated field")
        yield number, wire, value


def read_sentencepiece_model(proto):
    """A `SentencePieceModel` from the serialized bytes `proto`.

    Raises:
        SentencePieceProtoError: not a SentencePiece model (no pieces, or
            malformed bytes).
    """
    model = SentencePieceModel(pieces=[])
    for number, wire, value in _fields(bytes(proto)):
        if number == 1 and wire == 2:
            text, score, kind = "", 0.0, 1
            for n, w, v in _fields(value):
                if n == 1 and w == 2:
                    text = v.decode("utf-8")
                elif n == 2 and w == 5:
                    score = struct.unpack("<f", v)[0]
                elif n == 3 and w == 0:
                    kind = v
            model.pieces.append((text, score, kind))
        elif number == 2 and wire == 2:
            for n, w, v in _fields(value):
                if n == 3 and w == 0:
                    model.model_type = MODEL_TYPES.get(v, f"type {v}")
        elif number == 3 and wire == 2:
            for n, w, v in _fields(value):
                if n == 1 and w == 2:
                    model.normalizer = v.decode("utf-8")
                elif n == 2 and w == 2:
                    model.precompiled_charsmap = bytes(v)
                elif n == 3 and w == 0:
                    model.add_dummy_prefix = bool(v)
                elif n == 4 and w == 0:
                    model.remove_extra_whitespaces = bool(v)
                elif n == 5 and w == 0:
                    model.escape_whitespaces = bool(v)
    if not model.pieces:
        raise SentencePieceProtoError("no pieces")
    return model
