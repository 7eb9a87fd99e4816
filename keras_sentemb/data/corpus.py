"""Reading training text from lists, files, tf.data datasets and TFDS."""

import logging
import os

import numpy as np
import tensorflow as tf

logger = logging.getLogger(__name__)


def _clean(lines, source):
    """Strip line ends, drop empty lines; error on an empty result."""
    out = [line.strip() for line in lines]
    out = [line for line in out if line]
    if not out:
        raise ValueError(f"The corpus from {source} holds no non-empty sentence.")
    return out


def read_text_file(path):
    """Lines of a UTF-8 file (invalid bytes replaced, with a logged warning)."""
    with open(path, "rb") as f:
        data = f.read()
    text = data.decode("utf-8", errors="replace")
    if "\ufffd" in text and b"\xef\xbf\xbd" not in data:
        logger.warning("%s is not valid UTF-8; invalid bytes were replaced.", path)
    return text.splitlines()


def _from_dataset(dataset, source, limit=None):
    spec = dataset.element_spec
    if isinstance(spec, dict):
        keys = [k for k, v in spec.items() if getattr(v, "dtype", None) == tf.string]
        if len(keys) != 1:
            raise ValueError(
                f"{source} yields dicts with string features {keys}; pass "
                "`text_feature=` or map the dataset to one string per element."
            )
        dataset = dataset.map(lambda x: x[keys[0]])
    elif getattr(spec, "dtype", None) != tf.string:
        raise ValueError(f"{source} must yield strings, it yields {spec}.")
    if limit is not None:
        dataset = dataset.take(limit)
    lines = []
    for batch in dataset.batch(4096).as_numpy_iterator():
        lines.extend(b.decode("utf-8", errors="replace") for b in np.ravel(batch))
    return lines


def load_corpus(corpus, text_feature=None, split="train", limit=None):
    """Return a list of sentences from any supported corpus source.

    Args:
        corpus: a list/tuple of str, a path to a text file (one sentence per
            line), a `tf.data.Dataset` of strings (or of dicts with exactly
            one string feature), or a TFDS dataset name such as `"imdb_reviews"`
            (optionally `"name:feature"`).
        text_feature: str or None. The TFDS / dict feature holding the text.
        split: str. The TFDS split. Defaults to `"train"`.
        limit: int or None. Keep at most this many sentences.

    Returns:
        list of non-empty, stripped str.

    Raises:
        ValueError: when the corpus is empty or of an unsupported type.
        FileNotFoundError: when a path does not exist.
    """
    if isinstance(corpus, (list, tuple)):
        lines = [c.decode("utf-8", "replace") if isinstance(c, bytes) else c for c in corpus]
        bad = [i for i, c in enumerate(lines) if not isinstance(c, str)]
        if bad:
            raise ValueError(
                f"Corpus items must be str; item {bad[0]} is {type(lines[bad[0]]).__name__}."
            )
        return _clean(lines[:limit] if limit else lines, "the given list")
    if isinstance(corpus, os.PathLike) or (
        isinstance(corpus, str) and (os.path.exists(corpus) or os.sep in corpus or corpus.endswith(".txt"))
    ):
        path = os.fspath(corpus)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Corpus file not found: {path}")
        lines = read_text_file(path)
        return _clean(lines[:limit] if limit else lines, path)
    if isinstance(corpus, tf.data.Dataset):
        return _clean(_from_dataset(corpus, "the dataset", limit), "the dataset")
    if isinstance(corpus, str):
        import tensorflow_datasets as tfds  # slow to import; loaded only for a TFDS name

        name, _, feature = corpus.partition(":")
        feature = text_feature or feature or None
        try:
            dataset = tfds.load(name, split=split, shuffle_files=False)
        except Exception as e:  # tfds raises many types (not found, no network)
            raise ValueError(
                f"Could not load TFDS dataset {name!r} (split {split!r}): {e}"
            ) from e
        if feature:
            dataset = dataset.map(lambda x: x[feature])
        return _clean(_from_dataset(dataset, f"TFDS {name!r}", limit), f"TFDS {name!r}")
    raise ValueError(
        "`corpus` must be a list of str, a text file path, a tf.data.Dataset "
        f"of strings or a TFDS name; received {type(corpus).__name__}."
    )


def read_pairs_tsv(path, columns=(0, 1)):
    """(a, b) pairs from a tab-separated UTF-8 file; malformed rows are counted and skipped."""
    pairs, skipped = [], 0
    for line in read_text_file(path):
        parts = line.split("\t")
        if len(parts) <= max(columns) or not all(parts[c].strip() for c in columns):
            skipped += int(bool(line.strip()))
            continue
        pairs.append(tuple(parts[c].strip() for c in columns))
    if skipped:
        logger.warning("%s: skipped %d malformed row(s).", path, skipped)
    if not pairs:
        raise ValueError(f"{path} holds no tab-separated pair.")
    return pairs
