"""A static encoder for TF Serving (strings in) and for phones (LiteRT, MediaPipe's TextEmbedder).

Both graphs compute what `StaticEncoder.encode` computes: the weighted mean
of the sentence's token vectors (special tokens and padding left out),
L2-normalised when the encoder normalises; the weights are multiplied into
the table. Each export is written under a temporary name, loaded back, run
on probe sentences and compared with `encode`; only then is it renamed
into place.

- SavedModel: `serving_default` takes `sentences` (tf.string `[None]`) and
  returns `embeddings` (float32 `[None, dim]`), the tokenizer inside (the
  teacher's WordPiece vocabulary in keras-hub's tokenizer, with Hugging
  Face BERT's text cleaning), as for the Transformer's SavedModel.
- LiteRT: the Transformer's contract (`keras_sentemb.export.litert`): three
  int32 `[1, L]` inputs `input_word_ids`, `input_mask`, `input_type_ids`
  (`[CLS] tokens [SEP]`, padding), one float32 `[1, dim]` output
  `embedding`, signature `serving_default`, builtin ops only, and the
  WordPiece vocabulary in the metadata for uncased vocabularies. `int8`
  stores the table as int8 with one scale per row (gathered, then scaled:
  `GATHER`, `CAST`, `MUL`), a quarter of the float32 size; `float16` half.
"""

import os
import tempfile
import uuid
from pathlib import Path

import numpy as np

from keras_sentemb.export.huggingface import NotExportableError
from keras_sentemb.export.parity import check_tolerance
from keras_sentemb.export.parity import compare
from keras_sentemb.export.parity import reference_vectors
from keras_sentemb.models.static_runtime import PROBES
from keras_sentemb.io_utils import atomic_folder
from keras_sentemb.models import static_runtime

LITERT_TOLERANCES = {"float32": 1e-4, "float16": 5e-3, "int8": 5e-2}
LITERT_DEFAULT_LENGTH = 128


def wordpiece_settings(tokenizer):
    """`(vocabulary list, text_normalization mode, lowercase)` of a WordPiece `tokenizer.json`.

    Raises:
        NotExportableError: the tokenizer is not WordPiece (BERT).
    """
    import json

    spec = json.loads(tokenizer.to_str())
    if spec["model"]["type"] != "WordPiece":
        raise NotExportableError(
            f"The static encoder's tokenizer is {spec['model']['type']}; the SavedModel and "
            "LiteRT exports of static encoders take WordPiece (BERT) vocabularies.")
    vocab = spec["model"]["vocab"]
    tokens = [None] * len(vocab)
    for token, index in vocab.items():
        tokens[index] = token
    normalizer = spec.get("normalizer") or {}
    lowercase = bool(normalizer.get("lowercase", False))
    return tokens, "bert_uncased" if lowercase else "bert_cased", lowercase


def folded_parts(encoder):
    """`(table [V, d], keep [V])` float32: weights and special-token mask folded into the rows."""
    keep = encoder.keep.numpy()
    return encoder.folded_table() * keep[:, None], keep


# ------------------------------------------------------------------ SavedModel
def _serving_module(encoder):
    import keras_hub
    import tensorflow as tf

    from keras_sentemb.models.text_normalization import normalize_text

    vocabulary, mode, _ = wordpiece_settings(encoder.tokenizer)
    table, keep = folded_parts(encoder)
    module = tf.Module()
    module.tokenizer = keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=vocabulary, lowercase=False, strip_accents=False, dtype="int32")
    module.table = tf.Variable(table, trainable=False, name="table")
    module.keep = tf.Variable(keep, trainable=False, name="keep")
    max_length, normalize = encoder.max_length, encoder.normalize

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
    def serve(sentences):
        text = tf.strings.unicode_transcode(sentences, input_encoding="UTF-8",
                                            output_encoding="UTF-8", errors="replace")
        ids = module.tokenizer(normalize_text(text, mode))
        if max_length is not None:
            ids = ids[:, :max_length]
        summed = tf.reduce_sum(tf.gather(module.table, ids), axis=1)
        count = tf.reduce_sum(tf.gather(module.keep, ids), axis=1)
        out = summed / tf.maximum(count, 1.0)[:, None]
        if normalize:
            out = tf.math.l2_normalize(out, axis=-1, epsilon=1e-12)
        return {"embeddings": out}

    module.serve = serve
    return module


def export_static_saved_model(encoder, path, version=None, overwrite=False, tolerance=None,
                              probe_sentences=None):
    """Write a verified string-in SavedModel of a `StaticEncoder` at `path/VERSION/`.

    Args:
        encoder: `StaticEncoder` (WordPiece vocabulary).
        path: str or path. The model's base folder (TF Serving layout).
        version: int or None. Defaults to the next free version.
        overwrite: bool. Replace an existing version. Defaults to `False`.
        tolerance: float or None. Largest relative error against `encode`.
            Defaults to `1e-4`.
        probe_sentences: list of str or None. Extra probes.

    Returns:
        dict: `path` (the version folder) and the verification report.

    Raises:
        NotExportableError: the vocabulary is not WordPiece.
        ExportVerificationError: the SavedModel does not reproduce `encode`.
    """
    import tensorflow as tf

    from keras_sentemb.export.saved_model import next_version

    tolerance = check_tolerance(1e-4 if tolerance is None else tolerance)
    version = next_version(path) if version is None else int(version)
    final = Path(os.fspath(path)) / str(version)
    if final.exists() and not overwrite:
        raise FileExistsError(f"{final} already exists; pass overwrite=True (--overwrite).")
    module = _serving_module(encoder)
    probes = list(PROBES) + list(probe_sentences or [])
    with atomic_folder(final, overwrite=True) as folder:
        tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})
        loaded = tf.saved_model.load(str(folder)).signatures["serving_default"]
        got = loaded(sentences=tf.constant(probes))["embeddings"].numpy()
        # The serving graph gathers and averages float32 rows, as `encode()` does.
        report = compare(got, reference_vectors(encoder, probes, "float32"), tolerance,
                         "The SavedModel", probes)
    return {"path": os.fspath(final), **report}


# ---------------------------------------------------------------------- LiteRT
def _table_constants(encoder, quantize):
    """`(table, row scales)` constants of the LiteRT graph for `quantize`."""
    table, keep = folded_parts(encoder)
    if quantize == "int8":
        q, scales = static_runtime.quantize_rows(table)
        return q, (scales * (keep > 0)).astype(np.float32)
    dtype = np.float16 if quantize == "float16" else np.float32
    return table.astype(dtype), keep.astype(np.float32)


def convert_static_litert(encoder, length, quantize="float32"):
    """The `.tflite` bytes (no metadata) of the static encoder for `[1, length]` inputs.

    The scales are 0 exactly for the special tokens (the weights are
    positive), so they also give each token's count.
    """
    import tensorflow as tf

    from keras_sentemb.export.litert_check import INPUT_NAMES
    from keras_sentemb.export.litert_check import OUTPUT_NAME
    from keras_sentemb.export.litert_check import SIGNATURE_KEY

    table, scales = _table_constants(encoder, quantize)
    normalize = encoder.normalize
    specs = [tf.TensorSpec([1, length], tf.int32, name=name) for name in INPUT_NAMES]

    @tf.function(input_signature=specs)
    def serve(input_word_ids, input_mask, input_type_ids):
        rows = tf.cast(tf.gather(tf.constant(table), input_word_ids), tf.float32)
        row_scales = tf.gather(tf.constant(scales), input_word_ids)
        mask = tf.cast(input_mask, tf.float32)
        if quantize == "int8":
            rows = rows * row_scales[..., None]
        summed = tf.reduce_sum(rows * mask[..., None], axis=1)
        count = tf.reduce_sum(tf.cast(row_scales > 0, tf.float32) * mask, axis=1, keepdims=True)
        out = summed / tf.maximum(count, 1.0)
        if normalize:
            out = tf.math.l2_normalize(out, axis=-1, epsilon=1e-12)
        return {OUTPUT_NAME: out}

    with tempfile.TemporaryDirectory(prefix="sentemb-static-litert-") as folder:
        tf.saved_model.save(tf.Module(), folder,
                            signatures={SIGNATURE_KEY: serve.get_concrete_function()})
        converter = tf.lite.TFLiteConverter.from_saved_model(folder, signature_keys=[SIGNATURE_KEY])
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        return converter.convert()


def pack_probe_ids(encoder, sentences, length):
    """`(ids, mask)` int32 `[n, length]`: `[CLS] tokens [SEP]` and padding, by the HF tokenizer."""
    vocabulary, _, _ = wordpiece_settings(encoder.tokenizer)
    index = {token: i for i, token in enumerate(vocabulary)}
    cls, sep, pad = index["[CLS]"], index["[SEP]"], index.get("[PAD]", 0)
    rows = encoder.runtime().token_ids(sentences, max_length=length - 2)
    ids = np.full((len(rows), length), pad, np.int32)
    mask = np.zeros((len(rows), length), np.int32)
    for i, row in enumerate(rows):
        packed = [cls, *row, sep]
        ids[i, :len(packed)], mask[i, :len(packed)] = packed, 1
    return ids, mask


def _litert_metadata(encoder, model, length, quantize, dim):
    from keras_sentemb.export.litert_check import subgraph_input_names
    from keras_sentemb.export.litert_metadata import VOCABULARY_FILE
    from keras_sentemb.export.litert_metadata import attach_metadata
    from keras_sentemb.export.litert_metadata import build_metadata
    from keras_sentemb.version import __version__

    vocabulary, _, lowercase = wordpiece_settings(encoder.tokenizer)
    files = {VOCABULARY_FILE: "".join(f"{t}\n" for t in vocabulary).encode("utf-8")}
    metadata = build_metadata(
        subgraph_input_names(model), dim, name="keras_sentemb static sentence encoder",
        description=(f"Static sentence embeddings (mean of token vectors"
                     f"{', L2-normalised' if encoder.normalize else ''}), {quantize} table, "
                     f"inputs of {length} tokens."),
        version=__version__, vocabulary=lowercase)
    return attach_metadata(model, metadata, files if lowercase else {})


def export_static_litert(encoder, path, quantize="float32", max_length=None, overwrite=False,
                         tolerance=None, probe_sentences=None):
    """Write a verified LiteRT file of a `StaticEncoder` (MediaPipe's TextEmbedder runs it).

    Args:
        encoder: `StaticEncoder` (WordPiece vocabulary).
        path: str or path. The `.tflite` file.
        quantize: str. The table's format in the file: `"float32"`,
            `"float16"` or `"int8"` (one scale per row; the file of a
            256-dimensional table of the default model's vocabulary is under
            8 MiB). Defaults to `"float32"`, as `export_litert`.
        max_length: int or None. `L`, the fixed input length (special
            tokens included). Defaults to `128`.
        overwrite: bool. Replace an existing file. Defaults to `False`.
        tolerance: float or None. Largest relative error of a probe's
            vector. Defaults to `LITERT_TOLERANCES[quantize]`.
        probe_sentences: list of str or None. Extra probes.

    Returns:
        dict: `path`, `size_bytes`, `quantize`, `max_length`,
        `mediapipe_tokenizer` and the verification report.

    Raises:
        NotExportableError: the vocabulary is not WordPiece.
        ExportVerificationError: the file does not reproduce `encode`.
        FileExistsError: `path` exists and `overwrite` is False.
    """
    from keras_sentemb.export.litert_check import run_litert

    if quantize not in LITERT_TOLERANCES:
        raise ValueError(f"`quantize` must be one of {tuple(LITERT_TOLERANCES)}; received "
                         f"{quantize!r}.")
    length = LITERT_DEFAULT_LENGTH if max_length is None else int(max_length)
    if length < 3:
        raise ValueError(f"`max_length` must be at least 3; received {max_length!r}.")
    tolerance = check_tolerance(LITERT_TOLERANCES[quantize] if tolerance is None else tolerance)
    path = Path(os.fspath(path))
    if path.is_dir() or not path.parent.is_dir():
        raise ValueError(f"Cannot write {path}: give a .tflite file in an existing folder.")
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; pass overwrite=True (--overwrite).")
    model = convert_static_litert(encoder, length, quantize)
    model = _litert_metadata(encoder, model, length, quantize, encoder.output_dim)
    probes = list(PROBES) + list(probe_sentences or [])
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.write_bytes(model)
        ids, mask = pack_probe_ids(encoder, probes, length)
        got = run_litert(tmp.read_bytes(), ids, mask)
        # Float32 in the file whatever its stored weights (float16 and int8
        # rows are dequantized in the graph).
        report = compare(got, reference_vectors(encoder, probes, "float32",
                                                max_length=length - 2), tolerance,
                         "The LiteRT file", probes)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _, _, lowercase = wordpiece_settings(encoder.tokenizer)
    return {"path": os.fspath(path), "size_bytes": len(model), "quantize": quantize,
            "max_length": length, "mediapipe_tokenizer": lowercase, **report}
