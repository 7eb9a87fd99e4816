"""A static encoder as the folders sentence-transformers and model2vec load, and `export_static`.

Both formats average plain token vectors, so the per-token weights are
multiplied into the table (`StaticEncoder.folded_table`); the vectors are
the same. Tokenizing is the teacher's `tokenizer.json`, without special
tokens, as in `StaticEncoder.encode`:

- `format="sentence-transformers"`: `modules.json` with a `StaticEmbedding`
  module (`0_StaticEmbedding/`: `model.safetensors` with
  `embedding.weight`, `tokenizer.json`) and, when the encoder normalises,
  `Normalize`. `SentenceTransformer(path)` loads it.
- `format="model2vec"`: `model.safetensors` (`embeddings`),
  `tokenizer.json` and `config.json` (`model_type: model2vec`, `normalize`),
  plus `modules.json`, as model2vec writes them;
  `model2vec.StaticModel.from_pretrained(path)` loads it (and
  sentence-transformers too). model2vec drops `[UNK]` tokens before
  averaging, and cuts sentences at 512 tokens by default; sentences
  without unknown characters encode the same.

Each folder is written under a temporary name, read back by a
reader that does what the consumer does (safetensors, the tokenizer,
mean, normalisation; numpy), compared with `encode`, and only then renamed
into place. The tests load each in its real consumer, in a PyTorch
interpreter of its own.
"""

import json
import os

import numpy as np

from keras_sentemb.export.parity import check_tolerance
from keras_sentemb.export.parity import compare
from keras_sentemb.export.parity import reference_vectors
from keras_sentemb.io_utils import atomic_folder
from keras_sentemb.models import static_runtime
from keras_sentemb.models.static_runtime import PROBES
from keras_sentemb.version import __version__

FORMATS = ("sentence-transformers", "model2vec", "saved-model", "litert")
ST_MODULE = "0_StaticEmbedding"
DEFAULT_TOLERANCE = 1e-4


def _write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)


def _save_table(path, key, table):
    from safetensors.numpy import save_file

    save_file({key: np.ascontiguousarray(table, np.float32)}, os.fspath(path))


def write_sentence_transformers(encoder, folder):
    """The sentence-transformers files of a static encoder in `folder` (a `pathlib.Path`)."""
    module = folder / ST_MODULE
    module.mkdir()
    _save_table(module / static_runtime.TABLE_FILE, "embedding.weight", encoder.folded_table())
    encoder.tokenizer.save(str(module / static_runtime.TOKENIZER_FILE))
    modules = [{"idx": 0, "name": "0", "path": ST_MODULE,
                "type": "sentence_transformers.models.StaticEmbedding"}]
    if encoder.normalize:
        (folder / "1_Normalize").mkdir()
        modules.append({"idx": 1, "name": "1", "path": "1_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    _write_json(folder / "modules.json", modules)
    _write_json(folder / "config_sentence_transformers.json", {
        "__version__": {"keras_sentemb": __version__}, "model_type": "SentenceTransformer",
        "prompts": {}, "default_prompt_name": None, "similarity_fn_name": "cosine"})


def write_model2vec(encoder, folder):
    """The model2vec files of a static encoder in `folder` (a `pathlib.Path`)."""
    _save_table(folder / static_runtime.TABLE_FILE, "embeddings", encoder.folded_table())
    encoder.tokenizer.save(str(folder / static_runtime.TOKENIZER_FILE))
    distillation = encoder.info.get("distillation", {})
    _write_json(folder / "config.json", {
        "model_type": "model2vec", "architectures": ["StaticModel"],
        "tokenizer_name": str(encoder.info.get("teacher", "")),
        "apply_pca": distillation.get("dims"), "sif_coefficient": distillation.get(
            "sif_coefficient"),
        "hidden_dim": encoder.output_dim, "seq_length": 1000000,
        "normalize": encoder.normalize, "pooling": "mean", "embedding_dtype": "float32"})
    modules = [{"idx": 0, "name": "0", "path": ".",
                "type": "sentence_transformers.models.StaticEmbedding"}]
    if encoder.normalize:
        modules.append({"idx": 1, "name": "1", "path": "1_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
        (folder / "1_Normalize").mkdir()
    _write_json(folder / "modules.json", modules)


def read_back(folder, fmt, normalize):
    """The folder as its consumer reads it, in numpy: a `StaticTable`."""
    from safetensors.numpy import load_file

    if fmt == "sentence-transformers":
        module, key = folder / ST_MODULE, "embedding.weight"
    else:
        module, key = folder, "embeddings"
    table = load_file(os.fspath(module / static_runtime.TABLE_FILE))[key]
    tokenizer = static_runtime.load_tokenizer(module / static_runtime.TOKENIZER_FILE)
    return static_runtime.StaticTable(table, None, None, tokenizer, normalize=normalize)


def export_static_folder(encoder, path, format="sentence-transformers", overwrite=False,
                         tolerance=None, probe_sentences=None):
    """Write a verified sentence-transformers or model2vec folder of a `StaticEncoder`.

    Args:
        encoder: `StaticEncoder`.
        path: str or path. The folder to write.
        format: str. `"sentence-transformers"` or `"model2vec"`. Defaults to
            `"sentence-transformers"`.
        overwrite: bool. Replace an existing model folder. Defaults to `False`.
        tolerance: float or None. Largest relative error of a probe against
            `encode`. Defaults to `1e-4`.
        probe_sentences: list of str or None. Extra probes.

    Returns:
        dict: `path`, `format` and the verification report.

    Raises:
        ExportVerificationError: the folder does not reproduce `encode`.
        FileExistsError: `path` holds a model and `overwrite` is False.
    """
    if format not in ("sentence-transformers", "model2vec"):
        raise ValueError(f"`format` must be 'sentence-transformers' or 'model2vec'; received "
                         f"{format!r}.")
    tolerance = check_tolerance(DEFAULT_TOLERANCE if tolerance is None else tolerance)
    write = write_sentence_transformers if format == "sentence-transformers" else write_model2vec
    probes = list(PROBES) + list(probe_sentences or [])
    with atomic_folder(os.fspath(path), overwrite=overwrite) as folder:
        write(encoder, folder)
        # A static table computes float32 in every runtime (ours, sentence-
        # transformers', model2vec's); the reference says so explicitly.
        got = read_back(folder, format, encoder.normalize).encode(probes)
        report = compare(got, reference_vectors(encoder, probes, "float32"), tolerance,
                         f"The {format} folder", probes)
    return {"path": os.fspath(path), "format": format, **report}


def export_static(encoder, path, format="sentence-transformers", **kwargs):
    """Export a `StaticEncoder` (or a static folder) in `format`.

    Args:
        encoder: `StaticEncoder` or the path of a static folder.
        path: str or path. The folder (`sentence-transformers`,
            `model2vec`), the SavedModel base folder (`saved-model`:
            `path/VERSION/`) or the `.tflite` file (`litert`).
        format: str. One of `FORMATS`. Defaults to `"sentence-transformers"`.
        **kwargs: passed to the format's exporter
            (`export_static_folder`, `export_static_saved_model`,
            `export_static_litert`).

    Returns:
        dict: what the exporter returns (the path and its verification).

    Examples:

    ```python
    static = keras_sentemb.StaticEncoder.from_preset("static_minilm")
    keras_sentemb.export_static(static, "static_st", format="sentence-transformers")
    keras_sentemb.export_static(static, "static.tflite", format="litert", quantize="int8")
    ```
    """
    from keras_sentemb.models.static_encoder import StaticEncoder

    if isinstance(encoder, (str, os.PathLike)):
        encoder = StaticEncoder.from_preset(encoder)
    if not isinstance(encoder, StaticEncoder):
        raise TypeError(f"`encoder` must be a StaticEncoder or a static folder; received "
                        f"{type(encoder).__name__} (a Transformer exports with "
                        "export_saved_model, export_huggingface or export_litert).")
    if format in ("sentence-transformers", "model2vec"):
        return export_static_folder(encoder, path, format=format, **kwargs)
    if format == "saved-model":
        from keras_sentemb.export.static_serving import export_static_saved_model

        return export_static_saved_model(encoder, path, **kwargs)
    if format == "litert":
        from keras_sentemb.export.static_serving import export_static_litert

        return export_static_litert(encoder, path, **kwargs)
    raise ValueError(f"`format` must be one of {FORMATS}; received {format!r}.")
