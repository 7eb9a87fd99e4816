"""Export to Hugging Face folders: sentence-transformers or a bare transformers model.

`export_huggingface(encoder, "my-model")` writes the folder that
sentence-transformers writes for the same model, so `SentenceTransformer(
"my-model")`, transformers, text-embeddings-inference and the Hugging Face
Hub read it directly; it loads back here with `SentenceEncoder.from_preset`.
`format="transformers"` writes only the backbone and tokenizer
(`AutoModel.from_pretrained`). The package writes these files with numpy,
safetensors and tokenizers; it never imports PyTorch.
"""

import json
import logging
import os
import sys
from pathlib import Path

import keras_hub
import numpy as np
import tensorflow as tf

from keras_sentemb.export import hf_tokenizer
from keras_sentemb.export import hf_weights
from keras_sentemb.export.hf_card import write_hf_card
from keras_sentemb.export.parity import DEFAULT_TOLERANCE
from keras_sentemb.export.parity import ExportVerificationError
from keras_sentemb.export.parity import check_tolerance
from keras_sentemb.export.parity import compare
from keras_sentemb.export.parity import reference_vectors
from keras_sentemb.export.saved_model import PROBE_SENTENCES
from keras_sentemb.export.saved_model import _as_encoder
from keras_sentemb.io_utils import atomic_folder
from keras_sentemb.models.encoding_engine import to_text
from keras_sentemb.models.sentence_encoder import SentenceEncoder
from keras_sentemb.models.whitening import Whitening
from keras_sentemb.version import __version__

logger = logging.getLogger(__name__)

FORMATS = ("sentence-transformers", "transformers")
# Encoder pooling -> the flag of sentence-transformers' `Pooling` module.
ST_POOLINGS = {
    "cls": "pooling_mode_cls_token",
    "mean": "pooling_mode_mean_tokens",
    "max": "pooling_mode_max_tokens",
}
ST_POOLING_FLAGS = (
    "pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)
# Keras activation of the projection head -> the torch module sentence-transformers' `Dense` runs.
TORCH_ACTIVATIONS = {
    None: "torch.nn.modules.linear.Identity",
    "linear": "torch.nn.modules.linear.Identity",
    "tanh": "torch.nn.modules.activation.Tanh",
    "relu": "torch.nn.modules.activation.ReLU",
    "sigmoid": "torch.nn.modules.activation.Sigmoid",
    "gelu": "torch.nn.modules.activation.GELU",
}
ST_TYPES = {
    "transformer": "sentence_transformers.models.Transformer",
    "pooling": "sentence_transformers.models.Pooling",
    "dense": "sentence_transformers.models.Dense",
    "normalize": "sentence_transformers.models.Normalize",
}
# Folder name suffix of the `Dense` module that holds a whitening (read back
# as a post-processing layer, see `keras_sentemb.models.st_modules`).
WHITENING_SUFFIX = "_Whitening"


_NORMALIZATION_HINT = (
    "The encoder cleans text with keras-hub's tokenizer (text_normalization=None), which "
    "differs from Hugging Face's BERT tokenizer on some text (U+FFFD, control and format "
    "characters, NFKC forms); build it with text_normalization='bert_uncased' or "
    "'bert_cased' (what the folder runs) before exporting."
)


class NotExportableError(ValueError):
    """The encoder computes something the requested folder format cannot express."""


def check_exportable(encoder, format="sentence-transformers"):
    """Raise `NotExportableError` unless `format` can express `encoder` exactly.

    sentence-transformers has `cls`, `mean` and `max` pooling, a `Dense`
    module (a projection head with an identity, tanh, ReLU, sigmoid or GELU
    activation; a whitening, mean folded into the bias) and `Normalize`. A
    bare transformers folder has the backbone only, so a projection head or
    post-processing layer cannot go there.
    """
    if format not in FORMATS:
        raise ValueError(f"`format` must be one of {FORMATS}. Received: format={format!r}.")

    tokenizer = encoder.tokenizer
    kinds = (keras_hub.tokenizers.WordPieceTokenizer, keras_hub.tokenizers.BytePairTokenizer)
    if not isinstance(tokenizer, kinds) or (
        isinstance(tokenizer, kinds[1]) != (encoder.adapter.family == "roberta")
    ):
        raise NotExportableError(
            f"Only BERT (WordPiece) and RoBERTa (byte-level BPE) models export to Hugging Face "
            f"folders; this encoder has a {type(encoder.backbone).__name__} with a "
            f"{type(tokenizer).__name__}."
        )
    if getattr(encoder, "prompt", None) is not None:
        raise NotExportableError(
            f"A Hugging Face folder tokenizes sentences as they are; this encoder frames them "
            f"in the prompt {encoder.prompt.template!r}. Export the SavedModel "
            "(--format saved-model), which frames them as encode does."
        )
    post = encoder.postprocess
    if format == "transformers":
        parts = [name for name, present in (
            ("a projection head", encoder.projection is not None),
            (f"a {type(post).__name__} post-processing layer", post is not None),
        ) if present]
        if parts:
            raise NotExportableError(
                f"A transformers folder holds only the backbone; this encoder also has "
                f"{' and '.join(parts)}. Export with format='sentence-transformers'."
            )
        return
    if encoder.pooling not in ST_POOLINGS:
        raise NotExportableError(
            f"sentence-transformers cannot express {encoder.pooling!r} pooling; the "
            f"poolings that export are {', '.join(ST_POOLINGS)}. Choose one of them "
            "(e.g. --pooling mean) or export the SavedModel, which runs any pooling."
        )
    if encoder.projection is not None and encoder.projection_activation not in TORCH_ACTIVATIONS:
        raise NotExportableError(
            f"The projection head's activation {encoder.projection_activation!r} has no "
            f"sentence-transformers Dense equivalent here; exportable: "
            f"{', '.join(str(a) for a in TORCH_ACTIVATIONS)}."
        )
    if post is not None and not isinstance(post, Whitening):
        raise NotExportableError(
            f"sentence-transformers cannot express the {type(post).__name__} post-processing "
            "layer (a non-linear flow); only Whitening (a Dense module) exports. Export the "
            "SavedModel, which runs it, or remove it (encoder.postprocess = None)."
        )


def _write_json(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")


def _dense(folder, name, kernel, bias, activation, dtype):
    """A sentence-transformers `Dense` module: `activation(x @ kernel + bias)`."""
    target = hf_weights._np_dtype(dtype)
    kernel, bias = np.asarray(kernel, np.float64), np.asarray(bias, np.float64)
    _write_json(folder / name / "config.json", {
        "in_features": int(kernel.shape[0]),
        "out_features": int(kernel.shape[1]),
        "bias": True,
        "activation_function": TORCH_ACTIVATIONS[activation],
    })
    hf_weights.save_safetensors({
        "linear.weight": np.ascontiguousarray(kernel.T.astype(np.float32).astype(target)),
        "linear.bias": np.ascontiguousarray(bias.astype(np.float32).astype(target)),
    }, folder / name / "model.safetensors")


def write_st_modules(encoder, folder, dtype="float32", prompts=None):
    """The sentence-transformers files of `encoder` (the Transformer's own files aside).

    Modules: Transformer, Pooling, `Dense` (projection head), `Normalize`,
    `Dense` (whitening: `(x - mean) @ K` = `x @ K + (-mean @ K)`), in the
    order the encoder applies them.
    """
    modules = [{"path": "", "type": ST_TYPES["transformer"]}]
    pooling = {flag: False for flag in ST_POOLING_FLAGS}
    pooling[ST_POOLINGS[encoder.pooling]] = True
    _write_json(folder / "1_Pooling" / "config.json",
                {"word_embedding_dimension": encoder.hidden_dim, **pooling, "include_prompt": True})
    modules.append({"path": "1_Pooling", "type": ST_TYPES["pooling"]})
    if encoder.projection is not None:
        name = f"{len(modules)}_Dense"
        kernel, bias = encoder.projection.get_weights()
        _dense(folder, name, kernel, bias, encoder.projection_activation, dtype)
        modules.append({"path": name, "type": ST_TYPES["dense"]})
    if encoder.normalize:
        name = f"{len(modules)}_Normalize"
        (folder / name).mkdir()
        modules.append({"path": name, "type": ST_TYPES["normalize"]})
    if encoder.postprocess is not None:
        name = f"{len(modules)}{WHITENING_SUFFIX}"
        mean, kernel = (w.astype("float64") for w in encoder.postprocess.get_weights())
        _dense(folder, name, kernel, -mean @ kernel, None, dtype)
        modules.append({"path": name, "type": ST_TYPES["dense"]})
    _write_json(folder / "modules.json", [
        {"idx": i, "name": str(i), **m} for i, m in enumerate(modules)
    ])
    _write_json(folder / "sentence_bert_config.json",
                {"max_seq_length": encoder.max_length, "do_lower_case": False})
    _write_json(folder / "config_sentence_transformers.json", {
        "__version__": {"keras_sentemb": __version__},
        "model_type": "SentenceTransformer",
        "prompts": dict(prompts or {}),
        "default_prompt_name": None,
        "similarity_fn_name": "cosine",
    })


def verify_huggingface(path, encoder, format="sentence-transformers", sentences=None,
                       tolerance=DEFAULT_TOLERANCE):
    """Reload an exported folder with `SentenceEncoder.from_preset` and compare with `encoder`.

    A sentence-transformers folder must give `encode()`'s vectors on
    `PROBE_SENTENCES` (plus `sentences`); a transformers folder the same
    token ids and last-layer token vectors. Rows are compared by relative
    error (`keras_sentemb.export.parity`). An encoder that computes in
    bfloat16 is compared in float32, as the folder computes.

    Returns:
        dict with `max_rel_diff`, `min_cosine`, `max_abs_diff`, `tolerance`
        and `num_probes`.

    Raises:
        ExportVerificationError: when the folder computes something else.
    """
    probes = [to_text(s) for s in list(PROBE_SENTENCES) + list(sentences or [])]
    what = f"The exported {format} folder"
    # The folder computes in float32 (its weights are the encoder's variables);
    # an encoder that computes in bfloat16 is compared through its float32 twin.
    if encoder.backbone.dtype_policy.compute_dtype != "float32":
        encoder = encoder.precision_twin("float32")
    if format == "sentence-transformers":
        loaded = SentenceEncoder.from_preset(os.fspath(path))
        try:
            # sentence-transformers computes the folder in float32: both sides
            # encode in float32, whatever this process's `encode()` defaults to.
            report = compare(reference_vectors(loaded, probes, "float32"),
                             reference_vectors(encoder, probes, "float32"), tolerance, what,
                             probes)
        except ExportVerificationError as e:
            if encoder.text_normalization is None and encoder.adapter.family == "bert":
                raise ExportVerificationError(f"{e} {_NORMALIZATION_HINT}") from None
            raise
    else:
        loaded = SentenceEncoder.from_preset(os.fspath(path), max_length=encoder.max_length)
        batch = tf.constant([p.encode("utf-8") for p in probes])
        ours, theirs = encoder.preprocess(batch), loaded.preprocess(batch)
        if not np.array_equal(ours["token_ids"].numpy(), theirs["token_ids"].numpy()):
            hint = _NORMALIZATION_HINT if encoder.text_normalization is None else ""
            raise ExportVerificationError(
                f"{what} tokenizes differently from the encoder. {hint}".strip()
            )
        mask = ours["padding_mask"].numpy().reshape(-1).astype(bool)
        dim = encoder.hidden_dim
        # Token vectors of the float32 twin and of the folder loaded in
        # float32 (its stored policy): transformers computes float32.
        report = compare(
            np.asarray(loaded.hidden_states(theirs)[-1], np.float32).reshape(-1, dim)[mask],
            np.asarray(encoder.hidden_states(ours)[-1], np.float32).reshape(-1, dim)[mask],
            tolerance, f"{what} (token vectors)",
        )
    report["num_probes"] = len(probes)
    return report


def export_huggingface(
    encoder,
    path,
    format="sentence-transformers",
    *,
    overwrite=False,
    dtype="float32",
    verify=True,
    tolerance=None,
    probe_sentences=None,
    prompts=None,
    license=None,
    datasets=None,
    verbose=False,
):
    """Write a Hugging Face folder: sentence-transformers (default) or bare transformers.

    The folder holds what those libraries write themselves: `config.json`
    (`BertModel` / `RobertaModel` with the encoder's sizes and `torch_dtype`),
    `model.safetensors` (their weight names and layouts), the tokenizer files
    (`vocab.txt` or `vocab.json` + `merges.txt`, `tokenizer_config.json`,
    `special_tokens_map.json`, `tokenizer.json`) and a `README.md` model card
    for the Hub. A sentence-transformers folder adds `modules.json`,
    `sentence_bert_config.json`, `1_Pooling/`, a `Dense` module for a
    projection head and one for a whitening, `Normalize` when the encoder
    normalizes, and `config_sentence_transformers.json`.

    The folder is written under a temporary sibling, reloaded with
    `SentenceEncoder.from_preset` and compared with the encoder on
    `PROBE_SENTENCES`; only when it reproduces the encoder within `tolerance`
    is it renamed to `path` (replacing an earlier model there only with
    `overwrite`). Otherwise nothing is left behind. A pooling or
    post-processing the format cannot express (`first_last`, `layer:K`,
    `sbert_wk`, BERT-flow, ...) is refused before anything is written.

    Args:
        encoder: `SentenceEncoder`, a trainer exposing `.encoder` (its
            training-only heads are not part of the encoder), or a model
            name/folder accepted by `SentenceEncoder.from_preset`.
        path: str or path. The folder to create.
        format: str. `"sentence-transformers"` or `"transformers"`.
            Defaults to `"sentence-transformers"`.
        overwrite: bool. Replace a model already at `path`. Defaults to
            `False`.
        dtype: str. Weights as `"float32"`, `"float16"` or `"bfloat16"`,
            whatever the encoder computes in. Defaults to `"float32"`.
        verify: bool. Reload and compare. Defaults to `True`.
        tolerance: float or None. Largest relative error of a probe's vector
            (token vectors for `"transformers"`). Defaults to `1e-4` for
            float32 weights, `5e-3` for float16 and `5e-2` for bfloat16.
        probe_sentences: list of str or None. Extra probes. Defaults to
            `None`.
        prompts: dict or None. sentence-transformers prompts (name -> text
            prepended to the input). Defaults to `None`.
        license: str or None. The card's `license`. Defaults to `None`
            (the bundled default model's license when the encoder was
            trained from it, else none).
        datasets: list of str or None. Hub dataset ids for the card.
            Defaults to `None`.
        verbose: bool. Print a summary on stderr. Defaults to `False`.

    Returns:
        str. The folder.

    Raises:
        NotExportableError: the format cannot express the encoder (a
            `ValueError`).
        FileExistsError: `path` holds a model and `overwrite` is False.
        ExportVerificationError: the written folder does not reproduce the
            encoder (a `ValueError`).

    Examples:

    ```python
    encoder = keras_sentemb.fit_ct("corpus.txt")
    keras_sentemb.export_huggingface(encoder, "my-ct-model")
    # from sentence_transformers import SentenceTransformer
    # SentenceTransformer("my-ct-model").encode(["A sentence."])
    ```

    References:
        - [Reimers & Gurevych, 2019](https://arxiv.org/abs/1908.10084)
    """
    encoder = _as_encoder(encoder)
    check_exportable(encoder, format)
    hf_weights._np_dtype(dtype)
    if tolerance is None:
        tolerance = {"float32": DEFAULT_TOLERANCE, "float16": 5e-3, "bfloat16": 5e-2}[dtype]
    tolerance = check_tolerance(tolerance)
    if prompts is not None and not (
        isinstance(prompts, dict) and all(isinstance(v, str) for v in prompts.values())
    ):
        raise ValueError(f"`prompts` must be a dict of str -> str, received {prompts!r}.")
    report = None
    with atomic_folder(path, overwrite=overwrite) as folder:
        folder = Path(folder)
        backbone = encoder.backbone
        _write_json(folder / "config.json", hf_weights.hf_config(backbone, dtype))
        hf_weights.save_safetensors(
            hf_weights.hf_state_dict(backbone, dtype), folder / "model.safetensors"
        )
        hf_tokenizer.write_tokenizer_files(encoder, folder)
        if format == "sentence-transformers":
            write_st_modules(encoder, folder, dtype, prompts)
        if verify:
            report = verify_huggingface(folder, encoder, format, probe_sentences, tolerance)
        write_hf_card(folder, encoder, format, report, license=license, datasets=datasets)
    if verbose:
        detail = (f"max relative error {report['max_rel_diff']:.2g} on "
                  f"{report['num_probes']} probes" if report else "not verified")
        print(f"Exported {path} ({format}; {detail}).", file=sys.stderr)
    return os.fspath(path)
