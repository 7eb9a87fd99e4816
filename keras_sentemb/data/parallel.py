"""Translation pairs: reading them and a deterministic held-out split."""

import os
import zlib

import numpy as np
import tensorflow as tf

from keras_sentemb.data.corpus import read_pairs_tsv


def _as_text(x):
    if isinstance(x, (bytes, bytearray, np.bytes_)):
        return bytes(x).decode("utf-8", errors="replace")
    if not isinstance(x, str):
        raise ValueError(f"Pair items must be str, received {type(x).__name__}: {x!r:.60}")
    return x


def load_parallel_pairs(pairs, limit=None):
    """Translation pairs as a list of (source, target) str tuples.

    Args:
        pairs: a path to a tab-separated UTF-8 file (`source<TAB>target`,
            further columns such as Tatoeba's attribution are ignored), a
            list of 2-tuples, or a `tf.data.Dataset` of `(source, target)`
            string tuples or dicts with `"source"` and `"target"`.
        limit: int or None. Keep at most this many pairs.

    Returns:
        list of (source, target); pairs with an empty side are dropped.
    """
    if isinstance(pairs, (str, os.PathLike)):
        path = os.fspath(pairs)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Parallel pairs file not found: {path}")
        out = read_pairs_tsv(path, columns=(0, 1))
    elif isinstance(pairs, tf.data.Dataset):
        spec = pairs.element_spec
        if isinstance(spec, dict):
            if not {"source", "target"} <= set(spec):
                raise ValueError(
                    "A dataset of dicts must have 'source' and 'target' keys; "
                    f"received keys {sorted(spec)}."
                )
            pairs = pairs.map(lambda d: (d["source"], d["target"]))
        elif not (isinstance(spec, tuple) and len(spec) == 2):
            raise ValueError(
                f"The dataset must yield (source, target) string pairs; it yields {spec}."
            )
        if limit is not None:
            pairs = pairs.take(limit)
        out = [(_as_text(a), _as_text(b)) for a, b in pairs.as_numpy_iterator()]
    elif isinstance(pairs, (list, tuple)):
        out = []
        for i, item in enumerate(pairs):
            if not isinstance(item, (list, tuple)) or len(item) < 2:
                raise ValueError(
                    f"Item {i} of `pairs` must be a (source, target) tuple, received {item!r:.80}."
                )
            out.append((_as_text(item[0]), _as_text(item[1])))
    else:
        raise ValueError(
            "`pairs` must be a TSV path, a list of (source, target) tuples or a "
            f"tf.data.Dataset, received {type(pairs).__name__}."
        )
    out = [(a.strip(), b.strip()) for a, b in out]
    out = [(a, b) for a, b in out if a and b]
    if limit is not None:
        out = out[: int(limit)]
    if not out:
        raise ValueError("`pairs` holds no pair with two non-empty sides.")
    return out


def split_pairs(pairs, eval_size=1000, seed=0):
    """Deterministic held-out split of translation pairs, grouped by sentence.

    Source sentences are ordered by a CRC32 hash of `seed` and their text, and
    whole source groups are moved to the held-out set (one pair per source, and
    no target twice) until it has `eval_size` pairs. Every training pair that
    shares its source or its target with a held-out pair is removed, so no
    held-out sentence is seen in training. The split depends only on the
    pairs' texts, not their order.

    Args:
        pairs: list of (source, target).
        eval_size: int. Held-out pairs; `0` gives an empty held-out set.
            Defaults to `1000`.
        seed: int. Changes the hash order. Defaults to `0`.

    Returns:
        `(train_pairs, heldout_pairs)`.
    """
    if isinstance(eval_size, bool) or not isinstance(eval_size, int) or eval_size < 0:
        raise ValueError(f"`eval_size` must be an int >= 0, received {eval_size!r}.")
    if eval_size == 0:
        return list(pairs), []
    by_source = {}
    for a, b in pairs:
        by_source.setdefault(a, []).append(b)
    key = lambda s: zlib.crc32(f"{seed}\t{s}".encode("utf-8"))  # noqa: E731
    heldout, used_targets = [], set()
    for source in sorted(by_source, key=lambda s: (key(s), s)):
        if len(heldout) >= eval_size:
            break
        target = next((t for t in by_source[source] if t not in used_targets), None)
        if target is None:
            continue
        heldout.append((source, target))
        used_targets.add(target)
    if len(heldout) >= len(by_source):
        raise ValueError(
            f"`eval_size={eval_size}` leaves no training pair ({len(by_source)} distinct sources)."
        )
    held_sources = {a for a, _ in heldout}
    train = [(a, b) for a, b in pairs if a not in held_sources and b not in used_targets]
    return train, heldout
