"""Encoding corpora larger than memory: text files in, embedding shards out.

The layout written here (and by the Apache Beam pipeline in
`keras_sentemb.beam`) is one folder:

- `manifest.json`: the inputs (sorted, with their index), the settings
  (model, pooling, normalize, max length, precision, shard size, format) and,
  once every shard is written, `"complete": true` with the row count;
- per shard `F`-`S` (input file `F`, lines `S * shard_size` onwards):
  `npy`: `embeddings-F-S.npy` (float32 `[rows, dim]`) and `ids-F-S.npy`
  (int64 `[rows, 2]`: `(file_index, line)` of each row, 0-based);
  `tfrecord`: `embeddings-F-S.tfrecord` of `tf.train.Example`s with int64
  `file`, `line` and float `embedding`.

A shard's files are written under a temporary name and renamed into place,
its embeddings last: a shard whose embeddings file exists is complete, so a
resumed run skips it.
"""

import glob as globlib
import io
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

from keras_sentemb import validation
from keras_sentemb.models.pooling import parse_pooling
from keras_sentemb.kernels.precision import resolve_encode_precision

MANIFEST = "manifest.json"
FORMATS = ("npy", "tfrecord")
# Settings a resumed run must share with the run that started the folder.
RESUME_KEYS = ("inputs", "model", "pooling", "normalize", "max_length", "precision",
               "shard_size", "format", "dim")


def _is_url(path):
    return "://" in path


def match_inputs(input_glob):
    """The sorted files matching `input_glob` (a path or a glob), or an error."""
    path = os.fspath(input_glob)
    if _is_url(path):
        files = sorted(tf.io.gfile.glob(path))
    else:
        files = sorted(f for f in globlib.glob(os.path.expanduser(path)) if os.path.isfile(f))
    if not files:
        raise FileNotFoundError(f"No input file matches {path!r}.")
    return files


def iter_lines(path):
    """The lines of a UTF-8 text file, streamed (invalid bytes replaced).

    Every line counts, empty ones included; a final newline starts no extra
    line; `\\r\\n` ends are accepted (the rules of `keras-sentemb encode`).
    """
    opener = tf.io.gfile.GFile if _is_url(path) else open
    with opener(path, "rb") as f:
        for raw in f:
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            yield raw.decode("utf-8", errors="replace")


def shard_name(file_index, shard_index):
    return f"{file_index:05d}-{shard_index:06d}"


def embeddings_path(output_dir, name, shard_format):
    return os.path.join(output_dir, f"embeddings-{name}.{shard_format}")


def _remove_quietly(path):
    """Remove a temporary file left by a failed write (a full disk), if it is there."""
    try:
        if tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)
    except tf.errors.OpError:
        pass


def _write_atomic(path, payload):
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with tf.io.gfile.GFile(tmp, "wb") as f:
            f.write(payload)
        tf.io.gfile.rename(tmp, path, overwrite=True)
    except BaseException:
        _remove_quietly(tmp)
        raise


def write_shard(output_dir, name, ids, embeddings, shard_format="npy"):
    """Write one shard atomically (ids first, embeddings last).

    Args:
        output_dir: str. The folder.
        name: str. `shard_name(file_index, shard_index)`.
        ids: int array `[rows, 2]` of `(file_index, line)`.
        embeddings: float array `[rows, dim]`.
        shard_format: str. `"npy"` or `"tfrecord"`.
    """
    ids = np.asarray(ids, dtype=np.int64).reshape(-1, 2)
    embeddings = np.asarray(embeddings, dtype=np.float32)
    if shard_format == "npy":
        buffer = io.BytesIO()
        np.save(buffer, ids)
        _write_atomic(os.path.join(output_dir, f"ids-{name}.npy"), buffer.getvalue())
        buffer = io.BytesIO()
        np.save(buffer, embeddings)
        _write_atomic(embeddings_path(output_dir, name, "npy"), buffer.getvalue())
        return
    path = embeddings_path(output_dir, name, "tfrecord")
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with tf.io.TFRecordWriter(tmp) as writer:
            for (file_index, line), vector in zip(ids, embeddings):
                writer.write(embedding_example(file_index, line, vector))
        tf.io.gfile.rename(tmp, path, overwrite=True)
    except BaseException:
        _remove_quietly(tmp)
        raise


def embedding_example(file_index, line, vector):
    """A serialized `tf.train.Example` of one row: `file`, `line`, `embedding`."""
    feature = {
        "file": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(file_index)])),
        "line": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(line)])),
        "embedding": tf.train.Feature(float_list=tf.train.FloatList(value=vector)),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def read_embedding_shards(output_dir):
    """Every row of a shard folder, in input order.

    Args:
        output_dir: str. A folder written by `encode_to_files` or the Beam
            pipeline.

    Returns:
        `(ids, embeddings)`: int64 `[n, 2]` `(file_index, line)` and float32
        `[n, dim]`, sorted by file, then line.
    """
    output_dir = os.fspath(output_dir)
    all_ids, all_vectors = [], []
    for path in sorted(tf.io.gfile.glob(os.path.join(output_dir, "embeddings-*.npy"))):
        name = os.path.basename(path)[len("embeddings-"):-len(".npy")]
        with tf.io.gfile.GFile(path, "rb") as f:
            all_vectors.append(np.load(io.BytesIO(f.read())))
        with tf.io.gfile.GFile(os.path.join(output_dir, f"ids-{name}.npy"), "rb") as f:
            all_ids.append(np.load(io.BytesIO(f.read())))
    records = sorted(tf.io.gfile.glob(os.path.join(output_dir, "embeddings-*.tfrecord")))
    if records:
        spec = {
            "file": tf.io.FixedLenFeature([], tf.int64),
            "line": tf.io.FixedLenFeature([], tf.int64),
            "embedding": tf.io.VarLenFeature(tf.float32),
        }
        for raw in tf.data.TFRecordDataset(records).batch(4096):
            parsed = tf.io.parse_example(raw, spec)
            all_ids.append(np.stack([parsed["file"].numpy(), parsed["line"].numpy()], 1))
            all_vectors.append(tf.sparse.to_dense(parsed["embedding"]).numpy())
    if not all_ids:
        raise FileNotFoundError(f"No embedding shards in {output_dir!r}.")
    ids = np.concatenate(all_ids).astype(np.int64)
    vectors = np.concatenate(all_vectors).astype(np.float32)
    order = np.lexsort((ids[:, 1], ids[:, 0]))
    return ids[order], vectors[order]


def read_manifest(output_dir):
    path = os.path.join(os.fspath(output_dir), MANIFEST)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "r") as f:
        return json.load(f)


def write_manifest(output_dir, manifest):
    _write_atomic(
        os.path.join(os.fspath(output_dir), MANIFEST),
        json.dumps(manifest, indent=2).encode("utf-8"),
    )


def _check_resume(existing, manifest, output_dir):
    if existing is None:
        return
    different = [k for k in RESUME_KEYS if existing.get(k) != manifest.get(k)]
    if different:
        raise ValueError(
            f"{output_dir} holds shards written with other settings ({', '.join(different)}: "
            f"{ {k: existing.get(k) for k in different} } there, "
            f"{ {k: manifest.get(k) for k in different} } now); use another output folder."
        )


def _settings_manifest(encoder, files, model_name, pooling, normalize, max_length, precision,
                       shard_size, shard_format):
    """`encode_to_files`' manifest before encoding: the inputs and the settings.

    A run resumed with other values of its `RESUME_KEYS` is refused
    (`_check_resume`).
    """
    return {
        "inputs": [os.path.abspath(f) if not _is_url(f) else f for f in files],
        "model": model_name or encoder.name,
        "pooling": pooling,
        "normalize": bool(normalize),
        "max_length": int(max_length),
        "precision": precision,
        "shard_size": shard_size,
        "format": shard_format,
        "dim": encoder.output_dim,
    }


def _file_shards(path, shard_size):
    """The shards of one input file: `(shard_index, first_line, lines)`, in order.

    Each holds `shard_size` lines but the last, which holds the rest (no
    shard for an empty file). The lines are read as they are needed.
    """
    lines, shard_index, first_line = [], 0, 0
    for line in iter_lines(path):
        lines.append(line)
        if len(lines) == shard_size:
            yield shard_index, first_line, lines
            lines, shard_index, first_line = [], shard_index + 1, first_line + shard_size
    if lines:
        yield shard_index, first_line, lines


def encode_to_files(
    encoder,
    input_glob,
    output_dir,
    shard_size=100_000,
    batch_size=128,
    max_length=None,
    pooling=None,
    normalize=False,
    precision=None,
    shard_format="npy",
    show_progress=None,
    model_name=None,
    max_batch_tokens=None,
):
    """Encode text files of any size to embedding shards on disk, resumably.

    Streams the lines of every file matching `input_glob` (sorted; one
    sentence per line, empty lines included, as `encode`'s CLI reads
    them) and writes one shard per `shard_size` lines of a file: the
    float32 embeddings and the `(file_index, line)` of each row. Only one
    shard is in memory at a time, so memory does not grow with the
    corpus. Shards are written atomically and a `manifest.json` records
    the settings; running the same call again skips the shards already
    written (a run with other settings is refused). Paths may be local
    or any filesystem TensorFlow reads (`gs://...`). Read the result with
    `keras_sentemb.models.sharded_encoding.read_embedding_shards`.

    The method `SentenceEncoder.encode_to_files` is this function, with the
    encoder as `self`.

    Args:
        encoder: `SentenceEncoder`. The encoder (`self` in the method).
        input_glob: str. A file, or a glob of files.
        output_dir: str. Folder of the shards (created).
        shard_size: int. Lines per shard. Defaults to `100_000`.
        batch_size, max_length, pooling, normalize, precision,
            max_batch_tokens: as in `SentenceEncoder.encode`.
        shard_format: str. `"npy"` (`embeddings-F-S.npy` float32 and
            `ids-F-S.npy` int64 `[rows, 2]`) or `"tfrecord"`
            (`embeddings-F-S.tfrecord` of `tf.train.Example`s with
            `file`, `line` and `embedding`). Defaults to `"npy"`.
        show_progress: bool or None. One line per shard on stderr.
            Defaults to `None` (on for more than one shard).
        model_name: str or None. The model recorded in the manifest
            (compared when resuming). Defaults to the encoder's name.

    Returns:
        dict: the manifest (inputs, rows, dimension, shards).

    Examples:

    ```python
    encoder = SentenceEncoder.from_preset("default")
    encoder.encode_to_files("corpus/*.txt", "corpus_embeddings", shard_size=50_000)
    ```
    """
    shard_size = validation.positive_int(shard_size, "shard_size")
    validation.choice(shard_format, "shard_format", FORMATS)
    precision = resolve_encode_precision(precision)
    pooling = encoder.pooling if pooling is None else parse_pooling(pooling, encoder.num_layers)
    max_length = encoder.max_length if max_length is None else max_length
    files = match_inputs(input_glob)
    output_dir = os.fspath(output_dir)
    if tf.io.gfile.exists(output_dir) and not tf.io.gfile.isdir(output_dir):
        raise ValueError(f"`output_dir` {output_dir!r} exists and is not a folder.")
    tf.io.gfile.makedirs(output_dir)
    manifest = _settings_manifest(encoder, files, model_name, pooling, normalize, max_length,
                                  precision, shard_size, shard_format)
    existing = read_manifest(output_dir)
    _check_resume(existing, manifest, output_dir)
    write_manifest(output_dir, manifest)
    progress = show_progress
    rows = skipped = written = 0
    shards = []
    started = time.time()

    def flush(file_index, shard_index, first_line, lines):
        nonlocal rows, skipped, written
        name = shard_name(file_index, shard_index)
        shards.append({"name": name, "file": file_index, "first_line": first_line,
                       "rows": len(lines)})
        rows += len(lines)
        if tf.io.gfile.exists(embeddings_path(output_dir, name, shard_format)):
            skipped += 1
            return
        vectors = encoder.encode(
            lines, batch_size=batch_size, max_length=max_length, pooling=pooling,
            normalize=normalize, show_progress=False, precision=precision,
            max_batch_tokens=max_batch_tokens,
        )
        ids = np.stack([np.full(len(lines), file_index), np.arange(len(lines)) + first_line], 1)
        write_shard(output_dir, name, ids, vectors, shard_format)
        written += 1
        if progress or (progress is None and (written + skipped) > 1):
            rate = rows / max(time.time() - started, 1e-9)
            print(f"shard {name}: {len(lines)} rows ({rows} in all, {rate:.0f} rows/s)",
                  file=sys.stderr)

    for file_index, path in enumerate(files):
        for shard_index, first_line, lines in _file_shards(path, shard_size):
            # A shard already on disk is only counted: its lines are not kept.
            flush(file_index, shard_index, first_line, lines)
    manifest.update({
        "complete": True,
        "rows": rows,
        "shards": shards,
        "shards_written": written,
        "shards_skipped": skipped,
    })
    write_manifest(output_dir, manifest)
    return manifest
