"""String-in SavedModel export for TF Serving, verified against `encode`.

The exported graph holds the whole pipeline of a `SentenceEncoder`: UTF-8
repair, the keras-hub tokenizer (tensorflow-text ops), truncation to the
encoder's `max_length`, `[CLS]`/`[SEP]` packing with padding to the longest
sentence of the request, the Transformer, pooling, the optional projection
head, the optional L2 normalisation and the optional post-processing layer
(whitening, BERT-flow; `output_dim` is then the layer's). TF Serving (or any process with
TensorFlow and the tensorflow-text ops registered) runs it; no Keras,
keras-hub or keras_sentemb code is needed at serving time.

Signatures (the first one is a contract relied upon outside this package):

- `serving_default`: `sentences` (tf.string, [None]) -> `embeddings`
  (float32, [None, output_dim]), identical to `SentenceEncoder.encode`.
- `token_embeddings`: `sentences` (tf.string, [None]) -> `token_embeddings`
  (float32, [None, T, hidden_dim], the last Transformer layer's output for
  every token, `[CLS]` and `[SEP]` included), `padding_mask` (int32,
  [None, T], 1 for real tokens) and `token_ids` (int32, [None, T]); `T` is
  the longest packed sentence of the request.
"""

import json
import os
import shutil
import sys
import uuid
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text

from keras_sentemb import compat
from keras_sentemb.export.parity import DEFAULT_TOLERANCE
from keras_sentemb.export.parity import ExportVerificationError
from keras_sentemb.export.parity import check_tolerance
from keras_sentemb.export.parity import compare
from keras_sentemb.export.parity import relative_errors
from keras_sentemb.export.standalone import run_standalone
from keras_sentemb.io_utils import folder_lock
from keras_sentemb.model_card import build_model_card
from keras_sentemb.model_card import write_model_card
from keras_sentemb.models import model_kinds
from keras_sentemb.models.int8_encoder import DEFAULT_CALIBRATION_SIZE
from keras_sentemb.models.int8_encoder import prepare_int8
from keras_sentemb.kernels.policy import declare_graph
from keras_sentemb.models.keras_hub_models import is_keras_hub_model
from keras_sentemb.models.sentence_encoder import SentenceEncoder
from keras_sentemb.models.truncation import check_truncate_dim
from keras_sentemb.quiet_startup import quiet_tensorflow_info
from keras_sentemb.version import __version__

SERVING_SIGNATURE = "serving_default"
TOKEN_SIGNATURE = "token_embeddings"
INPUT_KEY = "sentences"
OUTPUT_KEY = "embeddings"
TOKEN_OUTPUT_KEYS = ("token_embeddings", "padding_mask", "token_ids")
METADATA_FILE = os.path.join("assets.extra", "sentemb_export.json")
EXPORT_FORMAT_VERSION = 1
# Requests larger than this are sorted by length and run in chunks of this
# many sentences, each padded to its own longest sentence. On a 2-core CPU
# with Wikipedia sentences, 256-sentence requests ran ~8x faster in chunks of
# 8-16 than as one batch padded to its longest sentence, and ~2x faster
# than in chunks of 64 (benchmarks/savedmodel_latency.py --chunk-size).
DEFAULT_CHUNK_SIZE = 16
_TMP_PREFIX = ".tmp-export-"
# Ops of core TensorFlow that `tf.raw_ops` does not list (their names start with
# an underscore): the int8 graph's quantized matrix multiply.
CORE_PRIVATE_OPS = (compat.QUANTIZED_MATMUL_OP,)
# What a serving graph computes in, and the largest relative error of a row
# against `encode(precision=...)` in that precision that verification allows:
# the same graph, padded to other widths (bfloat16 rounds matrix multiplies of
# other shapes differently; int8's matrix multiplies are exact in integers).
EXPORT_PRECISIONS = ("float32", "bfloat16", "int8")
DEFAULT_TOLERANCES = {"float32": DEFAULT_TOLERANCE, "bfloat16": 5e-2, "int8": 1e-3}

# Inputs the export is checked on: empty and whitespace-only strings, several
# scripts, emoji (with skin tones, ZWJ sequences and flags), text that looks
# like special tokens, text longer than any `max_length`, and bytes that are
# not valid UTF-8 (replaced by U+FFFD on both sides).
PROBE_SENTENCES = (
    "",
    " ",
    "\t \n ",
    "A man is playing a guitar.",
    "The quick brown fox jumps over the lazy dog!",
    "Résumé of a naïve café owner in São Paulo — Zürich, Ångström, Øresund.",
    "我喜欢在公园里散步。",
    "東京は日本の首都です。",
    "서울은 한국의 수도입니다.",
    "Москва — столица России.",
    "القاهرة هي عاصمة مصر.",
    "नई दिल्ली भारत की राजधानी है।",
    "Emoji: 😀👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ 🤖",
    "[CLS] [SEP] [PAD] [UNK] [MASK] <s> </s> typed by a user",
    "MiXeD CaSe, punctuation... (brackets) & symbols: $100 @home #tag 3.14",
    "The committee reviewed the proposal in great detail before voting. " * 80,
    b"invalid utf-8: \xff\xfe and a truncated sequence \xe2\x82 end",
    b"\xc3\x28 \xa0\xa1 lone continuation bytes \x80\x80 caf\xc3\xa9",
)


class VersionExistsError(FileExistsError, ValueError):
    """The requested TF Serving version folder already exists."""

# ------------------------------------------------------------------ helpers
def _as_encoder(encoder):
    """A `SentenceEncoder` from an encoder, a trainer or a model name.

    A static model (a `StaticEncoder` or its folder) is refused in one line
    that names its own export, `keras_sentemb.export_static`.
    """
    what = model_kinds.describe(encoder, "encoder")
    if what is not None and model_kinds.model_kind(encoder) == model_kinds.STATIC:
        raise TypeError(f"{what}; export it with keras_sentemb.export_static(encoder, path, "
                        "format=...) (saved-model, litert, sentence-transformers or model2vec).")
    if isinstance(encoder, (str, os.PathLike)):
        return SentenceEncoder.from_preset(os.fspath(encoder))
    if isinstance(encoder, SentenceEncoder):
        return encoder
    if is_keras_hub_model(encoder):  # a keras-hub TextEmbedder: its pooling and normalisation
        return SentenceEncoder.from_preset(encoder)
    inner = getattr(encoder, "encoder", None)
    if isinstance(inner, SentenceEncoder):
        return inner
    raise TypeError(
        "`encoder` must be a SentenceEncoder, an object with a SentenceEncoder "
        "`.encoder` (a trainer), a keras-hub TextEmbedder, or a model name/folder; received "
        f"{type(encoder).__name__}."
    )


def _is_version_name(name):
    return name.isascii() and name.isdigit()


def next_version(path):
    """The next free TF Serving version under `path`: max existing + 1, or 1.

    Only folders whose names are integers count as versions (TF Serving's
    rule); temporary folders of exports in progress are ignored.
    """
    path = Path(path)
    if not path.is_dir():
        return 1
    versions = [
        int(p.name) for p in path.iterdir() if p.is_dir() and _is_version_name(p.name)
    ]
    return max(versions, default=0) + 1


def _to_bytes(sentence, index):
    if isinstance(sentence, str):
        return sentence.encode("utf-8", errors="replace")
    if isinstance(sentence, (bytes, bytearray, np.bytes_)):
        return bytes(sentence)
    raise TypeError(
        f"Sentences must be str or bytes; received {type(sentence).__name__} "
        f"at index {index}: {sentence!r:.80}"
    )


def required_custom_ops(path):
    """Op types in a SavedModel that core TensorFlow does not define.

    For a keras_sentemb export these are tensorflow-text's tokenizer ops
    (e.g. `FastWordpieceTokenizeWithOffsets`, `NormalizeUTF8`,
    `RegexSplitWithOffsets`, and `CaseFoldUTF8` when keras-hub lowercases);
    the serving binary must register them (the
    stock TF Serving model server links tensorflow-text's ops; in Python,
    `import tensorflow_text` does it).

    Args:
        path: str or path. A SavedModel folder (one version).

    Returns:
        Sorted list of op type names.
    """
    proto = compat.saved_model_proto(path)
    ops, functions = set(), set()
    for meta_graph in proto.meta_graphs:
        graph = meta_graph.graph_def
        ops.update(node.op for node in graph.node)
        for function in graph.library.function:
            functions.add(function.signature.name)
            ops.update(node.op for node in function.node_def)
    core = set(CORE_PRIVATE_OPS)
    return sorted(
        op for op in ops
        if op not in functions and op not in core and not hasattr(tf.raw_ops, op)
    )


# ------------------------------------------------------------------- graph
def _serving_functions(encoder, chunk_size, truncate_dim=None, int8=False):
    """The endpoint functions: strings -> embeddings, strings -> tokens."""
    max_length = encoder.max_length
    output_dim = encoder.output_dim
    served_dim = output_dim if truncate_dim is None else truncate_dim
    hidden_dim = encoder.hidden_dim

    def forward(tokens):
        inputs = encoder.pack(tokens, max_length)
        return tf.cast(encoder(inputs, training=False), tf.float32)

    def chunked(tokens):
        # Sort by length so that each chunk is padded only to its own longest
        # sentence, run the chunks in a loop, then restore the input order.
        n = tokens.nrows(out_type=tf.int32)
        order = tf.argsort(tokens.row_lengths(), direction="DESCENDING", stable=True)
        ordered = tf.gather(tokens, order)
        num_chunks = (n + chunk_size - 1) // chunk_size
        outputs = tf.TensorArray(
            tf.float32,
            size=num_chunks,
            infer_shape=False,
            element_shape=tf.TensorShape([None, output_dim]),
        )

        def body(i, outputs):
            part = ordered[i * chunk_size : (i + 1) * chunk_size]
            return i + 1, outputs.write(i, forward(part))

        _, outputs = tf.while_loop(
            lambda i, _: i < num_chunks, body, (tf.constant(0), outputs)
        )
        return tf.gather(outputs.concat(), tf.math.invert_permutation(order))

    def embed(sentences):
        # No XLA-compiled call; the encoding kernels made of TensorFlow ops (`build_export_archive`).
        declare_graph(forward_only=True, serving=True, int8=int8)
        sentences = _as_batch(sentences)
        tokens = encoder.tokenize(sentences)[:, : max_length - 2]
        if chunk_size is None:
            out = forward(tokens)
        else:
            out = tf.cond(
                tokens.nrows(out_type=tf.int32) <= chunk_size,
                lambda: forward(tokens),
                lambda: chunked(tokens),
            )
        if truncate_dim is not None:  # Matryoshka truncation, as `encode(truncate_dim=)`
            out = out[:, :truncate_dim]
            if encoder.normalize:
                out = tf.math.l2_normalize(out, axis=-1, epsilon=1e-12)
        return {OUTPUT_KEY: tf.ensure_shape(out, [None, served_dim])}

    def token_outputs(sentences):
        declare_graph(forward_only=True, serving=True, int8=int8)
        inputs = encoder.preprocess(_as_batch(sentences), max_length)
        last = encoder.hidden_states(inputs, training=False)[-1]
        return {
            "token_embeddings": tf.ensure_shape(
                tf.cast(last, tf.float32), [None, None, hidden_dim]
            ),
            "padding_mask": tf.cast(inputs["padding_mask"], tf.int32),
            "token_ids": tf.cast(inputs["token_ids"], tf.int32),
        }

    return embed, token_outputs


def _as_batch(sentences):
    """`sentences`, checked in the graph to be a 1-D batch of strings.

    The signature declares `[None]`, but servers feed tensors without checking
    the declared shape; a scalar or a `[2, 2]` batch must fail, not be
    flattened into rows nobody asked for.
    """
    # The placeholder's declared rank makes `tf.rank` a trace-time constant;
    # compare the runtime shape with the element count instead. A scalar has
    # shape [] (first entry after padding: -1), a [2, 2] batch shape [2, 2].
    shape = tf.shape(sentences)
    count = tf.size(sentences)
    rank_one = tf.logical_and(
        tf.equal(tf.concat([shape, [-1]], 0)[0], count),
        tf.reduce_all(tf.equal(shape, tf.reshape(count, [1]))),
    )
    check = tf.debugging.Assert(
        rank_one,
        ["`sentences` must be a 1-D tf.string tensor [batch] (one row per sentence); "
         "received shape", shape],
    )
    with tf.control_dependencies([check]):
        return tf.identity(sentences)


def check_export_precision(precision):
    """One of `EXPORT_PRECISIONS`, or a one-line error."""
    if precision not in EXPORT_PRECISIONS:
        raise ValueError(f"`precision` must be one of {list(EXPORT_PRECISIONS)}. "
                         f"Received: precision={precision!r}.")
    return precision


def serving_encoder(encoder, precision):
    """The encoder whose graph the SavedModel holds for `precision`.

    `"float32"`: `encoder`. `"bfloat16"`: its bfloat16 copy (weights and
    matrix multiplies in bfloat16, layer norms, pooling and outputs float32),
    whatever this CPU computes natively: the SavedModel is for the serving
    machine. `"int8"`: the encoder holding its int8 weights, calibrated on
    its `int8_calibration` (`keras_sentemb.models.int8_encoder`).
    """
    if precision == "int8":
        return prepare_int8(encoder)
    return encoder.precision_twin(precision)


def _check_chunk_size(chunk_size):
    if chunk_size is not None and (
        isinstance(chunk_size, bool)
        or not isinstance(chunk_size, (int, np.integer))
        or chunk_size < 1
    ):
        raise ValueError(
            f"`chunk_size` must be a positive int or None, received {chunk_size!r}."
        )
    return None if chunk_size is None else int(chunk_size)


def build_export_archive(
    encoder, token_signature=True, chunk_size=DEFAULT_CHUNK_SIZE, truncate_dim=None,
    precision="float32",
):
    """A `keras.export.ExportArchive` holding the string-in endpoints.

    The archive tracks the tokenizer and every variable that the endpoints
    use (backbone and projection head), and registers `serving_default`
    (strings -> `embeddings`) and, optionally,
    `token_embeddings` (strings -> token-level outputs). Call
    `archive.write_out(path)` to write a SavedModel; `export_saved_model`
    does that and verifies the result. The endpoints declare their graphs
    as serving graphs (`kernels.policy.declare_graph(forward_only=True, serving=True)`):
    TensorFlow ops only, no XLA-compiled call, which a TF Serving build
    without XLA could not run; the fused Transformer layer and the matmul +
    bias + GELU pattern oneDNN fuses apply, as in `encode`.

    Args:
        encoder: `SentenceEncoder` (or a trainer exposing `.encoder`).
        token_signature: bool. Add the `token_embeddings` signature.
            Defaults to `True`.
        chunk_size: int or None. Requests with more sentences are sorted by
            length and run in chunks of this size, each padded to its own
            longest sentence; `None` runs every request as one batch padded
            to its longest sentence. Defaults to `16`.
        truncate_dim: int or None. `embeddings` holds the first
            `truncate_dim` dimensions, renormalised when the encoder
            normalises. Defaults to `None` (all).
        precision: str. What the serving graph computes in: `"float32"`,
            `"bfloat16"` or `"int8"` (`serving_encoder`). Defaults to
            `"float32"`.

    Returns:
        A `keras.export.ExportArchive`.
    """
    precision = check_export_precision(precision)
    encoder = serving_encoder(_as_encoder(encoder), precision)
    chunk_size = _check_chunk_size(chunk_size)
    # Building the tokenizer (and its tensorflow-text model) before tracking.
    encoder.tokenize(tf.constant([""]))
    archive = keras.export.ExportArchive()
    # The tokenizer is tracked for its TF resources (lookup tables, if any).
    # The weights are tracked by `add_endpoint`, which collects every variable
    # the endpoints use (the post-processing layer's included). `track(backbone)` would save each weight twice (the
    # Keras variable and the tf.Variable the graph captures: a 2x larger
    # SavedModel), and `track(encoder)` fails on the encoder's cache of
    # compiled functions (a dict with tuple keys).
    archive.track(encoder.tokenizer)
    embed, token_outputs = _serving_functions(encoder, chunk_size, truncate_dim,
                                              int8=precision == "int8")
    spec = tf.TensorSpec([None], tf.string, name=INPUT_KEY)
    archive.add_endpoint(SERVING_SIGNATURE, embed, input_signature=[spec])
    if token_signature:
        archive.add_endpoint(TOKEN_SIGNATURE, token_outputs, input_signature=[spec])
    return archive


# ------------------------------------------------------------ verification
def _check_signature(signature, name, inputs, outputs):
    _, input_specs = signature.structured_input_signature
    problems = []
    if set(input_specs) != set(inputs):
        problems.append(f"inputs {sorted(input_specs)} (expected {sorted(inputs)})")
    else:
        for key, (dtype, rank) in inputs.items():
            spec = input_specs[key]
            if spec.dtype != dtype or spec.shape.rank != rank:
                problems.append(f"input {key!r} is {spec}")
    output_specs = signature.structured_outputs
    if set(output_specs) != set(outputs):
        problems.append(
            f"outputs {sorted(output_specs)} (expected {sorted(outputs)})"
        )
    else:
        for key, (dtype, shape) in outputs.items():
            spec = output_specs[key]
            if spec.dtype != dtype or not spec.shape.is_compatible_with(shape):
                problems.append(f"output {key!r} is {spec}")
    if problems:
        raise ExportVerificationError(
            f"Signature {name!r} does not match the contract: " + "; ".join(problems)
        )


def _run_signature(signature, sentences, key, batch_size=256):
    parts = []
    for i in range(0, len(sentences), batch_size):
        batch = tf.constant(sentences[i : i + batch_size], tf.string)
        parts.append(signature(**{INPUT_KEY: batch})[key].numpy())
    if not parts:
        return None
    return np.concatenate(parts)


def _reference(encoder, precision, sentences, truncate_dim=None):
    """`encode` of `sentences` in `precision` (on the serving encoder, whatever this CPU has)."""
    compute = serving_encoder(encoder, precision)
    return compute.encode(sentences, truncate_dim=truncate_dim,
                          precision="int8" if precision == "int8" else "float32")


def _reference_token_states(encoder, precision, batch):
    """The last layer's token vectors of `batch` (strings), as the serving graph computes them."""
    compute = serving_encoder(encoder, precision)

    @tf.function(autograph=False)
    def states(sentences):
        declare_graph(forward_only=True, int8=precision == "int8")
        inputs = compute.preprocess(sentences)
        return compute.hidden_states(inputs, training=False)[-1], inputs

    return states(batch)


def verify_saved_model(path, encoder, sentences=None, tolerance=None,
                       truncate_dim=None, precision="float32"):
    """Reload a SavedModel and compare it with eager `encoder.encode`.

    Checks the signature contract (`serving_default`: `sentences` tf.string
    [None] -> `embeddings` float32 [None, dim]), then runs the probe set
    (`PROBE_SENTENCES` plus `sentences`) through the reloaded model and
    through `encoder.encode`. When the `token_embeddings` signature is
    present, its output is compared with the encoder's last hidden states.
    Rows are compared by relative error (`||got - ref|| / ||ref||`, see
    `keras_sentemb.export.parity`), so that the check does not depend on the
    vectors' scale (a whitened model's are far from unit length) nor on the
    CPU's float rounding.

    Args:
        path: str or path. The SavedModel folder (one version).
        encoder: the `SentenceEncoder` that was exported.
        sentences: list of str/bytes or None. Extra probe sentences.
        tolerance: float or None. Largest allowed relative error of a row.
            Defaults to `None`: the precision's (`DEFAULT_TOLERANCES`, 1e-4
            for float32).
        truncate_dim: int or None. The export's truncation (compared with
            `encode(truncate_dim=...)`). Defaults to `None`.
        precision: str. What the serving graph computes in; it is compared
            with `encode` in that precision. Defaults to `"float32"`.

    Returns:
        dict with `max_rel_diff`, `min_cosine`, `max_abs_diff` (for
        information), `token_max_rel_diff` (or None), `num_probes`,
        `tolerance`, `precision` and, for bfloat16 and int8,
        `float32_min_cosine`: the lowest cosine of a row to float32's.

    Raises:
        ExportVerificationError: if the contract does not hold, an output is
            not finite, or a relative error exceeds `tolerance`.
    """
    precision = check_export_precision(precision)
    tolerance = check_tolerance(DEFAULT_TOLERANCES[precision] if tolerance is None else tolerance)
    encoder = _as_encoder(encoder)
    probes = list(PROBE_SENTENCES) + list(sentences or [])
    as_bytes = [_to_bytes(s, i) for i, s in enumerate(probes)]
    loaded = tf.saved_model.load(os.fspath(path))
    signatures = loaded.signatures
    if SERVING_SIGNATURE not in signatures:
        raise ExportVerificationError(
            f"The SavedModel has no {SERVING_SIGNATURE!r} signature "
            f"(found {sorted(signatures)})."
        )
    dim = encoder.output_dim if truncate_dim is None else truncate_dim
    _check_signature(
        signatures[SERVING_SIGNATURE],
        SERVING_SIGNATURE,
        {INPUT_KEY: (tf.string, 1)},
        {OUTPUT_KEY: (tf.float32, [None, dim])},
    )
    got = _run_signature(signatures[SERVING_SIGNATURE], as_bytes, OUTPUT_KEY)
    ref = _reference(encoder, precision, probes, truncate_dim)
    report = compare(got, ref, tolerance, "The SavedModel", probes)
    report["precision"] = precision
    if precision != "float32":
        float32 = encoder.encode(probes, truncate_dim=truncate_dim, precision="float32")
        report["float32_min_cosine"] = float(relative_errors(got, float32)[1].min())
    token_diff = None
    if TOKEN_SIGNATURE in signatures:
        hidden = encoder.hidden_dim
        _check_signature(
            signatures[TOKEN_SIGNATURE],
            TOKEN_SIGNATURE,
            {INPUT_KEY: (tf.string, 1)},
            {
                "token_embeddings": (tf.float32, [None, None, hidden]),
                "padding_mask": (tf.int32, [None, None]),
                "token_ids": (tf.int32, [None, None]),
            },
        )
        batch = tf.constant(as_bytes[: len(PROBE_SENTENCES)], tf.string)
        out = signatures[TOKEN_SIGNATURE](**{INPUT_KEY: batch})
        ref_states, inputs = _reference_token_states(encoder, precision, batch)
        mask = inputs["padding_mask"].numpy()
        if not (
            np.array_equal(out["padding_mask"].numpy(), mask)
            and np.array_equal(out["token_ids"].numpy(), inputs["token_ids"].numpy())
        ):
            raise ExportVerificationError(
                f"The {TOKEN_SIGNATURE!r} signature tokenizes differently "
                "from the encoder."
            )
        real = mask.reshape(-1).astype(bool)
        hidden_dim = ref_states.shape[-1]
        token_diff = compare(
            out["token_embeddings"].numpy().reshape(-1, hidden_dim)[real],
            np.asarray(ref_states, np.float32).reshape(-1, hidden_dim)[real],
            tolerance, f"The {TOKEN_SIGNATURE!r} signature (token vectors)",
        )["max_rel_diff"]
    del loaded
    report.update({"token_max_rel_diff": token_diff, "num_probes": len(probes)})
    return report


# ------------------------------------------------------------------ export
def _metadata(encoder, version, chunk_size, token_signature, report, custom_ops):
    tf_text_version = getattr(tensorflow_text, "__version__", None)
    signatures = {
        SERVING_SIGNATURE: {
            "inputs": {INPUT_KEY: "string [None]"},
            "outputs": {OUTPUT_KEY: f"float32 [None, {encoder.output_dim}]"},
        }
    }
    if token_signature:
        hidden = encoder.hidden_dim
        signatures[TOKEN_SIGNATURE] = {
            "inputs": {INPUT_KEY: "string [None]"},
            "outputs": {
                "token_embeddings": f"float32 [None, None, {hidden}]",
                "padding_mask": "int32 [None, None]",
                "token_ids": "int32 [None, None]",
            },
        }
    return {
        "format_version": EXPORT_FORMAT_VERSION,
        "version": version,
        "signatures": signatures,
        "pooling": encoder.pooling,
        "normalize": encoder.normalize,
        "max_length": encoder.max_length,
        "output_dim": encoder.output_dim,
        "projection_dim": encoder.projection_dim,
        "postprocess": None if encoder.postprocess is None else encoder.postprocess.describe(),
        "chunk_size": chunk_size,
        "required_custom_ops": custom_ops,
        "verification": report,
        "keras_sentemb": __version__,
        "tensorflow": tf.__version__,
        "tensorflow_text": tf_text_version,
        "keras": keras.__version__,
    }


def export_saved_model(
    encoder,
    path,
    version=None,
    *,
    overwrite=False,
    verify=True,
    tolerance=None,
    probe_sentences=None,
    token_signature=True,
    chunk_size=DEFAULT_CHUNK_SIZE,
    check_standalone=False,
    verbose=False,
    truncate_dim=None,
    precision="float32",
    calibration=None,
):
    """Export a string-in, embedding-out SavedModel in the TF Serving layout.

    Writes `path/<version>/` (TF Serving's model base path is `path`). The
    `serving_default` signature takes `sentences` (tf.string, [None]) and
    returns `embeddings` (float32, [None, output_dim]); tokenization
    (with invalid UTF-8 replaced by U+FFFD), truncation to the encoder's
    `max_length`, pooling, the projection head and normalisation all run in
    the graph, and each request is padded only to its longest sentence. The
    encoder's model card (`keras_sentemb.model_card`, with the export's facts
    added) goes to `assets.extra/model_card.json` and `MODEL_CARD.md`. A
    second signature, `token_embeddings`, returns the last layer's token
    vectors with their padding mask and token ids.

    The SavedModel is written to a hidden temporary folder next to the
    version folder, reloaded and compared with `encoder.encode` on
    `PROBE_SENTENCES` (plus `probe_sentences`); only when every row's
    relative error is within `tolerance` is it renamed to `path/<version>` (an atomic rename, so
    TF Serving never sees a half-written version). Otherwise nothing is left
    behind and `ExportVerificationError` is raised.

    Args:
        encoder: `SentenceEncoder`, a trainer exposing `.encoder`, or a model
            name/folder accepted by `SentenceEncoder.from_preset`.
        path: str or path. The model base folder, e.g. `saved_models/NAME`.
        version: int or None. The version folder; `None` takes the next free
            integer (1 for a new model). Defaults to `None`.
        overwrite: bool. Replace an existing version folder (after the new
            one has been verified). Defaults to `False`.
        verify: bool. Reload and compare with `encode`. Defaults to `True`.
        tolerance: float or None. Largest allowed relative error of an
            output row against `encode` in the export's precision
            (`||got - ref|| / ||ref||`, scale-free: whitened vectors are not
            unit-length). Defaults to `None`: the precision's
            (`DEFAULT_TOLERANCES`: 1e-4 for float32, 5e-2 for bfloat16,
            1e-3 for int8).
        probe_sentences: list of str/bytes or None. Extra sentences for the
            verification. Defaults to `None`.
        token_signature: bool. Add the `token_embeddings` signature.
            Defaults to `True`.
        chunk_size: int or None. Requests larger than this are sorted by
            length and run in chunks of this many sentences, each padded to
            its own longest sentence. Defaults to `16`.
        check_standalone: bool. Also load and run the SavedModel in a fresh
            Python process where keras, keras-hub and keras_sentemb cannot be
            imported (a few seconds more). Defaults to `False`.
        verbose: bool. Print a summary. Defaults to `False`.
        truncate_dim: int or None. The SavedModel returns the first
            `truncate_dim` dimensions (renormalised when the encoder
            normalises), as `encode(truncate_dim=...)` does; the signature
            keeps its names. Defaults to `None` (all).
        precision: str. What the serving graph computes in: `"float32"`,
            `"bfloat16"` (weights and matrix multiplies in bfloat16: fast on
            serving CPUs with AVX512-BF16 or AMX) or `"int8"` (int8 matrix
            multiplies with calibrated ranges, `keras_sentemb.models.
            int8_transformer`; TF Serving runs them with TensorFlow's oneDNN
            kernels on, the default on CPUs with AVX512-VNNI, AVX512-BF16 or
            AMX, else `TF_ENABLE_ONEDNN_OPTS=1`). The signature is the same
            (float32 vectors). Defaults to `"float32"`.
        calibration: list of str or None. For `"int8"`: the sentences its
            ranges are calibrated on (sets the encoder's `int8_calibration`).
            Defaults to `None`: the encoder's own, else the bundled sample.

    Returns:
        str. The version folder, e.g. `saved_models/NAME/1`.

    Raises:
        ValueError: for invalid arguments, or when `path` is a file or a
            SavedModel itself.
        VersionExistsError: if `path/<version>` exists and `overwrite` is
            False (a `ValueError` and a `FileExistsError`).
        ExportVerificationError: if the reloaded model does not match
            `encode` within `tolerance` (a `ValueError`).

    Examples:

    ```python
    encoder = keras_sentemb.SentenceEncoder.from_preset("default")
    keras_sentemb.export_saved_model(encoder, "saved_models/minilm")
    # -> "saved_models/minilm/1"; serve with TF Serving, MODEL_NAME=minilm.
    ```
    """
    encoder = _as_encoder(encoder)
    precision = check_export_precision(precision)
    if calibration is not None:
        if precision != "int8":
            raise ValueError("`calibration` applies to precision='int8'.")
        encoder.int8_calibration = calibration
    chunk_size = _check_chunk_size(chunk_size)
    if truncate_dim is not None:
        truncate_dim = check_truncate_dim(truncate_dim, encoder.output_dim)
    if version is not None and (
        isinstance(version, bool)
        or not isinstance(version, (int, np.integer))
        or version < 1
    ):
        raise ValueError(f"`version` must be a positive int or None, received {version!r}.")
    tolerance = check_tolerance(DEFAULT_TOLERANCES[precision] if tolerance is None else tolerance)
    base = Path(os.fspath(path))
    _version_folder(base, version, overwrite)  # the checks, before anything is written
    # One export at a time into a model base folder: a second one is refused in one line.
    with folder_lock(base, "export"):
        return _export_versioned(encoder, base, version, overwrite, precision, chunk_size,
                                 truncate_dim, tolerance, token_signature, verify,
                                 probe_sentences, check_standalone, verbose)


def _export_versioned(encoder, base, version, overwrite, precision, chunk_size, truncate_dim,
                      tolerance, token_signature, verify, probe_sentences, check_standalone,
                      verbose):
    """`export_saved_model` once its arguments are checked and the base folder is held."""
    version, final = _version_folder(base, version, overwrite)

    created_base = not base.exists()
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / f"{_TMP_PREFIX}{version}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        archive = build_export_archive(encoder, token_signature, chunk_size, truncate_dim,
                                       precision=precision)
        with quiet_tensorflow_info():  # TensorFlow's "Assets written to" lines
            archive.write_out(str(tmp), verbose=False)
        del archive
        report = None
        if verify:
            report = verify_saved_model(tmp, encoder, probe_sentences, tolerance=tolerance,
                                        truncate_dim=truncate_dim, precision=precision)
        if check_standalone:
            probes = [_to_bytes(s, i) for i, s in enumerate(PROBE_SENTENCES)]
            outside = run_standalone(tmp, probes, strict=True)
            diff = compare(
                outside, _reference(encoder, precision, probes, truncate_dim), tolerance,
                "In a process without Keras the SavedModel", probes,
            )["max_rel_diff"]
            if report is not None:
                report["standalone_max_rel_diff"] = diff
        _write_metadata_and_card(tmp, encoder, version, chunk_size, token_signature, report,
                                 truncate_dim, precision)
        _swap_in(base, final, tmp, version)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if created_base:
            try:
                base.rmdir()  # only if still empty
            except OSError:
                pass
        raise
    if verbose:
        detail = (
            f"max relative error |SavedModel - encode| = {report['max_rel_diff']:.2g} on "
            f"{report['num_probes']} probes"
            if report
            else "not verified"
        )
        print(f"Exported {final} ({detail}).", file=sys.stderr)
    return str(final)


def _version_folder(base, version, overwrite):
    """`(version, base / version)` for an export to the model base folder `base`.

    Refuses a file, a SavedModel given as the base folder, and an existing
    version without `overwrite`; `version=None` takes the next free one.
    """
    if base.exists() and not base.is_dir():
        raise ValueError(f"Cannot export to {base}: it is a file, not a folder.")
    if (base / "saved_model.pb").exists():
        raise ValueError(
            f"{base} is itself a SavedModel; pass the model base folder "
            f"(e.g. {base.parent}) so that versions go in numbered sub-folders."
        )
    version = next_version(base) if version is None else int(version)
    final = base / str(version)
    if final.exists() and not overwrite:
        raise VersionExistsError(
            f"{final} already exists; pass another version, or overwrite=True."
        )
    return version, final


def _write_metadata_and_card(folder, encoder, version, chunk_size, token_signature, report,
                             truncate_dim, precision="float32"):
    """The export's metadata file and model card, in the SavedModel `folder`."""
    meta = _metadata(
        encoder, version, chunk_size, token_signature, report,
        required_custom_ops(folder),
    )
    meta["precision"] = precision
    if precision == "int8":
        meta["int8"] = {
            "runtime": "TensorFlow's oneDNN kernels (on by default on x86 CPUs with "
                       "AVX512-VNNI, AVX512-BF16 or AMX; elsewhere TF_ENABLE_ONEDNN_OPTS=1)",
            "calibration": "given" if encoder.int8_calibration else "the bundled Wikipedia sample",
            "calibration_sentences": len(encoder.int8_calibration or ())
                                     or DEFAULT_CALIBRATION_SIZE,
        }
    if truncate_dim is not None:
        meta["truncate_dim"] = truncate_dim
        meta["output_dim"] = truncate_dim
        meta["signatures"][SERVING_SIGNATURE]["outputs"] = {
            OUTPUT_KEY: f"float32 [None, {truncate_dim}]"}
    (folder / METADATA_FILE).parent.mkdir(parents=True, exist_ok=True)
    with open(folder / METADATA_FILE, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
    card = build_model_card(encoder)
    card["export"] = {
        "version": version,
        "serving_signature": f"{SERVING_SIGNATURE}: {INPUT_KEY} string [None] -> "
                             f"{OUTPUT_KEY} float32 [None, {truncate_dim or encoder.output_dim}]",
        "truncate_dim": truncate_dim,
        "verified_max_abs_diff": None if report is None else report["max_abs_diff"],
        "verified_max_rel_diff": None if report is None else report["max_rel_diff"],
        "required_custom_ops": meta["required_custom_ops"],
    }
    write_model_card(folder / os.path.dirname(METADATA_FILE), card)


def _swap_in(base, final, tmp, version):
    """Rename the verified `tmp` folder to `final` (atomically; replacing an old one)."""
    if final.exists():  # overwrite=True: swap in the verified folder.
        old = base / f"{_TMP_PREFIX}old-{version}-{uuid.uuid4().hex[:8]}"
        os.rename(final, old)
        os.rename(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, final)
