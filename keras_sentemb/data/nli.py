"""Readers of supervised sentence-pair data: NLI triplets, labelled pairs.

- `read_nli_triplets`: SimCSE's `nli_for_simcse.csv` layout, a CSV with the
  header `sent0,sent1,hard_neg` (premise, entailment, contradiction), e.g.
  SimCSE's `nli_for_simcse.csv` itself.
- `read_labeled_pairs`: tab-separated `(sentence1, sentence2, label)` rows
  such as the CS224N minBERT Quora file (`id  sentence1  sentence2
  is_duplicate` after a leading index column), or a plain 3-column TSV.
- `triplets_to_nli_pairs`: premise/hypothesis/label rows (entailment = 0,
  contradiction = 2, SNLI's label order) from triplets, for ConSERT's
  supervised objective.
- `load_supervised`: any of the above from a path or a list, telling which
  kind it is.
- `load_positive_pairs`: `(sentence, positive)` pairs without negatives, e.g.
  a sentence and its back-translation, from a two-column TSV, a CSV with
  `sent0,sent1` columns, or a list.

Malformed rows (wrong column count, empty sentence, label that does not
parse) are skipped and counted; the count is logged and returned.
"""

import csv
import logging
import os

from keras_sentemb.data.corpus import read_pairs_tsv
from keras_sentemb.data.corpus import read_text_file

logger = logging.getLogger(__name__)

NLI_LABELS = {"entailment": 0, "neutral": 1, "contradiction": 2}


def read_nli_triplets(path, return_skipped=False):
    r"""Reads `(premise, entailment, contradiction)` triplets from a CSV file.

    The file has a header naming the columns `sent0`, `sent1`, `hard_neg`
    (SimCSE's supervised training file layout); other columns are ignored.

    Args:
        path: str or path. The CSV file.
        return_skipped: bool. Also return the number of skipped rows.
            Defaults to `False`.

    Returns:
        list of `(sent0, sent1, hard_neg)` str tuples (and the skipped count).

    Examples:

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "nli.csv"
    >>> _ = path.write_text(
    ...     "sent0,sent1,hard_neg\n"
    ...     "A man sleeps.,A person rests.,A man runs.\n"
    ...     "Two dogs play.,,Dogs sleep.\n"  # empty column: skipped and counted
    ... )
    >>> read_nli_triplets(path, return_skipped=True)
    ([('A man sleeps.', 'A person rests.', 'A man runs.')], 1)
    """
    return read_csv_columns(path, ("sent0", "sent1", "hard_neg"), return_skipped)


def read_csv_columns(path, names, return_skipped=False):
    """Rows of the named columns of a CSV file with a header; rows with an empty cell are skipped.

    Args:
        path: str or path. The CSV file.
        names: tuple of str. The columns wanted, in the order returned.
        return_skipped: bool. Also return the number of skipped rows.

    Returns:
        list of str tuples (and the skipped count).
    """
    lines = read_text_file(path)
    reader = csv.reader(lines)
    header = next(reader, None)
    wanted = ",".join(names)
    if header is None:
        raise ValueError(f"{path} is empty; expected a CSV with {wanted}.")
    header = [h.strip() for h in header]
    missing = [c for c in names if c not in header]
    if missing:
        raise ValueError(
            f"{path}: expected a CSV header with columns {', '.join(names)}; "
            f"received header {header} (missing {missing})."
        )
    cols = [header.index(c) for c in names]
    rows, skipped = [], 0
    for row in reader:
        if not row:
            continue
        if len(row) < len(header) or not all(row[c].strip() for c in cols):
            skipped += 1
            continue
        rows.append(tuple(row[c].strip() for c in cols))
    _report(path, skipped)
    if not rows:
        raise ValueError(f"{path} holds no valid {wanted} row.")
    return (rows, skipped) if return_skipped else rows


def _parse_label(text):
    text = text.strip()
    if text.lower() in NLI_LABELS:
        return NLI_LABELS[text.lower()]
    value = float(text)  # ValueError for empty / junk
    if value != int(value) or value < 0:
        raise ValueError(text)
    return int(value)


def read_labeled_pairs(path, return_skipped=False):
    r"""Reads `(sentence1, sentence2, label)` rows from a tab-separated file.

    Understands the CS224N minBERT Quora layout (a header `id sentence1
    sentence2 is_duplicate` after a leading index column, CSV quoting) and
    any TSV whose header names `sentence1`, `sentence2` and a label column
    (`is_duplicate`, `label`, `gold_label`); without a header the last three
    columns are used. Labels are non-negative integers (`"1.0"` reads as 1)
    or NLI names (`entailment`, `neutral`, `contradiction`). Rows whose
    label does not parse or whose sentences are empty are skipped and
    counted (`quora-dev.csv` has 2 such rows upstream).

    Args:
        path: str or path. The TSV file.
        return_skipped: bool. Also return the number of skipped rows.
            Defaults to `False`.

    Returns:
        list of `(sentence1, sentence2, label)` (and the skipped count).

    Examples:

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "quora.csv"
    >>> _ = path.write_text(
    ...     "\tid\tsentence1\tsentence2\tis_duplicate\n"
    ...     "0\tq1\tHow do I cook rice?\tHow to cook rice?\t1.0\n"
    ...     "1\tq2\tWhat is AI?\tWhere is Paris?\t0.0\n"
    ...     "2\tq3\tBroken row\tno label\t\n"
    ... )
    >>> read_labeled_pairs(path)
    [('How do I cook rice?', 'How to cook rice?', 1), ('What is AI?', 'Where is Paris?', 0)]
    """
    lines = read_text_file(path)
    rows = list(csv.reader(lines, delimiter="\t"))
    rows = [r for r in rows if r and any(c.strip() for c in r)]
    if not rows:
        raise ValueError(f"{path} is empty; expected sentence1<TAB>sentence2<TAB>label rows.")
    header = [c.strip().lower() for c in rows[0]]
    label_names = ("is_duplicate", "label", "gold_label")
    if "sentence1" in header and "sentence2" in header and any(n in header for n in label_names):
        label_name = next(n for n in label_names if n in header)
        # A leading unnamed index column shifts the data rows by one.
        shift = 1 if header[0] != "" and len(rows) > 1 and len(rows[1]) == len(header) + 1 else 0
        if header[0] == "":
            header = header[1:]
            shift = 1
        cols = [header.index("sentence1") + shift, header.index("sentence2") + shift,
                header.index(label_name) + shift]
        body = rows[1:]
    else:
        cols = None
        body = rows
    pairs, skipped = [], 0
    for row in body:
        idx = cols or [len(row) - 3, len(row) - 2, len(row) - 1]
        try:
            if min(idx) < 0 or max(idx) >= len(row):
                raise ValueError("columns")
            a, b = row[idx[0]].strip(), row[idx[1]].strip()
            if not a or not b:
                raise ValueError("empty")
            label = _parse_label(row[idx[2]])
        except (ValueError, IndexError):
            skipped += 1
            continue
        pairs.append((a, b, label))
    _report(path, skipped)
    if not pairs:
        raise ValueError(f"{path} holds no valid (sentence1, sentence2, label) row.")
    return (pairs, skipped) if return_skipped else pairs


def triplets_to_nli_pairs(triplets):
    """`(premise, hypothesis, label)` rows from NLI triplets.

    Each `(sent0, sent1, hard_neg)` gives `(sent0, sent1, 0)` (entailment)
    and `(sent0, hard_neg, 2)` (contradiction), in SNLI's label order
    (entailment 0, neutral 1, contradiction 2).
    """
    out = []
    for premise, entailment, contradiction in triplets:
        out.append((premise, entailment, NLI_LABELS["entailment"]))
        out.append((premise, contradiction, NLI_LABELS["contradiction"]))
    return out


def load_supervised(data):
    """Loads supervised data and says what it is.

    Args:
        data: a path (a `sent0,sent1,hard_neg` CSV, or a labelled-pair TSV),
            or a list of 3-tuples of str (triplets) or of `(str, str, int)`
            (labelled pairs).

    Returns:
        `(kind, rows)` with `kind` in `"triplets"`, `"labeled_pairs"`.
    """
    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Supervised data file not found: {path}")
        first = next((line for line in read_text_file(path) if line.strip()), "")
        fields = [f.strip() for f in next(csv.reader([first]), [])]
        if {"sent0", "sent1", "hard_neg"} <= set(fields):
            return "triplets", read_nli_triplets(path)
        return "labeled_pairs", read_labeled_pairs(path)
    if isinstance(data, (list, tuple)) and data:
        rows = [tuple(r) for r in data]
        if any(len(r) != 3 for r in rows):
            raise ValueError(
                "Supervised data rows must be 3-tuples: (sent0, sent1, hard_neg) "
                "or (sentence1, sentence2, int label). Received a row of "
                f"length {next(len(r) for r in rows if len(r) != 3)}."
            )
        if all(isinstance(x, str) for r in rows for x in r):
            return "triplets", rows
        if all(isinstance(r[0], str) and isinstance(r[1], str) and
               isinstance(r[2], (int,)) and not isinstance(r[2], bool) for r in rows):
            return "labeled_pairs", rows
        raise ValueError(
            "Supervised rows must be all (str, str, str) triplets or all "
            f"(str, str, int) labelled pairs. Received e.g. {rows[0]!r}."
        )
    raise ValueError(
        "Supervised data must be a file path or a non-empty list of 3-tuples. "
        f"Received: {type(data).__name__}."
    )


def load_positive_pairs(data):
    r"""Loads `(sentence, positive)` pairs, e.g. sentences and their back-translations.

    Args:
        data: a path to a tab-separated file `sentence<TAB>positive` (the
            first two columns; malformed rows are skipped and counted) or a
            CSV whose header names `sent0` and `sent1` (SimCSE's layout;
            other columns such as `hard_neg` are ignored), or a non-empty
            list of `(str, str)`.

    Returns:
        list of `(sentence, positive)` str tuples.

    Examples:

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "bt.tsv"
    >>> _ = path.write_text("A man sleeps.\tA man is sleeping.\nNo tab here\n")
    >>> load_positive_pairs(path)
    [('A man sleeps.', 'A man is sleeping.')]
    """
    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Pair file not found: {path}")
        first = next((line for line in read_text_file(path) if line.strip()), "")
        fields = [f.strip() for f in next(csv.reader([first]), [])]
        if "\t" not in first and {"sent0", "sent1"} <= set(fields):
            return read_csv_columns(path, ("sent0", "sent1"))
        return read_pairs_tsv(path)
    if isinstance(data, (list, tuple)) and data:
        rows = [tuple(r) for r in data]
        bad = next((r for r in rows if len(r) != 2 or not all(isinstance(x, str) for x in r)), None)
        if bad is not None:
            raise ValueError(
                f"Positive pairs must be (sentence, positive) pairs of str; received {bad!r}."
            )
        return rows
    raise ValueError(
        "Positive pairs must be a file path or a non-empty list of (str, str). "
        f"Received: {type(data).__name__}."
    )


def _report(path, skipped):
    if skipped:
        logger.warning("%s: skipped %d malformed row(s).", path, skipped)
