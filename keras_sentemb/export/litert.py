"""On-device export: a LiteRT (TensorFlow Lite) file that MediaPipe's TextEmbedder runs.

`export_litert(encoder, "model.tflite")` writes one `.tflite` file that uses
LiteRT builtin ops only (no Flex / Select TF ops, no custom ops), so the
stock LiteRT interpreter (`ai_edge_litert`), MediaPipe and the LiteRT
runtimes on Android, iOS and the web run it. Its `serving_default`
signature takes three int32 `[1, L]` inputs, `input_word_ids`, `input_mask`
and `input_type_ids` (`[CLS]` tokens `[SEP]`, then padding), and returns one
float32 `[1, dim]` output, `embedding`: the Transformer, the encoder's
pooling, projection head, L2 normalisation, post-processing (whitening,
BERT-flow) and `truncate_dim` all run in the file.

Tokenizing stays outside the graph (keras-hub's tokenizers need TensorFlow
ops that only the Flex delegate has). For uncased WordPiece (BERT) models
the file carries TFLite Model Metadata with the vocabulary packed in it
(see `keras_sentemb.export.litert_metadata`), so MediaPipe's TextEmbedder
takes raw text. MediaPipe lower-cases ASCII only and strips no accents, so
its tokens equal the encoder's on ASCII text. Cased vocabularies and
RoBERTa's byte-level BPE are exported without the tokenizer (an ids-in
file; a one-line notice says so).

The file is written next to `path` under a temporary name, read back, run in
the LiteRT interpreter and compared with `encoder.encode` on probe
sentences (`keras_sentemb.export.litert_check`); only when every row is
within `tolerance` is it renamed to `path`.
"""

import os
import sys
import tempfile
import uuid
from pathlib import Path

import numpy as np

from keras_sentemb.export.litert_check import INPUT_NAMES
from keras_sentemb.export.litert_check import OUTPUT_NAME
from keras_sentemb.export.litert_check import SIGNATURE_KEY
from keras_sentemb.export.litert_check import subgraph_input_names
from keras_sentemb.export.litert_check import verify_litert
from keras_sentemb.export.parity import check_tolerance
from keras_sentemb.io_utils import DISK_FULL_CAUSES
from keras_sentemb.io_utils import disk_full_cause
from keras_sentemb.kernels.policy import declare_graph

QUANTIZE_MODES = ("float32", "float16", "int8")
# Largest relative error of a row against `encode()`, per weight format (on
# unit vectors, relative error e means cosine 1 - e^2 / 2). Measured on the
# default model's probes (docs/deployment/litert.md): float32 1.9e-6, float16
# 1.2e-3, dynamic-range int8 0.13.
DEFAULT_TOLERANCES = {"float32": 1e-3, "float16": 2e-2, "int8": 0.2}
MAX_DEFAULT_LENGTH = 256
EXPORTABLE = (
    "LiteRT exports BERT and RoBERTa encoders with cls, mean, max, mean_last2, first_last or "
    "layer:K pooling, a projection head, L2 normalisation, Whitening or GlowFlow, and truncate_dim"
)


# ------------------------------------------------------------- refusals
def check_litert_exportable(encoder):
    """Raise `NotExportableError` when the encoder computes something LiteRT builtins cannot."""
    from keras_sentemb.export.huggingface import NotExportableError

    if encoder.pooling.startswith("sbert_wk"):
        raise NotExportableError(
            f"{encoder.pooling!r} pooling (float64 QR per token) has no LiteRT builtin ops; "
            f"{EXPORTABLE}. Choose another pooling (e.g. --pooling mean)."
        )
    if getattr(encoder, "prompt", None) is not None:
        raise NotExportableError(
            f"A LiteRT model is fed the tokens of the sentence alone; this encoder frames it in "
            f"the prompt {encoder.prompt.template!r}. Export the SavedModel "
            "(--format saved-model), which frames sentences as encode does."
        )
    family = encoder.adapter.family
    if family not in ("bert", "roberta"):
        raise NotExportableError(f"{EXPORTABLE}; this encoder is a {family} model.")


def mediapipe_tokenizer_problem(encoder):
    """Why MediaPipe's built-in BERT tokenizer would not reproduce the encoder's tokens, or None.

    MediaPipe lower-cases ASCII, splits on whitespace and punctuation and
    runs WordPiece over `vocab.txt` with `[CLS]`, `[SEP]` and `[UNK]`.
    """
    import keras_hub

    tokenizer = encoder.tokenizer
    if encoder.adapter.family != "bert" or not isinstance(
            tokenizer, keras_hub.tokenizers.WordPieceTokenizer):
        return f"its {type(tokenizer).__name__} is not a WordPiece (BERT) tokenizer"
    mode = encoder.text_normalization
    uncased = (mode == "bert_uncased" if mode is not None
               else bool(getattr(tokenizer, "lowercase", False)))
    if not uncased:
        return "its vocabulary is cased (MediaPipe lower-cases all input)"
    specials = {"[CLS]": tokenizer.cls_token, "[SEP]": tokenizer.sep_token,
                "[UNK]": tokenizer.oov_token}
    wrong = [want for want, got in specials.items() if got != want]
    if wrong:
        return f"its special tokens differ from {', '.join(wrong)}"
    return None


# ----------------------------------------------------------- conversion
def _serving_function(encoder, length, truncate_dim):
    import tensorflow as tf

    specs = [tf.TensorSpec([1, length], tf.int32, name=name) for name in INPUT_NAMES]

    @tf.function(input_signature=specs)
    def serve(input_word_ids, input_mask, input_type_ids):
        # Plain TensorFlow ops: the fused GELU, layer norm and dropout kernels are XLA
        # functions the LiteRT converter cannot lower to builtin ops (`kernels.policy.GraphKind`).
        declare_graph(plain=True)
        out = encoder({"token_ids": input_word_ids, "padding_mask": input_mask,
                       "segment_ids": input_type_ids}, training=False)
        out = tf.cast(out, tf.float32)
        if truncate_dim is not None:
            out = out[:, :truncate_dim]
            if encoder.normalize:
                out = tf.math.l2_normalize(out, axis=-1, epsilon=1e-12)
        return {OUTPUT_NAME: out}

    return serve.get_concrete_function()


def convert(encoder, length, quantize="float32", truncate_dim=None):
    """The `.tflite` bytes (no metadata) of `encoder` for `[1, length]` inputs.

    The graph goes through a SavedModel in a temporary folder (removed
    after), as the converter itself would take it.

    Raises:
        NotExportableError: the graph needs ops that are not LiteRT builtins.
        OSError: the temporary SavedModel could not be written (a full disk).
    """
    import tensorflow as tf

    from keras_sentemb import compat
    from keras_sentemb.export.huggingface import NotExportableError

    # Weights as constants: left as resource variables (READ_VARIABLE ops)
    # they would need an initialisation call that MediaPipe never makes.
    traced = _serving_function(encoder, length, truncate_dim)
    frozen = compat.frozen_function(traced)

    @tf.function(input_signature=traced.structured_input_signature[0])
    def serve(input_word_ids, input_mask, input_type_ids):  # keeps the output's name
        outputs = frozen(input_word_ids=input_word_ids, input_mask=input_mask,
                         input_type_ids=input_type_ids)
        return {OUTPUT_NAME: tf.nest.flatten(outputs)[0]}

    # Converted from a SavedModel written here: the converter would otherwise write one
    # itself and, when that fails (a full disk), silently convert without the signature.
    with tempfile.TemporaryDirectory(prefix="sentemb-litert-") as folder:
        tf.saved_model.save(tf.Module(), folder,
                            signatures={SIGNATURE_KEY: serve.get_concrete_function()})
        converter = tf.lite.TFLiteConverter.from_saved_model(folder,
                                                             signature_keys=[SIGNATURE_KEY])
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if quantize == "float16":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.target_spec.supported_types = [tf.float16]
        elif quantize == "int8":  # dynamic range: int8 weights, float activations and i/o
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        try:
            return converter.convert()
        except Exception as e:  # ConverterError: ops outside the builtin set
            if disk_full_cause(e) is not None:
                raise
            missing = sorted(set(_op_names(str(e))))
            detail = f" (needs {', '.join(missing)})" if missing else ""
            raise NotExportableError(
                f"This encoder does not convert to LiteRT builtin ops{detail}; {EXPORTABLE}."
            ) from None


def _op_names(message):
    import re

    return re.findall(r"'(?:tf|flex)\.(\w+)'", message)


# --------------------------------------------------------------- export
def _check_writable(path):
    """Raise a one-line `ValueError` unless a file can be created next to `path` (a real probe)."""
    try:
        handle, probe = tempfile.mkstemp(prefix=f".{path.name}.probe-", dir=path.parent)
        os.close(handle)
        os.unlink(probe)
    except OSError as e:
        raise ValueError(f"Cannot write {path}: creating a file in {path.parent} failed "
                         f"({e.strerror or e}).") from None


def _converted(encoder, length, quantize, truncate_dim, path):
    """`convert(...)`; a full disk while converting is an `OSError` naming `path`."""
    try:
        return convert(encoder, length, quantize, truncate_dim)
    except Exception as error:
        cause = disk_full_cause(error)
        if cause is None:
            raise
        number = next(n for n, text in DISK_FULL_CAUSES.items() if text == cause)
        raise OSError(number, f"{os.strerror(number)} (converting through a temporary "
                      f"folder in {tempfile.gettempdir()})", os.fspath(path)) from None


def _check_length(encoder, max_length):
    if max_length is None:
        return min(encoder.max_length, MAX_DEFAULT_LENGTH)
    limit = int(encoder.backbone.max_sequence_length)
    if (isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer))
            or not 3 <= max_length <= limit):
        raise ValueError(
            f"`max_length` must be an int in [3, {limit}] (the model's positions); "
            f"received {max_length!r}."
        )
    return int(max_length)


def export_litert(encoder, path, quantize="float32", max_length=None, *, tolerance=None,
                  truncate_dim=None, overwrite=False, probe_sentences=None, verbose=False):
    """Write a verified LiteRT (`.tflite`) file of `encoder` for phones, browsers and boards.

    The file uses LiteRT builtin ops only. Its `serving_default` signature
    takes `input_word_ids`, `input_mask` and `input_type_ids` (int32
    `[1, L]`) and returns `embedding` (float32 `[1, dim]`), with the
    encoder's pooling, projection head, normalisation and post-processing
    inside. An uncased BERT model carries its WordPiece vocabulary in TFLite
    Model Metadata, so MediaPipe's TextEmbedder embeds raw text with it;
    other models get an ids-in file and a notice on stderr.

    The file is reloaded in the LiteRT interpreter and compared with
    `encoder.encode(max_length=L)` on probe sentences before it is renamed
    to `path`; on failure (a full disk, a file-size limit included) nothing
    is left behind. A folder that cannot be written is refused before
    converting.

    Args:
        encoder: `SentenceEncoder`, a trainer exposing `.encoder`, or a model
            name/folder accepted by `SentenceEncoder.from_preset`.
        path: str or path. The `.tflite` file to write (replaced if it
            exists).
        quantize: str. `"float32"`, `"float16"` (half-size weights) or
            `"int8"` (dynamic range: int8 weights, float input and output,
            a quarter of the size). Defaults to `"float32"`.
        max_length: int or None. `L`, the fixed input length (special tokens
            included). Defaults to the encoder's `max_length`, at most 256.
        tolerance: float or None. Largest relative error of a probe's vector.
            Defaults to `1e-3` (float32), `2e-2` (float16), `0.2` (int8).
        truncate_dim: int or None. Output the first `truncate_dim`
            dimensions (renormalised when the encoder normalises). Defaults
            to `None` (all).
        overwrite: bool. Replace an existing file at `path` (once the new
            one is verified). Defaults to `False`.
        probe_sentences: list of str or None. Extra probes. Defaults to
            `None`.
        verbose: bool. Print a summary on stderr. Defaults to `False`.

    Returns:
        dict: `path`, `size_bytes`, `quantize`, `max_length`, `output_dim`,
        `mediapipe_tokenizer` (bool) and the verification report
        (`max_rel_diff`, `min_cosine`, `mean_cosine`, ...).

    Raises:
        NotExportableError: the encoder computes something LiteRT builtins
            cannot express (a `ValueError`).
        ExportVerificationError: the file does not reproduce `encode`
            within `tolerance` (a `ValueError`).
        FileExistsError: `path` exists and `overwrite` is False.
        ValueError: no file can be created in `path`'s folder.
        OSError: the disk is full (or a file-size limit or quota is
            reached) while converting or writing; `filename` is `path`.

    Examples:

    ```python
    encoder = keras_sentemb.SentenceEncoder.from_preset("default")
    keras_sentemb.export_litert(encoder, "minilm.tflite", quantize="int8")
    # MediaPipe: TextEmbedder.create_from_model_path("minilm.tflite").embed("Hello!")
    ```
    """
    from keras_sentemb.export.litert_metadata import VOCABULARY_FILE
    from keras_sentemb.export.litert_metadata import attach_metadata
    from keras_sentemb.export.litert_metadata import build_metadata
    from keras_sentemb.export.saved_model import _as_encoder
    from keras_sentemb.models.truncation import check_truncate_dim
    from keras_sentemb.version import __version__

    if quantize not in QUANTIZE_MODES:
        raise ValueError(f"`quantize` must be one of {QUANTIZE_MODES}; received {quantize!r}.")
    encoder = _as_encoder(encoder)
    length = _check_length(encoder, max_length)
    if truncate_dim is not None:
        truncate_dim = check_truncate_dim(truncate_dim, encoder.output_dim)
    tolerance = check_tolerance(DEFAULT_TOLERANCES[quantize] if tolerance is None else tolerance)
    path = Path(os.fspath(path))
    if path.is_dir():
        raise ValueError(f"Cannot write {path}: it is a folder; pass a .tflite file name.")
    if not path.parent.is_dir():
        raise ValueError(f"Cannot write {path}: the folder {path.parent} does not exist.")
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; pass overwrite=True (--overwrite) to "
                              "replace it.")
    _check_writable(path)
    check_litert_exportable(encoder)
    if encoder.backbone.dtype_policy.compute_dtype != "float32":
        encoder = encoder.precision_twin("float32")  # the file computes in float32

    model = _converted(encoder, length, quantize, truncate_dim, path)
    problem = mediapipe_tokenizer_problem(encoder)
    dim = encoder.output_dim if truncate_dim is None else truncate_dim
    files = {}
    if problem is None:
        vocab = "".join(f"{token}\n" for token in encoder.tokenizer.get_vocabulary())
        files[VOCABULARY_FILE] = vocab.encode("utf-8")
    metadata = build_metadata(
        subgraph_input_names(model), dim, name="keras_sentemb sentence encoder",
        description=(f"Sentence embeddings ({encoder.pooling} pooling"
                     f"{', L2-normalised' if encoder.normalize else ''}), "
                     f"{quantize} weights, inputs of {length} tokens."),
        version=__version__, vocabulary=problem is None,
    )
    model = attach_metadata(model, metadata, files)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.write_bytes(model)
        model = tmp.read_bytes()  # the gate runs what was written
        report = verify_litert(model, encoder, length, tolerance, truncate_dim, probe_sentences)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    if problem is not None:
        print(f"Notice: MediaPipe's built-in tokenizer does not apply to {path.name} ({problem}); "
              "feed token ids from the model's own tokenizer.", file=sys.stderr)
    result = {"path": os.fspath(path), "size_bytes": len(model), "quantize": quantize,
              "max_length": length, "output_dim": dim, "mediapipe_tokenizer": problem is None,
              **report}
    if verbose:
        print(f"Exported {path} ({quantize}, {len(model) / 2**20:.1f} MiB; min cosine to "
              f"encode() {report['min_cosine']:.6f} on {report['num_probes']} probes).",
              file=sys.stderr)
    return result
