"""Readers for SentEval's transfer tasks in its `data/downstream` layout.

Each reader returns plain Python data (no numpy, no TensorFlow):

- a sentence task (MR, CR, SUBJ, MPQA, SST2, TREC) gives a dict
  `{split: (sentences, labels)}` with `labels` a list of ints;
- MRPC gives `{split: (sentences_a, sentences_b, labels)}`.

Layout (SentEval's names, relative to the `downstream/` folder):

| task | files | splits |
|---|---|---|
| MR | `MR/rt-polarity.{pos,neg}` | `all` (10-fold cross-validation) |
| CR | `CR/custrev.{pos,neg}` | `all` |
| SUBJ | `SUBJ/subj.{objective,subjective}` | `all` |
| MPQA | `MPQA/mpqa.{pos,neg}` | `all` |
| SST2 | `SST/binary/sentiment-{train,dev,test}` (`text<TAB>label`) | `train`, `dev`, `test` |
| TREC | `TREC/{train_5500,TREC_10}.label` (`COARSE:fine question`) | `train`, `test` |
| MRPC | `MRPC/msr_paraphrase_{train,test}.txt` (header, then `label, id1, id2, s1, s2`) | `train`, `test` |

Text handling follows SentEval: every sentence is split on whitespace and
re-joined with single spaces (SentEval hands token lists to the encoder's
batcher, which joins them), and empty lines are skipped. SentEval reads the
MR/CR/SUBJ/MPQA and TREC files as Latin-1; here each line is decoded as UTF-8
when it is valid UTF-8 and as Latin-1 otherwise, which gives SentEval's text
for the original Latin-1 files and the right text for copies re-encoded to
UTF-8. Labels: MR/CR/MPQA positive 1, negative 0; SUBJ objective 1,
subjective 0 (SentEval's order); TREC's six coarse classes ABBR, DESC, ENTY,
HUM, LOC, NUM as 0-5.

References:
    - [Conneau & Kiela, 2018. SentEval: An Evaluation Toolkit for Universal
      Sentence Representations](https://arxiv.org/abs/1803.05449)
"""

import os
from pathlib import Path

BINARY_TASKS = {
    # task: (folder, positive-class file, negative-class file)
    "MR": ("MR", "rt-polarity.pos", "rt-polarity.neg"),
    "CR": ("CR", "custrev.pos", "custrev.neg"),
    "SUBJ": ("SUBJ", "subj.objective", "subj.subjective"),
    "MPQA": ("MPQA", "mpqa.pos", "mpqa.neg"),
}
SST2_FILES = {"train": "sentiment-train", "dev": "sentiment-dev", "test": "sentiment-test"}
TREC_FILES = {"train": "train_5500.label", "test": "TREC_10.label"}
TREC_CLASSES = ("ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM")
MRPC_FILES = {"train": "msr_paraphrase_train.txt", "test": "msr_paraphrase_test.txt"}
TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")


def decode_line(raw):
    """A line of bytes as text: UTF-8 when valid, else Latin-1 (SentEval's reading).

    Examples:

    >>> decode_line(b"caf\\xc3\\xa9"), decode_line(b"caf\\xe9")
    ('café', 'café')
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def read_lines(path, columns=False):
    """Non-empty lines of a file, decoded with `decode_line`, whitespace-normalised.

    A UTF-8 byte-order mark at the start is dropped; `\\r\\n` line ends are
    accepted; every line is split on whitespace and re-joined with single
    spaces (SentEval's tokens, joined), and lines left empty are skipped.

    Args:
        path: str or path.
        columns: bool. Keep the tabs (only strip the line) for files of
            tab-separated columns. Defaults to `False`.

    Returns:
        A list of `(line_number, text)` tuples (1-based line numbers).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Transfer task file not found: {path}")
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    out = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        text = decode_line(raw)
        text = text.strip() if columns else " ".join(text.split())
        if text:
            out.append((number, text))
    return out


def _task_dir(data_dir, folder):
    """The task's folder in `data_dir` (SentEval's `downstream/`), or `data_dir` itself."""
    data_dir = Path(data_dir)
    for candidate in (data_dir / folder, data_dir / "downstream" / folder):
        if candidate.is_dir():
            return candidate
    return data_dir / folder


def task_files(data_dir, task):
    """The files a task reads from `data_dir` (whether or not they exist).

    Args:
        data_dir: str or path. SentEval's `data/downstream` folder (or
            `data/`, which holds `downstream/`).
        task: str. One of `TRANSFER_TASKS`.

    Returns:
        A list of paths.
    """
    task = resolve_transfer_task(task)
    if task in BINARY_TASKS:
        folder, pos, neg = BINARY_TASKS[task]
        root = _task_dir(data_dir, folder)
        return [root / pos, root / neg]
    if task == "SST2":
        root = _task_dir(data_dir, os.path.join("SST", "binary"))
        return [root / name for name in SST2_FILES.values()]
    if task == "TREC":
        root = _task_dir(data_dir, "TREC")
        return [root / name for name in TREC_FILES.values()]
    root = _task_dir(data_dir, "MRPC")
    return [root / name for name in MRPC_FILES.values()]


def available_transfer_tasks(data_dir):
    """The transfer tasks whose files all exist in `data_dir`, in SentEval's order."""
    return [t for t in TRANSFER_TASKS if all(p.is_file() for p in task_files(data_dir, t))]


def resolve_transfer_task(task):
    """Canonical task name (`"mr"` -> `"MR"`, `"sst"` -> `"SST2"`).

    Raises:
        ValueError: for an unknown name, listing the valid ones.
    """
    if isinstance(task, str):
        key = task.strip().upper().replace("-", "")
        if key == "SST":
            key = "SST2"
        if key in TRANSFER_TASKS:
            return key
    raise ValueError(f"Unknown transfer task {task!r}. Valid tasks: {list(TRANSFER_TASKS)}.")


def read_binary_task(data_dir, task):
    """MR, CR, SUBJ or MPQA: `{"all": (sentences, labels)}`, class 1 first.

    Examples:

    >>> import pathlib, tempfile
    >>> root = pathlib.Path(tempfile.mkdtemp()) / "MR"
    >>> root.mkdir()
    >>> _ = (root / "rt-polarity.pos").write_bytes(b"a  fine film\\n\\ncaf\\xe9 bliss\\n")
    >>> _ = (root / "rt-polarity.neg").write_text("a dull one\\n")
    >>> read_binary_task(root.parent, "MR")["all"]
    (['a fine film', 'café bliss', 'a dull one'], [1, 1, 0])
    """
    task = resolve_transfer_task(task)
    if task not in BINARY_TASKS:
        raise ValueError(f"{task} is not a binary sentence task ({list(BINARY_TASKS)}).")
    positive, negative = task_files(data_dir, task)
    pos = [text for _, text in read_lines(positive)]
    neg = [text for _, text in read_lines(negative)]
    return {"all": (pos + neg, [1] * len(pos) + [0] * len(neg))}


def _parse_label(text, path, number, valid):
    try:
        label = int(text)
    except ValueError:
        label = None
    if label not in valid:
        raise ValueError(
            f"{path}:{number}: expected a label in {sorted(valid)}, got {text!r}."
        )
    return label


def read_sst2(data_dir):
    """SST-2 (binary): `{"train"|"dev"|"test": (sentences, labels)}`.

    Each line is `text<TAB>label` with label 0 or 1.
    """
    out = {}
    for split, path in zip(SST2_FILES, task_files(data_dir, "SST2")):
        sentences, labels = [], []
        for number, text in read_lines(path, columns=True):
            fields = text.split("\t")
            if len(fields) < 2:
                raise ValueError(f"{path}:{number}: expected 'text<TAB>label'.")
            labels.append(_parse_label(fields[-1].strip(), path, number, {0, 1}))
            sentences.append(" ".join("\t".join(fields[:-1]).split()))
        out[split] = (sentences, labels)
    return out


def read_trec(data_dir):
    """TREC question types: `{"train"|"test": (questions, coarse labels 0-5)}`.

    Each line is `COARSE:fine question`; the fine label is dropped.
    """
    index = {name: i for i, name in enumerate(TREC_CLASSES)}
    out = {}
    for split, path in zip(TREC_FILES, task_files(data_dir, "TREC")):
        sentences, labels = [], []
        for number, text in read_lines(path):
            target, _, rest = text.partition(":")
            if target not in index or " " not in rest:
                raise ValueError(
                    f"{path}:{number}: expected 'COARSE:fine question' with COARSE in "
                    f"{list(TREC_CLASSES)}, got {text[:60]!r}."
                )
            labels.append(index[target])
            sentences.append(rest.split(" ", 1)[1])
        out[split] = (sentences, labels)
    return out


def read_mrpc(data_dir):
    """MRPC: `{"train"|"test": (sentences_a, sentences_b, labels)}`.

    The first line of each file is a header (`Quality  #1 ID  #2 ID  #1 String
    #2 String`) and is skipped, as SentEval does; columns 0, 3 and 4 are the
    label and the two sentences.
    """
    out = {}
    for split, path in zip(MRPC_FILES, task_files(data_dir, "MRPC")):
        a, b, labels = [], [], []
        for i, (number, text) in enumerate(read_lines(path, columns=True)):
            if i == 0:
                continue  # the header
            fields = text.split("\t")
            if len(fields) < 5:
                raise ValueError(
                    f"{path}:{number}: expected 5 tab-separated columns "
                    f"(label, id1, id2, s1, s2), got {len(fields)}."
                )
            labels.append(_parse_label(fields[0].strip(), path, number, {0, 1}))
            a.append(" ".join(fields[3].split()))
            b.append(" ".join(fields[4].split()))
        out[split] = (a, b, labels)
    return out


def read_transfer_task(data_dir, task):
    """Any transfer task by name (see the module docstring for the layout).

    Raises:
        ValueError: for an unknown task or a malformed line (file and line named).
        FileNotFoundError: when a file is missing (the path is named).
    """
    task = resolve_transfer_task(task)
    if task in BINARY_TASKS:
        return read_binary_task(data_dir, task)
    return {"SST2": read_sst2, "TREC": read_trec, "MRPC": read_mrpc}[task](data_dir)
