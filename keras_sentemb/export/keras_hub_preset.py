"""Export to a keras-hub `TextEmbedder` preset folder.

`export_keras_hub(encoder, "my-embedder")` writes what keras-hub's own
`TextEmbedder.save_to_preset` writes (`task.json`, `preprocessor.json`,
`tokenizer.json`, `config.json`, `metadata.json`, `model.weights.h5`,
`assets/tokenizer/`), so `keras_hub.models.TextEmbedder.from_preset(folder)`
loads a `BertTextEmbedder` or `XLMRobertaTextEmbedder` with the encoder's
weights, pooling, normalisation and token limit, without keras_sentemb; and
`keras_hub.upload_preset("kaggle://..." or "hf://...", folder)` publishes it.

A `TextEmbedder` is a backbone, a preprocessor and a pooling (`mean`, `cls`
or `max`) with an optional L2 normalisation; nothing else. An encoder with a
projection head, a post-processing layer (whitening, BERT-flow), another
pooling, a RoBERTa backbone (keras-hub has no RoBERTa `TextEmbedder`) or a
static model is refused before anything is written, naming the format that
carries it.

Two things keras-hub computes its own way: its `BertBackbone` runs the tanh
approximation of GELU (a BERT trained with the exact GELU, such as the
bundled all-MiniLM-L6-v2, then differs by about 1e-3 relative), and its
tokenizer cleans text as keras-hub does (no removal of control and format
characters, NFKC case folding) where an encoder loaded from a Hugging Face
folder cleans it as Hugging Face's BERT tokenizer does. The check before the
folder appears compares the loaded `TextEmbedder` with `encode()` in float32
on `PROBE_SENTENCES` (those the two cleanings read alike) plus the caller's
sentences, with a tolerance that allows the GELU difference only when there
is one.
"""

import logging
import os
import sys
import unicodedata

import keras_hub
import numpy as np
import tensorflow as tf

from keras_sentemb.export.huggingface import NotExportableError
from keras_sentemb.export.parity import DEFAULT_TOLERANCE
from keras_sentemb.export.parity import ExportVerificationError
from keras_sentemb.export.parity import check_tolerance
from keras_sentemb.export.parity import compare
from keras_sentemb.export.saved_model import PROBE_SENTENCES
from keras_sentemb.export.saved_model import _as_encoder
from keras_sentemb.io_utils import atomic_folder
from keras_sentemb.kernels.fused_gelu import gelu_form
from keras_sentemb.models.encoding_engine import to_text
from keras_sentemb.models.keras_hub_models import TEXT_EMBEDDER_POOLINGS
from keras_sentemb.models.keras_hub_models import copy_backbone
from keras_sentemb.models.static_encoder import StaticEncoder
from keras_sentemb.models.whitening import Whitening

logger = logging.getLogger(__name__)

FORMAT = "keras-hub"
# Largest relative error when keras-hub's backbone computes another GELU form than the
# encoder (BERT: keras-hub's tanh approximation, the encoder the exact erf form): the
# all-MiniLM-L6-v2 weights differ by ~1.5e-3 on the probes; 4e-3 keeps the cosine of
# every probe above 0.99999, and a wrong weight, tokenizer or pooling is ~1e-1.
GELU_FORM_TOLERANCE = 4e-3
# The formats that carry what a TextEmbedder cannot, as the refusals name them.
CARRIERS = {
    "sentence-transformers": "the sentence-transformers format (--format sentence-transformers, "
                             "export_huggingface)",
    "saved-model": "the SavedModel format (--format saved-model, export_saved_model)",
}
# Characters Hugging Face's BERT cleaning deletes and keras-hub's tokenizer keeps.
_DELETED_CATEGORIES = ("Cc", "Cf", "Co", "Cs")


def _classes(backbone):
    """`(TextEmbedder class, preprocessor class)` for `backbone`, or None."""
    models = keras_hub.models
    if isinstance(backbone, models.BertBackbone):
        return models.BertTextEmbedder, models.BertTextEmbedderPreprocessor
    if isinstance(backbone, models.XLMRobertaBackbone):
        return models.XLMRobertaTextEmbedder, models.XLMRobertaTextEmbedderPreprocessor
    return None


def check_keras_hub_exportable(encoder):
    """Raise `NotExportableError` (one line naming the format that can) unless a `TextEmbedder` carries `encoder`."""
    if isinstance(encoder, StaticEncoder):
        raise NotExportableError(
            "A keras-hub TextEmbedder runs a Transformer; a static model (a table of token "
            "vectors) exports in the sentence-transformers or model2vec format (--format "
            "sentence-transformers|model2vec, export_static)."
        )
    backbone = encoder.backbone
    if _classes(backbone) is None:
        raise NotExportableError(
            f"keras-hub has TextEmbedders for BERT and XLM-RoBERTa backbones only, not for a "
            f"{type(backbone).__name__}; {CARRIERS['sentence-transformers']} carries this model."
        )
    if getattr(encoder, "prompt", None) is not None:
        raise NotExportableError(
            f"A keras-hub TextEmbedder's preprocessor packs the sentence alone; this encoder "
            f"frames it in the prompt {encoder.prompt.template!r}; "
            f"{CARRIERS['saved-model']} carries it."
        )
    if encoder.pooling not in TEXT_EMBEDDER_POOLINGS:
        raise NotExportableError(
            f"A keras-hub TextEmbedder pools with {', '.join(TEXT_EMBEDDER_POOLINGS)}, not "
            f"{encoder.pooling!r}; {CARRIERS['saved-model']} carries any pooling."
        )
    if encoder.projection is not None:
        raise NotExportableError(
            "A keras-hub TextEmbedder has no projection head (pooling and normalisation "
            f"only); {CARRIERS['sentence-transformers']} carries it (a Dense module)."
        )
    post = encoder.postprocess
    if post is not None:
        carrier = "sentence-transformers" if isinstance(post, Whitening) else "saved-model"
        raise NotExportableError(
            f"A keras-hub TextEmbedder has no {type(post).__name__} post-processing layer; "
            f"{CARRIERS[carrier]} carries it."
        )


def _exportable(encoder):
    """The `SentenceEncoder` of `encoder` (see `_as_encoder`), checked by `check_keras_hub_exportable`."""
    if not isinstance(encoder, StaticEncoder):
        encoder = _as_encoder(encoder)  # a static folder's name gives a StaticEncoder
    check_keras_hub_exportable(encoder)
    return encoder


def _tokenizer(encoder):
    """The keras-hub tokenizer the preset holds: the encoder's, with keras-hub's own cleaning.

    An encoder loaded from a Hugging Face BERT folder cleans text itself
    (`text_normalization`) and runs its tokenizer with lowercasing and
    accent stripping off; keras-hub's tokenizer is given them back, which is
    what the folder's `do_lower_case` means to keras-hub's converter too.
    """
    tokenizer = encoder.tokenizer
    if encoder.text_normalization is None:
        return tokenizer
    uncased = encoder.text_normalization == "bert_uncased"
    config = tokenizer.get_config()
    config.update(vocabulary=tokenizer.get_vocabulary(), lowercase=uncased,
                  strip_accents=uncased)
    config.pop("name", None)
    return type(tokenizer).from_config(config)


def to_text_embedder(encoder):
    """A keras-hub `TextEmbedder` computing what `encoder` computes (float32 weights, a copy).

    Args:
        encoder: `SentenceEncoder` (or a trainer exposing `.encoder`, or a
            model name/folder).

    Returns:
        A `keras_hub.models.BertTextEmbedder` or `XLMRobertaTextEmbedder`
        with a copy of the encoder's backbone, its tokenizer in a preprocessor
        of `sequence_length=encoder.max_length`, its pooling
        (`pooling_mode`) and normalisation.

    Raises:
        NotExportableError: a `TextEmbedder` cannot express the encoder.
    """
    encoder = _exportable(encoder)
    embedder_cls, preprocessor_cls = _classes(encoder.backbone)
    preprocessor = preprocessor_cls(_tokenizer(encoder), sequence_length=encoder.max_length)
    return embedder_cls(
        copy_backbone(encoder.backbone, dtype="float32"),
        preprocessor,
        pooling_mode=encoder.pooling,
        normalize=encoder.normalize,
    )


def cleans_alike(text, text_normalization):
    """Whether keras-hub's tokenizer reads `text` as the encoder's text cleaning does.

    Always for an encoder without its own cleaning (it runs keras-hub's);
    for `"bert_uncased"` / `"bert_cased"` (Hugging Face's BERT rules), not
    for text holding a control, format or private-use character or U+FFFD
    (Hugging Face deletes them, keras-hub keeps them) nor, uncased, for text
    whose NFKC case folding (keras-hub's) differs from lower-casing (e.g.
    "ß", ligatures, full-width forms, Hangul syllables).
    """
    if text_normalization is None:
        return True
    for ch in text:
        if ch == "\ufffd" or (
            ch not in "\t\n\r" and unicodedata.category(ch) in _DELETED_CATEGORIES
        ):
            return False
    if text_normalization == "bert_uncased":
        stripped = "".join(c for c in unicodedata.normalize("NFD", text)
                           if unicodedata.category(c) != "Mn")
        hf = "".join(c for c in unicodedata.normalize("NFD", text.lower())
                     if unicodedata.category(c) != "Mn")
        return unicodedata.normalize("NFKC", stripped.casefold()) == hf
    return True


def _default_tolerance(encoder, embedder):
    ours = gelu_form(encoder.adapter.transformer_layers)
    theirs = gelu_form(embedder.backbone.transformer_layers)
    return DEFAULT_TOLERANCE if ours == theirs else GELU_FORM_TOLERANCE


def encode_by_length(embedder, sentences, batch_size=32):
    """`embedder.encode_text(sentences)`, each sentence padded to its length's bucket, not to the preset's.

    `encode_text` is `predict`: the preprocessor on a batch of strings, then
    the model; this runs the same two calls. A keras-hub preprocessor pads
    every sentence to `sequence_length` (e.g. 256); padding changes no
    vector (attention and pooling skip it), so sentences are encoded in
    groups padded to the next power of two of their token count (at least
    16, at most `sequence_length`, where they are truncated as the preset
    truncates). Float32 `[n, dim]`.
    """
    preprocessor = embedder.preprocessor
    full = int(preprocessor.sequence_length)
    counts = np.array([len(ids) for ids in preprocessor.tokenizer(list(sentences))]) + 2
    widths = np.minimum(full, np.maximum(16, 2 ** np.ceil(np.log2(counts)))).astype(int)
    out = np.zeros((len(sentences), 0), np.float32)
    try:
        for width in sorted(set(widths.tolist())):
            rows = np.flatnonzero(widths == width)
            preprocessor.sequence_length = width
            for start in range(0, len(rows), batch_size):
                chunk = rows[start:start + batch_size]
                # What `encode_text` (`predict`) runs on a batch: the preprocessor, then the model.
                inputs = preprocessor(tf.constant([sentences[i] for i in chunk]))
                vectors = np.asarray(embedder(inputs, training=False), np.float32)
                if out.shape[1] != vectors.shape[1]:
                    out = np.zeros((len(sentences), vectors.shape[1]), np.float32)
                out[chunk] = vectors
    finally:
        preprocessor.sequence_length = full
    return out


def verify_keras_hub(path, encoder, sentences=None, tolerance=None):
    """Load a `TextEmbedder` preset with keras-hub and compare it with `encode()` in float32.

    `keras_hub.models.TextEmbedder.from_preset(path)` must give the
    embedder class of the encoder's backbone, and its `encode_text` the
    vectors of `encoder.encode(..., precision="float32")` on
    `PROBE_SENTENCES` plus `sentences`, row by row within `tolerance`
    (relative error, `keras_sentemb.export.parity`). Probes the two text
    cleanings read differently (`cleans_alike`) are left out of the default
    probes and counted; `sentences` are always compared.

    Returns:
        dict with `max_rel_diff`, `min_cosine`, `max_abs_diff`, `tolerance`,
        `num_probes` and `probes_cleaned_otherwise`.

    Raises:
        ExportVerificationError: the folder does not load as the expected
            `TextEmbedder` or computes something else.
    """
    encoder = _as_encoder(encoder)
    embedder = keras_hub.models.TextEmbedder.from_preset(os.fspath(path))
    expected, _ = _classes(encoder.backbone)
    if type(embedder) is not expected:
        raise ExportVerificationError(
            f"The keras-hub folder loads as a {type(embedder).__name__}, not a "
            f"{expected.__name__}."
        )
    if tolerance is None:
        tolerance = _default_tolerance(encoder, embedder)
    tolerance = check_tolerance(tolerance)
    probes = [to_text(s) for s in PROBE_SENTENCES]
    kept = [p for p in probes if cleans_alike(p, encoder.text_normalization)]
    probes = kept + [to_text(s) for s in (sentences or [])]
    got = encode_by_length(embedder, probes)
    ref = encoder.encode(probes, precision="float32")
    report = compare(got, ref, tolerance, "The keras-hub TextEmbedder folder", probes)
    report["num_probes"] = len(probes)
    report["probes_cleaned_otherwise"] = len(PROBE_SENTENCES) - len(kept)
    return report


def export_keras_hub(
    encoder,
    path,
    *,
    overwrite=False,
    verify=True,
    tolerance=None,
    probe_sentences=None,
    verbose=False,
):
    """Write a keras-hub `TextEmbedder` preset folder, checked before it appears.

    The folder is `TextEmbedder.save_to_preset`'s (float32 weights):
    `keras_hub.models.TextEmbedder.from_preset(path)` loads it as a
    `BertTextEmbedder` or `XLMRobertaTextEmbedder` (no keras_sentemb
    needed), `keras_hub.upload_preset(uri, path)` publishes it to Kaggle or
    Hugging Face, and it loads back here with `SentenceEncoder.from_preset`
    (as keras-hub computes it). It is written under a temporary sibling,
    loaded with keras-hub and compared with `encode()` in float32
    (`verify_keras_hub`); only then is it renamed to `path` (replacing a
    model there only with `overwrite`). What a `TextEmbedder` cannot carry
    (a projection head, whitening, BERT-flow, a pooling other than `mean`,
    `cls`, `max`, a RoBERTa backbone, a static model) is refused before
    anything is written.

    Args:
        encoder: `SentenceEncoder`, a trainer exposing `.encoder`, or a model
            name/folder accepted by `SentenceEncoder.from_preset`.
        path: str or path. The folder to create.
        overwrite: bool. Replace a model already at `path`. Defaults to
            `False`.
        verify: bool. Load with keras-hub and compare. Defaults to `True`.
        tolerance: float or None. Largest relative error of a probe's
            vector. Defaults to `1e-4`, or `4e-3` when keras-hub's backbone
            computes another GELU form than the encoder (a BERT with the
            exact GELU; keras-hub's BERT runs the tanh approximation).
        probe_sentences: list of str or None. Extra probes (always
            compared). Defaults to `None`.
        verbose: bool. Print a summary on stderr. Defaults to `False`.

    Returns:
        str. The folder.

    Raises:
        NotExportableError: a `TextEmbedder` cannot express the encoder (a
            `ValueError`; the message names the format that can).
        FileExistsError: `path` holds a model and `overwrite` is False.
        ExportVerificationError: the folder does not reproduce the encoder.

    Examples:

    ```python
    encoder = keras_sentemb.fit_simcse("corpus.txt")
    keras_sentemb.export_keras_hub(encoder, "my-embedder")
    embedder = keras_hub.models.TextEmbedder.from_preset("my-embedder")
    # keras_hub.upload_preset("kaggle://USER/MODEL/keras/VARIATION", "my-embedder")
    ```
    """
    encoder = _exportable(encoder)
    embedder = to_text_embedder(encoder)
    if tolerance is not None:
        tolerance = check_tolerance(tolerance)
    report = None
    with atomic_folder(path, overwrite=overwrite) as folder:
        embedder.save_to_preset(str(folder))
        if verify:
            report = verify_keras_hub(folder, encoder, probe_sentences, tolerance)
    if verbose:
        detail = (f"max relative error {report['max_rel_diff']:.2g}, min cosine "
                  f"{report['min_cosine']:.7f} on {report['num_probes']} probes"
                  if report else "not verified")
        print(f"Exported {path} ({FORMAT}, {type(embedder).__name__}; {detail}).",
              file=sys.stderr)
    return os.fspath(path)
