"""Readers of the CS224N minBERT multitask files (SST-5, Quora, STS).

The folder layout is the one of `shared/data/multitask`:

```
ids-sst-train.csv  ids-sst-dev.csv   # <idx> id sentence sentiment (0-4)
sts-train.csv      sts-dev.csv       # <idx> id sentence1 sentence2 similarity (0-5)
quora-dev.csv                        # <idx> id sentence1 sentence2 is_duplicate (0/1)
```

Every file is tab-separated, with a header and a leading index column;
fields may be quoted (`csv` quoting). Rows whose label does not parse (or
that have the wrong number of fields) are skipped and counted: upstream
`quora-dev.csv` has 2 such rows.

The Quora train file is not available, so `quora-dev.csv` is split
deterministically into train and dev: a pair goes to dev when the first 8
hex digits of `sha1(id)` (the file's `id` column), as an integer modulo
1000, are below `1000 * quora_dev_fraction`. The split does not depend on
row order or on any random seed.
"""

import csv
import hashlib
import os
import warnings
from pathlib import Path

TASKS = ("sentiment", "paraphrase", "similarity")
NUM_SENTIMENT_CLASSES = 5
FILES = {
    "sentiment": ("ids-sst-train.csv", "ids-sst-dev.csv"),
    "similarity": ("sts-train.csv", "sts-dev.csv"),
    "paraphrase": ("quora-dev.csv", None),
}
STSB_TEST_LEAKAGE_WARNING = (
    "multitask/sts-train.csv is a re-shuffle of all of STS-B and contains 961 "
    "STS-B *test* pairs: an encoder trained on it must never be reported on "
    "STS-B test (use sts-dev.csv / STS-B dev instead)."
)


def _read_rows(path, num_fields):
    """Rows of a tab-separated file with a header; malformed rows counted."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"multitask file not found: {path}")
    rows, bad = [], 0
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.reader(f, delimiter="\t")
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path} is empty; expected a header row.")
        for row in reader:
            if len(row) != num_fields:
                bad += 1
                continue
            rows.append(row)
    return rows, bad


def read_sst(path):
    """Read an `ids-sst-*.csv` file.

    Args:
        path: str or path. The file.

    Returns:
        `(examples, skipped)`: a list of `(id, sentence, label)` with the label
        an int in `[0, 5)`, and the number of malformed rows skipped.
    """
    rows, skipped = _read_rows(path, 4)
    out = []
    for row in rows:
        try:
            label = int(float(row[3]))
        except ValueError:
            skipped += 1
            continue
        sentence = row[2].strip()
        if not sentence or not 0 <= label < NUM_SENTIMENT_CLASSES:
            skipped += 1
            continue
        out.append((row[1], sentence, label))
    return out, skipped


def read_pair_file(path, low=0.0, high=5.0):
    """Read a `sts-*.csv` or `quora-*.csv` file.

    Args:
        path: str or path. The file.
        low: float. Smallest valid label. Defaults to `0.0`.
        high: float. Largest valid label. Defaults to `5.0`.

    Returns:
        `(examples, skipped)`: a list of `(id, sentence1, sentence2, label)`
        with a float label in `[low, high]`, and the number of malformed rows
        skipped (label missing or not a number, empty sentence, wrong number
        of fields).
    """
    rows, skipped = _read_rows(path, 5)
    out = []
    for row in rows:
        try:
            label = float(row[4])
        except ValueError:
            skipped += 1
            continue
        s1, s2 = row[2].strip(), row[3].strip()
        if not s1 or not s2 or not low <= label <= high:
            skipped += 1
            continue
        out.append((row[1], s1, s2, label))
    return out, skipped


def in_quora_dev(pair_id, fraction):
    """Whether the Quora pair `pair_id` belongs to our dev part (hash split)."""
    digest = hashlib.sha1(str(pair_id).encode("utf-8")).hexdigest()
    return int(digest[:8], 16) % 1000 < round(1000 * fraction)


def load_multitask_data(data_dir, quora_dev_fraction=0.1, verbose=True):
    """Load the three tasks' train and dev sets from a multitask folder.

    Args:
        data_dir: str or path. A folder laid out like `shared/data/multitask`.
        quora_dev_fraction: float in (0, 1). Share of `quora-dev.csv` held out
            as the paraphrase dev set (hash split on the `id` column, see the
            module docstring). Defaults to `0.1`.
        verbose: bool. Print the skipped-row counts and the Quora split.
            Defaults to `True`.

    Returns:
        A dict with `"train"` and `"dev"` (each `{task: examples}`; sentiment
        examples are `(sentence, label)`, pair examples
        `(sentence1, sentence2, label)`) and `"skipped"` (`{file name: number
        of malformed rows skipped}`).
    """
    data_dir = Path(os.fspath(data_dir))
    if not data_dir.is_dir():
        raise FileNotFoundError(
            f"`data_dir` must be a folder laid out like shared/data/multitask; "
            f"received {data_dir}"
        )
    if not 0.0 < float(quora_dev_fraction) < 1.0:
        raise ValueError(
            "`quora_dev_fraction` must be in (0, 1); received "
            f"{quora_dev_fraction!r}"
        )
    skipped = {}
    train, dev = {}, {}
    for split, name in zip(("train", "dev"), FILES["sentiment"]):
        rows, bad = read_sst(data_dir / name)
        skipped[name] = bad
        (train if split == "train" else dev)["sentiment"] = [
            (s, y) for _, s, y in rows
        ]
    for split, name in zip(("train", "dev"), FILES["similarity"]):
        rows, bad = read_pair_file(data_dir / name, 0.0, 5.0)
        skipped[name] = bad
        (train if split == "train" else dev)["similarity"] = [
            (a, b, y) for _, a, b, y in rows
        ]
    name = FILES["paraphrase"][0]
    rows, bad = read_pair_file(data_dir / name, 0.0, 1.0)
    skipped[name] = bad
    train["paraphrase"], dev["paraphrase"] = [], []
    for pair_id, a, b, y in rows:
        part = "dev" if in_quora_dev(pair_id, quora_dev_fraction) else "train"
        (dev if part == "dev" else train)["paraphrase"].append((a, b, y))
    for task in TASKS:
        if not train[task] or not dev[task]:
            raise ValueError(
                f"No usable {task} examples in {data_dir} (train "
                f"{len(train[task])}, dev {len(dev[task])})."
            )
    if verbose:
        for file_name, count in skipped.items():
            if count:
                print(f"[multitask data] {file_name}: skipped {count} malformed row(s)")
        print(
            f"[multitask data] quora-dev.csv split by sha1(id) into "
            f"{len(train['paraphrase'])} train / {len(dev['paraphrase'])} dev "
            f"pairs (dev fraction {quora_dev_fraction}); the Quora train file "
            "is not available."
        )
    return {"train": train, "dev": dev, "skipped": skipped}


def read_nli_triplets(path):
    """Read a `sent0,sent1,hard_neg` CSV (SimCSE NLI format).

    Returns:
        `(triplets, skipped)`: list of `(anchor, positive, hard_negative)`.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"NLI triplet file not found: {path}")
    out, skipped = [], 0
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.reader(f)
        next(reader, None)
        for row in reader:
            if len(row) != 3 or not all(x.strip() for x in row):
                skipped += 1
                continue
            out.append(tuple(x.strip() for x in row))
    return out, skipped


def warn_stsb_test_leakage():
    """Warn loudly that multitask/sts-train.csv holds STS-B test pairs."""
    warnings.warn(STSB_TEST_LEAKAGE_WARNING, UserWarning, stacklevel=2)
