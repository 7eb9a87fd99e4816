"""Static encoders without TensorFlow: a folder's table, its tokenizer, numpy averaging.

A static encoder keeps one vector per token of its teacher's vocabulary and
encodes a sentence as the weighted mean of its tokens' vectors. Nothing of
that needs a deep-learning framework: this module reads a static folder
(`sentemb_static.json`, `model.safetensors`, `tokenizer.json`), tokenizes
with the Hugging Face `tokenizers` library (the teacher's own tokenizer,
Rust, multi-threaded) and gathers and averages with numpy, in batches. It
imports neither TensorFlow nor Keras, so `keras-sentemb encode --model
STATIC_DIR` starts in a fraction of a second; `StaticEncoder` (the Keras
model, for training and export) encodes through the same code, so both give
the same vectors.

The folder layout (written by `StaticEncoder.save`):

- `sentemb_static.json`: `format_version`, `normalize`, `max_length`,
  `table_dtype` and how the table was made (`teacher`, `distillation`).
- `model.safetensors`: `embeddings` `[V, d]` (float32, float16, or int8
  with `scales` `[V]`, one per row), `weights` `[V]` (the per-token weights,
  e.g. Zipf / SIF), `keep` `[V]` (0 for the special tokens, which never
  count), and, when distilled, `pca_mean` `[D]` and `pca_components`
  `[D, d]` (the teacher space -> table space map that training uses).
- `tokenizer.json`: the teacher's tokenizer, without padding or truncation.
"""

import json
import os
from pathlib import Path

import numpy as np

from keras_sentemb.models import folder_inspection
from keras_sentemb.models.static_files import STATIC_CONFIG
from keras_sentemb.models.static_files import TABLE_FILE
from keras_sentemb.models.static_files import TOKENIZER_FILE


# The sentences every static export is checked on against `encode` before it appears.
PROBES = (
    "A man is playing a guitar.",
    "The quick brown fox jumps over the lazy dog!",
    "Static embeddings average one vector per token.",
    "Tokyo's population exceeds 13 million people (2023).",
    "a",
    "An UPPER-case sentence, with punctuation; and numbers: 42, 3.14.",
)

FORMAT_VERSION = 1
TABLE_DTYPES = ("float32", "float16", "int8")


class StaticFolderError(ValueError):
    """A folder that is not a readable static model; the message says what is wrong."""


def is_static_folder(path):
    """Whether `path` is a folder holding a static model (`sentemb_static.json`)."""
    try:
        return Path(os.fspath(path)).expanduser().joinpath(STATIC_CONFIG).is_file()
    except TypeError:
        return False


def quantize_rows(table):
    """`(int8 table, float32 scales)`: each row scaled to [-127, 127] by its largest value.

    Args:
        table: float array `[V, d]`.

    Returns:
        `(q, scales)` with `q * scales[:, None]` close to `table`.
    """
    table = np.asarray(table, np.float32)
    scales = np.abs(table).max(axis=1) / 127.0
    scales[scales == 0] = 1.0
    q = np.clip(np.rint(table / scales[:, None]), -127, 127).astype(np.int8)
    return q, scales.astype(np.float32)


def stored_table(table, dtype):
    """The arrays that store a float32 table in `dtype` (`embeddings`, and `scales` for int8)."""
    if dtype not in TABLE_DTYPES:
        raise ValueError(f"`table_dtype` must be one of {TABLE_DTYPES}; received {dtype!r}.")
    if dtype == "int8":
        q, scales = quantize_rows(table)
        return {"embeddings": q, "scales": scales}
    return {"embeddings": np.asarray(table, np.float32).astype(dtype)}


def float_table(arrays):
    """The float32 table of stored arrays (`embeddings` dequantized by `scales` when int8)."""
    table = np.asarray(arrays["embeddings"])
    if table.dtype == np.int8:
        return table.astype(np.float32) * np.asarray(arrays["scales"], np.float32)[:, None]
    return table.astype(np.float32)


def load_tokenizer(path):
    """The `tokenizers.Tokenizer` of a `tokenizer.json`, with padding and truncation off."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(os.fspath(path))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def read_static_folder(folder):
    """`(config, arrays, tokenizer)` of a static folder.

    Raises:
        StaticFolderError: a file is missing or unreadable (one line naming it).
        UnsafeFolderError: a link out of the folder, sizes no model has (see
            `folder_inspection`), before anything is read.
    """
    from safetensors.numpy import load_file

    folder = Path(os.fspath(folder)).expanduser()
    for name in (STATIC_CONFIG, TABLE_FILE, TOKENIZER_FILE):
        if not (folder / name).is_file():
            raise StaticFolderError(f"{folder} is not a static model: {name} is missing.")
    folder_inspection.inspect_model_folder(folder, "static")  # data, never code
    try:
        config = json.loads((folder / STATIC_CONFIG).read_text(encoding="utf-8"))
        arrays = load_file(os.fspath(folder / TABLE_FILE))
        tokenizer = load_tokenizer(folder / TOKENIZER_FILE)
    except Exception as e:  # JSON, safetensors and tokenizers each raise their own
        raise StaticFolderError(f"{folder} holds an unreadable static model: "
                                f"{type(e).__name__}: {str(e).splitlines()[0]}") from None
    if config.get("format_version", 0) > FORMAT_VERSION:
        raise StaticFolderError(f"{folder} is a static model of format "
                                f"{config['format_version']}; this version reads up to "
                                f"{FORMAT_VERSION}.")
    if "embeddings" not in arrays:
        raise StaticFolderError(f"{folder}/{TABLE_FILE} holds no `embeddings` table.")
    return config, arrays, tokenizer


class StaticTable:
    """Encodes sentences with a token table, per-token weights and a tokenizer (numpy only).

    The sentence vector is `sum_i w[t_i] * E[t_i] / n` over the `n`
    non-special tokens `t_i` of the sentence (tokenized without special
    tokens, as model2vec and sentence-transformers' `StaticEmbedding` do),
    L2-normalised when `normalize`. A sentence without tokens is the zero
    vector. The weights are folded into the table once, so encoding is one
    gather and one segment sum per batch.

    Args:
        table: float array `[V, d]`.
        weights: float array `[V]` or None (1 each).
        keep: float array `[V]` or None: 0 for tokens that never count
            (special tokens). Defaults to 1 each.
        tokenizer: a `tokenizers.Tokenizer` (padding and truncation off).
        normalize: bool. L2-normalise the vectors. Defaults to `True`.
        max_length: int or None. Tokens kept per sentence; None keeps all.

    Examples:

    ```python
    table = StaticTable.from_folder("static_minilm")
    vectors = table.encode(["A man is playing a guitar."])
    ```
    """

    def __init__(self, table, weights, keep, tokenizer, normalize=True, max_length=None):
        table = np.asarray(table, np.float32)
        vocab = table.shape[0]
        weights = np.ones(vocab, np.float32) if weights is None else np.asarray(weights, np.float32)
        keep = np.ones(vocab, np.float32) if keep is None else np.asarray(keep, np.float32)
        self.keep = keep
        self.folded = np.ascontiguousarray(table * (weights * keep)[:, None])
        self.tokenizer = tokenizer
        self.normalize = bool(normalize)
        self.max_length = max_length

    @classmethod
    def from_folder(cls, folder):
        """A `StaticTable` of a static folder (see the module docstring)."""
        config, arrays, tokenizer = read_static_folder(folder)
        return cls(float_table(arrays), arrays.get("weights"), arrays.get("keep"), tokenizer,
                   normalize=config.get("normalize", True), max_length=config.get("max_length"))

    @property
    def dim(self):
        return int(self.folded.shape[1])

    def token_ids(self, sentences, max_length=None):
        """Token ids of each sentence (no special tokens added), cut at `max_length`."""
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        ids = [e.ids for e in encode(list(sentences), add_special_tokens=False)]
        limit = self.max_length if max_length is None else max_length
        if limit is not None:
            ids = [row[:limit] for row in ids]
        return ids

    def average(self, ids):
        """Weighted mean vectors `[n, d]` of lists of token ids (unnormalised)."""
        lengths = np.fromiter((len(row) for row in ids), np.int64, len(ids))
        out = np.zeros((len(ids), self.dim), np.float32)
        if not lengths.sum():
            return out
        flat = np.fromiter((t for row in ids for t in row), np.int64, int(lengths.sum()))
        present = lengths > 0
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])[present]
        out[present] = np.add.reduceat(self.folded[flat], starts, axis=0)
        counts = np.add.reduceat(self.keep[flat], starts)
        out[present] /= np.maximum(counts, 1.0)[:, None]
        return out

    def encode(self, sentences, batch_size=1024, normalize=False, max_length=None):
        """Float32 vectors `[n, d]` of a list of str.

        Args:
            sentences: list of str.
            batch_size: int. Sentences tokenized and averaged at a time.
                Defaults to `1024`.
            normalize: bool. L2-normalise (also when the table does not).
                Defaults to `False`.
            max_length: int or None. Tokens kept per sentence. Defaults to
                the table's.

        Returns:
            float32 array `[n, d]`.
        """
        out = np.zeros((len(sentences), self.dim), np.float32)
        for start in range(0, len(sentences), batch_size):
            ids = self.token_ids(sentences[start:start + batch_size], max_length)
            out[start:start + len(ids)] = self.average(ids)
        if self.normalize or normalize:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out /= np.maximum(norms, 1e-12)
        return out
