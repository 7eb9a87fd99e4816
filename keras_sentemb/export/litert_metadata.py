"""TFLite Model Metadata for a LiteRT sentence encoder, written and read without tflite-support.

MediaPipe's TextEmbedder (and the TFLite Task library) tokenize text by
themselves when the model carries TFLite Model Metadata
(`metadata_schema.fbs`, identifier `M001`) whose first input process unit is
a `BertTokenizerOptions` naming a `vocab.txt` packed in the file, and whose
three input tensors are named `ids`, `mask` and `segment_ids` (in the order
of the model's inputs). The metadata flatbuffer goes into a model buffer
named by a `TFLITE_METADATA` entry of the model's `metadata` list; the
associated files (the vocabulary) go into an uncompressed zip archive
appended to the model, so the `.tflite` file is both a flatbuffer and a zip.

The writer here builds that flatbuffer with the `flatbuffers` package
(a TensorFlow dependency), so the export needs neither `tflite-support`
(no Python 3.11+ wheels) nor MediaPipe's metadata writer (whose wheels lack
its generated modules). `read_metadata` parses it back.
"""

import io
import zipfile

import flatbuffers
from flatbuffers import table as fb_table

METADATA_NAME = "TFLITE_METADATA"
FILE_IDENTIFIER = b"M001"
# The oldest metadata parser that reads what is written here (BertTokenizerOptions: 1.1.0).
MIN_PARSER_VERSION = "1.1.0"
VOCABULARY_FILE = "vocab.txt"
# Metadata names MediaPipe's BERT preprocessor looks the input tensors up by.
MEDIAPIPE_INPUT_NAMES = {
    "input_word_ids": "ids",
    "input_mask": "mask",
    "input_type_ids": "segment_ids",
}
# `ProcessUnitOptions` union members and `AssociatedFileType` values (metadata_schema.fbs).
BERT_TOKENIZER_OPTIONS = 4
ASSOCIATED_FILE_VOCABULARY = 5
CONTENT_FEATURE_PROPERTIES = 1

# Field slots: a table's n-th field is at vtable offset 4 + 2 n; a union
# takes two slots (its type, then its value).
_MODEL = {"name": 0, "description": 1, "version": 2, "subgraph_metadata": 3,
          "author": 4, "license": 5, "associated_files": 6, "min_parser_version": 7}
_SUBGRAPH = {"name": 0, "description": 1, "input_tensor_metadata": 2,
             "output_tensor_metadata": 3, "associated_files": 4, "input_process_units": 5}
_TENSOR = {"name": 0, "description": 1, "content": 3}
_CONTENT = {"content_properties_type": 0, "content_properties": 1}
_PROCESS_UNIT = {"options_type": 0, "options": 1}
_BERT_OPTIONS = {"vocab_file": 0}
_FILE = {"name": 0, "description": 1, "type": 2}


# ------------------------------------------------------------------ writing
def _vector(builder, offsets):
    builder.StartVector(4, len(offsets), 4)
    for offset in reversed(offsets):
        builder.PrependUOffsetTRelative(offset)
    return builder.EndVector()


def _table(builder, num_fields, offsets=(), bytes_=()):
    """A table from `(slot, offset)` and `(slot, byte value)` pairs."""
    builder.StartObject(num_fields)
    for slot, value in offsets:
        builder.PrependUOffsetTRelativeSlot(slot, value, 0)
    for slot, value in bytes_:
        builder.PrependUint8Slot(slot, value, 0)
    return builder.EndObject()


def _associated_file(builder, name, description, file_type):
    name, description = builder.CreateString(name), builder.CreateString(description)
    return _table(builder, 5, [(_FILE["name"], name), (_FILE["description"], description)],
                  [(_FILE["type"], file_type)])


def _tensor(builder, name, description, feature=False):
    offsets = [(_TENSOR["name"], builder.CreateString(name)),
               (_TENSOR["description"], builder.CreateString(description))]
    if feature:
        properties = _table(builder, 0)
        content = _table(builder, 3, [(_CONTENT["content_properties"], properties)],
                         [(_CONTENT["content_properties_type"], CONTENT_FEATURE_PROPERTIES)])
        offsets.append((_TENSOR["content"], content))
    return _table(builder, 7, offsets)


def build_metadata(input_names, output_dim, name, description, version, vocabulary=True):
    """The metadata flatbuffer (bytes) of a three-input BERT sentence encoder.

    Args:
        input_names: list of str. The model's input names in the order of
            its subgraph inputs (`input_word_ids`, `input_mask`,
            `input_type_ids` in any order).
        output_dim: int. Size of the `embedding` output.
        name, description, version: str. The model's.
        vocabulary: bool. Add the `BertTokenizerOptions` process unit naming
            `vocab.txt` (MediaPipe then tokenizes). Defaults to `True`.
    """
    builder = flatbuffers.Builder(1024)
    inputs = [
        _tensor(builder, MEDIAPIPE_INPUT_NAMES[n],
                f"{n}: int32 [1, L] ({_INPUT_DESCRIPTIONS[n]})")
        for n in input_names
    ]
    output = _tensor(builder, "embedding",
                     f"Sentence embedding, float32 [1, {int(output_dim)}].", feature=True)
    offsets = [
        (_SUBGRAPH["name"], builder.CreateString(name)),
        (_SUBGRAPH["input_tensor_metadata"], _vector(builder, inputs)),
        (_SUBGRAPH["output_tensor_metadata"], _vector(builder, [output])),
    ]
    if vocabulary:
        vocab = _associated_file(builder, VOCABULARY_FILE, "WordPiece vocabulary, one token a line.",
                                 ASSOCIATED_FILE_VOCABULARY)
        options = _table(builder, 1, [(_BERT_OPTIONS["vocab_file"], _vector(builder, [vocab]))])
        unit = _table(builder, 2, [(_PROCESS_UNIT["options"], options)],
                      [(_PROCESS_UNIT["options_type"], BERT_TOKENIZER_OPTIONS)])
        offsets.append((_SUBGRAPH["input_process_units"], _vector(builder, [unit])))
    subgraph = _table(builder, 10, offsets)
    model = _table(builder, 8, [
        (_MODEL["name"], builder.CreateString(name)),
        (_MODEL["description"], builder.CreateString(description)),
        (_MODEL["version"], builder.CreateString(version)),
        (_MODEL["subgraph_metadata"], _vector(builder, [subgraph])),
        (_MODEL["min_parser_version"], builder.CreateString(MIN_PARSER_VERSION)),
    ])
    builder.Finish(model, file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())


_INPUT_DESCRIPTIONS = {
    "input_word_ids": "token ids: [CLS] tokens [SEP], then padding",
    "input_mask": "1 for real tokens, 0 for padding",
    "input_type_ids": "segment ids, all 0",
}


def attach_metadata(model, metadata, files):
    """`model` (TFLite flatbuffer bytes) with `metadata` in a buffer and `files` appended as a zip.

    Args:
        model: bytes. A TFLite model without metadata of this name.
        metadata: bytes. From `build_metadata`.
        files: dict of str -> bytes. Associated files (may be empty).

    Returns:
        bytes.
    """
    from keras_sentemb import compat

    schema = compat.tflite_schema()
    tree = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(bytearray(model), 0))
    if any(m.name in (METADATA_NAME, METADATA_NAME.encode()) for m in tree.metadata or []):
        raise ValueError(f"The model already has {METADATA_NAME}.")
    buffer = schema.BufferT()
    buffer.data = bytearray(metadata)
    tree.buffers.append(buffer)
    entry = schema.MetadataT()
    entry.name = METADATA_NAME
    entry.buffer = len(tree.buffers) - 1
    tree.metadata = list(tree.metadata or []) + [entry]
    builder = flatbuffers.Builder(len(model) + len(metadata) + 1024)
    builder.Finish(tree.Pack(builder), file_identifier=b"TFL3")
    out = io.BytesIO(bytes(builder.Output()))
    if files:
        out.seek(0, io.SEEK_END)
        # Appending to bytes that are not a zip writes a zip after them whose
        # offsets count from the start of the file, as MediaPipe reads it.
        with zipfile.ZipFile(out, "a", compression=zipfile.ZIP_STORED) as archive:
            for file_name, data in files.items():
                archive.writestr(file_name, data)
    return out.getvalue()


# ------------------------------------------------------------------ reading
class _Table:
    def __init__(self, buf, pos):
        self.t = fb_table.Table(buf, pos)

    def _offset(self, slot):
        return self.t.Offset(4 + 2 * slot)

    def string(self, slot):
        o = self._offset(slot)
        return self.t.String(o + self.t.Pos).decode("utf-8") if o else None

    def byte(self, slot):
        o = self._offset(slot)
        return self.t.Get(flatbuffers.number_types.Uint8Flags, o + self.t.Pos) if o else 0

    def table(self, slot):
        o = self._offset(slot)
        return _Table(self.t.Bytes, self.t.Indirect(o + self.t.Pos)) if o else None

    def tables(self, slot):
        o = self._offset(slot)
        if not o:
            return []
        start = self.t.Vector(o)
        return [_Table(self.t.Bytes, self.t.Indirect(start + 4 * i))
                for i in range(self.t.VectorLen(o))]


def _file_dict(f):
    return {"name": f.string(_FILE["name"]), "type": f.byte(_FILE["type"])}


def read_metadata(data):
    """The metadata and associated files of a `.tflite` file (bytes), as plain Python.

    Returns:
        dict with `name`, `description`, `version`, `min_parser_version`,
        `inputs` (metadata names in input order), `outputs`, `tokenizer`
        (`{"type": "BertTokenizerOptions", "vocab_files": [...]}` or None)
        and `files` (name -> bytes of the appended zip archive); None when
        the model has no `TFLITE_METADATA`.
    """
    from keras_sentemb import compat

    schema = compat.tflite_schema()
    model = schema.Model.GetRootAsModel(bytearray(data), 0)
    index = None
    for i in range(model.MetadataLength()):
        if model.Metadata(i).Name() in (METADATA_NAME.encode(), METADATA_NAME):
            index = model.Metadata(i).Buffer()
    if index is None:
        return None
    raw = model.Buffers(index).DataAsNumpy().tobytes()
    if raw[4:8] != FILE_IDENTIFIER:
        raise ValueError(f"{METADATA_NAME} does not hold a metadata flatbuffer ({raw[4:8]!r}).")
    root = _Table(bytearray(raw), flatbuffers.encode.Get(flatbuffers.packer.uoffset, raw, 0))
    subgraph = root.tables(_MODEL["subgraph_metadata"])[0]
    tokenizer = None
    for unit in subgraph.tables(_SUBGRAPH["input_process_units"]):
        if unit.byte(_PROCESS_UNIT["options_type"]) == BERT_TOKENIZER_OPTIONS:
            options = unit.table(_PROCESS_UNIT["options"])
            tokenizer = {"type": "BertTokenizerOptions",
                         "vocab_files": [_file_dict(f) for f in options.tables(_BERT_OPTIONS["vocab_file"])]}
    files = {}
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            files = {info.filename: archive.read(info) for info in archive.infolist()
                     if info.compress_type == zipfile.ZIP_STORED}
    except zipfile.BadZipFile:
        pass
    return {
        "name": root.string(_MODEL["name"]),
        "description": root.string(_MODEL["description"]),
        "version": root.string(_MODEL["version"]),
        "min_parser_version": root.string(_MODEL["min_parser_version"]),
        "inputs": [t.string(_TENSOR["name"]) for t in subgraph.tables(_SUBGRAPH["input_tensor_metadata"])],
        "outputs": [t.string(_TENSOR["name"]) for t in subgraph.tables(_SUBGRAPH["output_tensor_metadata"])],
        "tokenizer": tokenizer,
        "files": files,
    }
