"""Readers for the STS benchmark files in SentEval's `data/downstream` layout.

Every reader returns plain Python data: lists of `(sentence_1, sentence_2,
score)` tuples with `score` a float on the file's own scale (0-5 for STS,
1-5 for SICK). They are pure Python (no TensorFlow, no numpy) so they can be
reused by the evaluation code, by training pipelines (for example supervised
training on the STS-B train split) and by tests.

Files are decoded as UTF-8 with `errors="replace"`; sentences are stripped of
surrounding whitespace (SentEval splits on whitespace, so this changes nothing
for its protocol).

Layouts understood (SentEval names):

- STS Benchmark, SentEval-processed: `STS/STSBenchmark/sts-{train,dev,test}.csv`,
  tab-separated, 7 columns (genre, file, year, id, score, s1, s2).
- STS Benchmark, original release: `STS/STSBenchmark-original/sts-*.csv`; some
  lines carry 8-9 columns (trailing source/license fields). Read with
  `csv.QUOTE_NONE`; columns 4, 5, 6 are score, s1, s2.
- STS12-16: `STS/STS12-en-test/STS.input.<subset>.txt` (tab-separated pairs)
  with `STS.gs.<subset>.txt` (one gold score a line; an empty line means the
  pair was not scored and is skipped). The official STS 2016 names
  (`STS2016.input.<subset>.txt`) are accepted too.
- SICK (SICK-R): `SICK/SICK_{train,trial,test_annotated}.txt`, tab-separated
  with a header (pair_ID, sentence_A, sentence_B, relatedness_score,
  entailment_judgment).

References:
    - [Conneau & Kiela, 2018](https://arxiv.org/abs/1803.05449): SentEval.
    - [Cer et al., 2017](https://arxiv.org/abs/1708.00055): STS Benchmark.
    - [Marelli et al., 2014](https://aclanthology.org/L14-1314/): SICK.
"""

import csv
import os
import re
from pathlib import Path

from keras_sentemb.data.resources import bundled_sts_dir

STSB_SPLITS = ("train", "dev", "test")
SICK_SPLITS = ("train", "dev", "test")

# Folder names tried (in order) for the STS Benchmark inside a data folder.
STSB_FOLDERS = ("STSBenchmark", "stsbenchmark", "STSBenchmark-original")
SICK_FOLDERS = ("SICK",)
SICK_FILES = {
    "train": "SICK_train.txt",
    "dev": "SICK_trial.txt",
    "test": "SICK_test_annotated.txt",
}
_SPLIT_ALIASES = {
    "train": "train",
    "dev": "dev",
    "trial": "dev",
    "valid": "dev",
    "validation": "dev",
    "test": "test",
}

_STS_INPUT_RE = re.compile(r"^(STS\d*)\.input\.(.+)\.txt$")

def _open_text(path):
    return open(path, "r", encoding="utf-8", errors="replace", newline="")


def _normalize_split(split, valid=("train", "dev", "test")):
    if split is None:
        return "test"
    if not isinstance(split, str):
        raise ValueError(
            f"`split` must be a string, one of {list(valid)}. "
            f"Received: split={split!r}"
        )
    key = _SPLIT_ALIASES.get(split.strip().lower())
    if key is None or key not in valid:
        raise ValueError(
            f"Unknown split {split!r}. Expected one of {list(valid)}."
        )
    return key


def _nonempty(pairs, path):
    """`pairs`, or a ValueError naming `path` when it holds none."""
    if not pairs:
        raise ValueError(
            f"{path}: no scored sentence pairs; an STS evaluation file must hold at least one."
        )
    return pairs


def _parse_score(text, path, line_no):
    try:
        return float(text)
    except ValueError:
        raise ValueError(
            f"{path}:{line_no}: cannot parse the gold score {text!r} as a "
            "number."
        ) from None


def _find_split_file(path, split, splits, file_name, folders, dataset):
    """`path` if it is a file, else the split's file in `path` or its folders.

    Looks for `file_name(split=split)` in `path`, then in each of `folders`
    below `path` and below `path / "STS"`; raises `FileNotFoundError` naming
    every path looked at.
    """
    path = Path(path)
    if path.is_file():
        return path
    split = _normalize_split(split, splits)
    name = file_name(split=split)
    candidates = [path / name]
    for root in (path, path / "STS"):
        candidates.extend(root / folder / name for folder in folders)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"{dataset} {split} file not found. Looked for: "
        + ", ".join(str(c) for c in candidates)
    )


def find_stsb_file(path_or_dir, split="test"):
    """Locates the STS Benchmark csv file of one split.

    Args:
        path_or_dir: str or path. A `sts-*.csv` file (returned as is), the
            `STSBenchmark` folder, or a folder holding it (`STS/` or the
            SentEval `downstream/` root).
        split: str. `"train"`, `"dev"` or `"test"`. Defaults to `"test"`.

    Returns:
        A `pathlib.Path` to the csv file.

    Raises:
        FileNotFoundError: naming every path that was looked at.
    """
    return _find_split_file(
        path_or_dir, split, STSB_SPLITS, "sts-{split}.csv".format, STSB_FOLDERS,
        "STS Benchmark",
    )


def read_stsb(path_or_dir, split="test"):
    """Reads one split of the STS Benchmark.

    Handles both the SentEval-processed files (7 tab-separated columns) and the
    original release, where some lines carry 8-9 columns (trailing source and
    license fields). Lines are split on tabs with `csv.QUOTE_NONE` (quotes
    are ordinary characters in these files); columns 4, 5 and 6 are the score
    and the two sentences. Empty lines are skipped.

    Args:
        path_or_dir: str or path. A `sts-*.csv` file, the `STSBenchmark`
            folder, or a folder holding it (`STS/` or SentEval's
            `downstream/` root; `STSBenchmark` is preferred over
            `STSBenchmark-original` when both exist).
        split: str. `"train"`, `"dev"` or `"test"` (ignored when
            `path_or_dir` is a file). Defaults to `"test"`.

    Returns:
        A list of `(sentence_1, sentence_2, score)` tuples; `score` is a
        float in [0, 5].

    Raises:
        FileNotFoundError: if the split's file cannot be found.
        ValueError: if a line has fewer than 7 columns or an unparsable score.

    Examples:

    >>> from keras_sentemb.data.resources import bundled_sts_dir
    >>> pairs = read_stsb(bundled_sts_dir(), split="test")  # or data/downstream/STS
    >>> len(pairs), pairs[0]
    (1379, ('a girl is styling her hair .', 'a girl is brushing her hair .', 2.5))

    References:
        - [Cer et al., 2017](https://arxiv.org/abs/1708.00055)
        - [Conneau & Kiela, 2018](https://arxiv.org/abs/1803.05449)
    """
    path = find_stsb_file(path_or_dir, split)
    pairs = []
    with _open_text(path) as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        for line_no, row in enumerate(reader, start=1):
            if not row or all(not field.strip() for field in row):
                continue
            if len(row) < 7:
                raise ValueError(
                    f"{path}:{line_no}: expected at least 7 tab-separated "
                    f"columns (genre, file, year, id, score, s1, s2), got "
                    f"{len(row)}."
                )
            score = _parse_score(row[4].strip(), path, line_no)
            pairs.append((row[5].strip(), row[6].strip(), score))
    return _nonempty(pairs, path)


def list_sts_subsets(directory):
    """Lists the subsets of an STS12-16 style folder.

    Args:
        directory: str or path. A folder such as `STS/STS12-en-test`.

    Returns:
        A sorted list of `(subset_name, input_path, gold_path)` tuples, one per
        `STS*.input.<subset>.txt` file.
    """
    directory = Path(directory)
    found = []
    for entry in sorted(os.listdir(directory)):
        match = _STS_INPUT_RE.match(entry)
        if match is None:
            continue
        prefix, subset = match.groups()
        gold = directory / f"{prefix}.gs.{subset}.txt"
        found.append((subset, directory / entry, gold))
    return found


def read_sts_pair_file(input_path, gold_path):
    """Reads one STS12-16 subset: an input file and its gold-score file.

    Pairs whose gold line is empty (not scored by the annotators) are skipped,
    as SentEval does. Only the first two tab-separated columns of the input
    file are used (the official STS 2016 inputs carry source columns).

    Args:
        input_path: str or path. `STS.input.<subset>.txt`.
        gold_path: str or path. `STS.gs.<subset>.txt`.

    Returns:
        A list of `(sentence_1, sentence_2, score)` tuples.

    Raises:
        FileNotFoundError: if either file is missing.
        ValueError: if the files disagree in length, a line has fewer than two
            columns or a score cannot be parsed.
    """
    input_path, gold_path = Path(input_path), Path(gold_path)
    for p in (input_path, gold_path):
        if not p.is_file():
            raise FileNotFoundError(f"STS file not found: {p}")
    with _open_text(input_path) as f:
        inputs = f.read().splitlines()
    with _open_text(gold_path) as f:
        golds = f.read().splitlines()
    # Tolerate trailing blank lines at the end of either file.
    while inputs and not inputs[-1].strip():
        inputs.pop()
    while len(golds) > len(inputs) and not golds[-1].strip():
        golds.pop()
    if len(golds) != len(inputs):
        raise ValueError(
            f"{gold_path} has {len(golds)} lines but {input_path} has "
            f"{len(inputs)} sentence pairs; expected one gold line per pair "
            "(an empty gold line marks an unscored pair)."
        )
    pairs = []
    for line_no, (line, gold) in enumerate(zip(inputs, golds), start=1):
        gold = gold.strip()
        if not gold:
            continue
        fields = line.split("\t")
        if len(fields) < 2:
            raise ValueError(
                f"{input_path}:{line_no}: expected two tab-separated "
                f"sentences, got {len(fields)} column(s)."
            )
        score = _parse_score(gold, gold_path, line_no)
        pairs.append((fields[0].strip(), fields[1].strip(), score))
    return _nonempty(pairs, gold_path)


def read_sts_folder(directory):
    """Reads every subset of an STS12-16 style folder.

    Subset names come from the file names: `STS.input.MSRpar.txt` with
    `STS.gs.MSRpar.txt` gives the subset `"MSRpar"`. Pairs with an empty gold
    line (unscored) are skipped.

    Args:
        directory: str or path. A folder such as `STS/STS12-en-test`
            (SentEval's names: `STS12-en-test` ... `STS16-en-test`).

    Returns:
        A dict mapping subset name (sorted) to a list of
        `(sentence_1, sentence_2, score)` tuples.

    Raises:
        FileNotFoundError: if the folder does not exist, holds no
            `STS*.input.*.txt` file, or an input file has no gold file.

    Examples:

    >>> subsets = read_sts_folder("data/downstream/STS/STS12-en-test")  # doctest: +SKIP
    >>> sorted(subsets)  # doctest: +SKIP
    ['MSRpar', 'MSRvid', 'SMTeuroparl', 'surprise.OnWN', 'surprise.SMTnews']

    References:
        - [Conneau & Kiela, 2018](https://arxiv.org/abs/1803.05449)
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"STS folder not found: {directory}")
    subsets = list_sts_subsets(directory)
    if not subsets:
        raise FileNotFoundError(
            f"No STS input files (STS.input.<subset>.txt) found in {directory}"
        )
    return {
        name: read_sts_pair_file(input_path, gold_path)
        for name, input_path, gold_path in subsets
    }


def find_sick_file(path, split="test"):
    """Locates the SICK file of one split.

    Args:
        path: str or path. A SICK `.txt` file (returned as is), the `SICK`
            folder, or a folder holding it (SentEval's `downstream/` root).
        split: str. `"train"`, `"dev"` (alias `"trial"`) or `"test"`.
            Defaults to `"test"`.

    Returns:
        A `pathlib.Path` to the file.

    Raises:
        FileNotFoundError: naming every path that was looked at.
    """
    return _find_split_file(
        path, split, SICK_SPLITS, lambda split: SICK_FILES[split], SICK_FOLDERS, "SICK"
    )


def read_sick(path, split="test"):
    """Reads one split of SICK for relatedness (SentEval's SICK-R).

    The files are tab-separated with a header line (`pair_ID`, `sentence_A`,
    `sentence_B`, `relatedness_score`, `entailment_judgment`); the columns are
    found by header name, falling back to SentEval's positions 1, 2, 3.

    Args:
        path: str or path. A SICK file, the `SICK` folder, or a folder holding
            it.
        split: str. `"train"` (`SICK_train.txt`), `"dev"`
            (`SICK_trial.txt`) or `"test"` (`SICK_test_annotated.txt`);
            ignored when `path` is a file. Defaults to `"test"`.

    Returns:
        A list of `(sentence_A, sentence_B, relatedness_score)` tuples; the
        score is a float in [1, 5].

    Raises:
        FileNotFoundError: if the file cannot be found.
        ValueError: on malformed lines.

    Examples:

    >>> pairs = read_sick("data/downstream/SICK", split="test")  # doctest: +SKIP
    >>> len(pairs)  # doctest: +SKIP
    4927

    References:
        - [Marelli et al., 2014](https://aclanthology.org/L14-1314/)
        - [Conneau & Kiela, 2018](https://arxiv.org/abs/1803.05449)
    """
    path = find_sick_file(path, split)
    pairs = []
    with _open_text(path) as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        columns = (1, 2, 3)
        first = True
        for line_no, row in enumerate(reader, start=1):
            if not row or all(not field.strip() for field in row):
                continue
            if first:
                first = False
                header = [field.strip().lower() for field in row]
                if "sentence_a" in header:
                    try:
                        columns = (
                            header.index("sentence_a"),
                            header.index("sentence_b"),
                            header.index("relatedness_score"),
                        )
                    except ValueError:
                        raise ValueError(
                            f"{path}:{line_no}: SICK header lacks "
                            "sentence_B or relatedness_score: "
                            f"{row!r}"
                        ) from None
                    continue
                if "pair_id" in header:
                    continue
                # No header: fall through and read this line as data.
            a, b, s = columns
            if len(row) <= max(columns):
                raise ValueError(
                    f"{path}:{line_no}: expected at least {max(columns) + 1} "
                    f"tab-separated columns, got {len(row)}."
                )
            score = _parse_score(row[s].strip(), path, line_no)
            pairs.append((row[a].strip(), row[b].strip(), score))
    return _nonempty(pairs, path)


# SentEval's STS folder where docs/data.md puts it in a clone (`data/senteval/STS`);
# it has STS-B's train split, which the packaged copy lacks.
CLONE_STS_DIR = Path(__file__).resolve().parents[2] / "data" / "senteval" / "STS"


def load_stsb_pairs(data="stsb", split="test"):
    """STS-B pairs `(s1, s2, score)` from a name, a path or a list.

    Args:
        data: `"stsb"` (the SentEval STS-B files packaged with
            keras_sentemb, which hold dev and test only; in a clone with
            the data of docs/data.md, `data/senteval/STS` is read first and
            has the train split too), a path to an STS-B csv file or folder, or a
            list of `(s1, s2, score)`. Defaults to `"stsb"`.
        split: str. `"train"`, `"dev"` or `"test"` (ignored for a csv file or
            a list). Defaults to `"test"`.

    Returns:
        A non-empty list of `(s1, s2, score)` tuples.
    """
    if isinstance(data, str) and data.lower() in ("stsb", "sts-b", "default"):
        roots = [CLONE_STS_DIR]
        try:
            roots.append(bundled_sts_dir())
        except FileNotFoundError:
            pass
        errors = []
        for root in roots:
            try:
                return read_stsb(root, split)
            except FileNotFoundError as e:
                errors.append(str(e))
        raise FileNotFoundError(
            f"STS-B {split!r} split not found (the packaged copy has dev and test "
            "only; pass the path of an STS-B csv or folder). " + " ".join(errors)
        )
    if isinstance(data, (str, os.PathLike)):
        return read_stsb(os.fspath(data), split)
    if isinstance(data, (list, tuple)):
        pairs = [tuple(p) for p in data]
        if not pairs or any(len(p) != 3 for p in pairs):
            raise ValueError(
                "STS pairs must be a non-empty list of (sentence1, sentence2, score); "
                f"received {len(pairs)} items"
                + (f", the first of length {len(pairs[0])}." if pairs else ".")
            )
        return [(str(a), str(b), float(s)) for a, b, s in pairs]
    raise ValueError(
        "`data` must be 'stsb', a path to an STS-B csv/folder or a list of "
        f"(s1, s2, score). Received: {type(data).__name__}."
    )
