"""Semantic textual similarity (STS) evaluation with SentEval's conventions.

Pure numpy / scipy: no TensorFlow import here, so the module is fast to import
and easy to test. Any encoder works: an object with
`encode(sentences, batch_size=..., pooling=..., **kwargs)` (such as
`keras_sentemb.SentenceEncoder`) or a plain callable `f(list[str]) -> array`.

Protocol (the one SentEval and SimCSE use for unsupervised STS): embed both
sentences of each pair, score the pair by cosine similarity, and report
Spearman's and Pearson's correlation between the scores and the gold scores,
multiplied by 100. The STS12-16 benchmarks consist of several subsets each;
three aggregates are reported for them:

- `all`: concatenate the pairs of all subsets and compute one correlation
  (SimCSE's "all" setting, the numbers in SimCSE's tables).
- `mean`: unweighted mean of the per-subset correlations (SentEval's "mean").
- `wmean`: mean weighted by the number of pairs of each subset (SentEval's
  "wmean", the numbers SentEval prints as "ALL (weighted average)").

The three can differ by several points, so every result names its protocol.

References:
    - [Conneau & Kiela, 2018](https://arxiv.org/abs/1803.05449): SentEval.
    - [Gao et al., 2021](https://arxiv.org/abs/2104.08821): SimCSE, Appendix B
      ("all" vs "mean" / "wmean" aggregation for STS12-16).
"""

import math
import os
import re
import sys
from pathlib import Path

import numpy as np
from scipy import stats

from keras_sentemb.evaluation import readers
from keras_sentemb.kernels.precision import reproducible

STS_YEAR_TASKS = ("STS12", "STS13", "STS14", "STS15", "STS16")
# SimCSE's reporting order: the seven tasks of the papers' STS tables.
STS_TASKS = STS_YEAR_TASKS + ("STSBenchmark", "SICKRelatedness")
# Multilingual / cross-lingual STS 2017 (one subset per track: ar-ar, ar-en,
# es-es, es-en, en-en, ...). Reported per language pair, outside the 7-task avg.
STS17 = "STS17"
# Tasks made of subsets (reported per subset with all / mean / wmean).
SUBSET_TASKS = STS_YEAR_TASKS + (STS17,)
ALL_TASKS = STS_TASKS + (STS17,)
TASK_ALIASES = {
    "sts2017": STS17,
    "sts-17": STS17,
    "stsb": "STSBenchmark",
    "sts-b": "STSBenchmark",
    "stsbenchmark": "STSBenchmark",
    "sickr": "SICKRelatedness",
    "sick-r": "SICKRelatedness",
    "sickrelatedness": "SICKRelatedness",
}
TASK_FOLDERS = {
    **{task: (f"{task}-en-test",) for task in STS_YEAR_TASKS},
    "STSBenchmark": readers.STSB_FOLDERS,
    "SICKRelatedness": readers.SICK_FOLDERS,
    STS17: ("STS17", "STS2017", "STS17-test"),
}
AGGREGATIONS = ("all", "mean", "wmean")
SPLITS = ("train", "dev", "test")

# A folder that is an STS12-16 folder of unknown year.
_UNKNOWN_YEAR = "STS??"
_YEAR_RE = re.compile(r"STS[-_ ]?(?:20)?(1[2-6])(?!\d)", re.IGNORECASE)
# STS 2017 subsets: STS.input.track1.ar-ar.txt -> track "1", languages "ar-ar".
_STS17_SUBSET_RE = re.compile(r"^track(\w+)\.(.+)$")


def cosine_scores(a, b):
    """Row-wise cosine similarity of two arrays of embeddings.

    `cosine_scores(a, b)[i]` is the cosine of the angle between `a[i]` and
    `b[i]`. A pair involving a zero vector has cosine 0 (instead of NaN).
    Computed in float64.

    Args:
        a: array-like of shape `[n, dim]`.
        b: array-like of shape `[n, dim]`.

    Returns:
        A float64 numpy array of shape `[n]` with values in [-1, 1].

    Raises:
        ValueError: if the inputs are not 2-D arrays of the same shape.

    Examples:

    >>> cosine_scores([[1.0, 0.0], [0.0, 0.0]], [[1.0, 1.0], [1.0, 0.0]])
    array([0.70710678, 0.        ])
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(
            "`a` and `b` must be 2-D arrays of the same shape [n, dim]. "
            f"Received: a.shape={a.shape}, b.shape={b.shape}"
        )
    dots = np.einsum("ij,ij->i", a, b)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    out = np.zeros_like(dots)
    nonzero = norms > 0
    out[nonzero] = dots[nonzero] / norms[nonzero]
    return np.clip(out, -1.0, 1.0)


def resolve_task_name(task):
    """Maps a task name or alias to its canonical name.

    Args:
        task: str. `"STSBenchmark"` (alias `"stsb"`), `"STS12"` ...
            `"STS16"`, or `"SICKRelatedness"` (alias `"sickr"`); case is
            ignored.

    Returns:
        The canonical task name.

    Raises:
        ValueError: for an unknown name, listing the valid ones.
    """
    if isinstance(task, str):
        key = task.strip().lower()
        for name in ALL_TASKS:
            if name.lower() == key:
                return name
        if key in TASK_ALIASES:
            return TASK_ALIASES[key]
    raise ValueError(
        f"Unknown STS task {task!r}. Valid tasks: {list(ALL_TASKS)} "
        "(aliases: 'stsb' for STSBenchmark, 'sickr' for SICKRelatedness)."
    )


def _normalize_splits(split):
    """Returns a tuple of canonical split names for STS-B / SICK."""
    if split is None:
        return ("test",)
    if isinstance(split, str):
        if split.strip().lower() == "all":
            return SPLITS
        values = [split]
    elif isinstance(split, (list, tuple)) and split:
        values = list(split)
    else:
        raise ValueError(
            "`split` must be None, 'train', 'dev', 'test', 'all' or a list of "
            f"those. Received: split={split!r}"
        )
    out = []
    for value in values:
        name = readers._normalize_split(value, SPLITS)
        if name not in out:
            out.append(name)
    return tuple(out)


def _file_task(path):
    """Guesses the task of a single data file."""
    name = path.name
    if name.lower().startswith("sick"):
        return "SICKRelatedness"
    if readers._STS_INPUT_RE.match(name) or ".gs." in name:
        return None
    return "STSBenchmark"


def _file_split(path):
    """Split named by a data file's name, or None."""
    name = path.name.lower()
    for split_name, file_name in readers.SICK_FILES.items():
        if name == file_name.lower():
            return split_name
    match = re.match(r"^sts-(train|dev|test)\.csv$", name)
    return match.group(1) if match else None


def _folder_task(directory):
    """The task a folder itself holds (it is the task's folder), or None."""
    try:
        names = set(os.listdir(directory))
    except OSError:
        return None
    if any(f"sts-{s}.csv" in names for s in SPLITS):
        return "STSBenchmark"
    if any(f in names for f in readers.SICK_FILES.values()):
        return "SICKRelatedness"
    inputs = [m for m in map(readers._STS_INPUT_RE.match, names) if m]
    if inputs and all(_STS17_SUBSET_RE.match(m.group(2)) for m in inputs):
        return STS17
    if inputs:
        match = _YEAR_RE.search(directory.name)
        return f"STS{match.group(1)}" if match else _UNKNOWN_YEAR
    return None


def _locate(data_dir, task):
    """Finds a task's folder (or file) in `data_dir`.

    Returns:
        `(path or None, list of paths looked at)`.
    """
    data_dir = Path(data_dir)
    if data_dir.is_file():
        if _file_task(data_dir) == task:
            return data_dir, [data_dir]
        return None, [data_dir]
    own = _folder_task(data_dir) if data_dir.is_dir() else None
    if own == task or (own == _UNKNOWN_YEAR and task in STS_YEAR_TASKS):
        return data_dir, [data_dir]
    looked = []
    for root in (data_dir, data_dir / "STS"):
        for folder in TASK_FOLDERS[task]:
            candidate = root / folder
            looked.append(candidate)
            if candidate.is_dir():
                return candidate, looked
    return None, looked


def _discover(data_dir):
    """Tasks found in `data_dir`, in SimCSE's order."""
    data_dir = Path(data_dir)
    if data_dir.is_file():
        task = _file_task(data_dir)
        if task is None:
            raise ValueError(
                f"Cannot tell which STS task the file {data_dir} belongs to; "
                "pass a folder, or a STS-B csv / SICK txt file."
            )
        return [task]
    if not data_dir.is_dir():
        raise FileNotFoundError(f"STS data folder not found: {data_dir}")
    own = _folder_task(data_dir)
    if own == _UNKNOWN_YEAR:
        raise ValueError(
            f"{data_dir} holds STS12-16 style files but its name does not say "
            f"which year; pass `tasks=` (one of {list(STS_YEAR_TASKS)})."
        )
    if own is not None:
        return [own]
    found = [task for task in ALL_TASKS if _locate(data_dir, task)[0]]
    if not found:
        raise FileNotFoundError(
            f"No STS task folder found in {data_dir} (nor in "
            f"{data_dir / 'STS'}). Expected SentEval folder names: "
            + ", ".join(f for t in ALL_TASKS for f in TASK_FOLDERS[t])
        )
    return found


def _load_groups(data_dir, task, splits):
    """Loads a task as `{group name: pairs}` plus the path used.

    Groups are subsets for STS12-16 and splits for STS-B / SICK.
    """
    path, looked = _locate(data_dir, task)
    if path is None:
        raise FileNotFoundError(
            f"{task} not found in {data_dir}. Looked for: "
            + ", ".join(str(p) for p in looked)
        )
    if task in SUBSET_TASKS:
        if "test" not in splits:
            raise ValueError(
                f"{task} has only a test split. Received: split={list(splits)}"
            )
        groups = readers.read_sts_folder(path)
        return (sts17_subset_names(groups) if task == STS17 else groups), path
    reader = readers.read_stsb if task == "STSBenchmark" else readers.read_sick
    if path.is_file():
        named = _file_split(path)
        if named is not None and len(splits) == 1 and splits[0] != named:
            raise ValueError(
                f"{path} holds the {named!r} split but split={splits[0]!r} "
                "was requested."
            )
        label = named or (splits[0] if len(splits) == 1 else "test")
        return {label: reader(path)}, path
    return {s: reader(path, s) for s in splits}, path


def sts17_subset_names(groups):
    """STS 2017 subsets renamed by language pair: `track1.ar-ar` -> `ar-ar`.

    A language pair met a second time (track 4b, es-en from WMT) keeps its
    track: `es-en (track4b)`. Names that are not `trackN.xx-yy` stay as they are.

    Examples:

    >>> list(sts17_subset_names({"track4a.es-en": [], "track4b.es-en": [], "track5.en-en": []}))
    ['es-en', 'es-en (track4b)', 'en-en']
    """
    out = {}
    for name, pairs in groups.items():
        match = _STS17_SUBSET_RE.match(name)
        label = match.group(2) if match else name
        if label in out:
            label = f"{label} (track{match.group(1)})" if match else name
        out[label] = pairs
    return out


def load_sts_pairs(data_dir, task, split="test"):
    """Loads the sentence pairs of one STS task from a SentEval-style folder.

    Args:
        data_dir: str or path. SentEval's `downstream/` folder, its `STS/`
            folder, the task's own folder (e.g. `STSBenchmark`), or a single
            STS-B csv / SICK txt file.
        task: str. One of `"STSBenchmark"` (alias `"stsb"`), `"STS12"` ...
            `"STS16"`, `"SICKRelatedness"` (alias `"sickr"`).
        split: str or list of str. For STS-B and SICK: `"train"`, `"dev"`,
            `"test"`, a list of those, or `"all"` (train, dev and test).
            STS12-16 only have a test split (`None`, `"test"` or `"all"`).
            Defaults to `"test"`.

    Returns:
        For STS-B / SICK with a single split: a list of
        `(sentence_1, sentence_2, score)` tuples. For STS-B / SICK with several
        splits: a dict `{split: list of tuples}`. For STS12-16: a dict
        `{subset: list of tuples}` (unscored pairs skipped).

    Raises:
        ValueError: for an unknown task or split.
        FileNotFoundError: if the task's files are missing (the message names
            the paths looked for).

    Examples:

    >>> pairs = load_sts_pairs("data/downstream/STS", "stsb", "dev")  # doctest: +SKIP
    >>> subsets = load_sts_pairs("data/downstream/STS", "STS12")  # doctest: +SKIP

    References:
        - [Conneau & Kiela, 2018](https://arxiv.org/abs/1803.05449)
    """
    task = resolve_task_name(task)
    splits = _normalize_splits(split)
    groups, _ = _load_groups(data_dir, task, splits)
    if task not in SUBSET_TASKS and len(groups) == 1 and len(splits) == 1:
        return next(iter(groups.values()))
    return groups


def keras_hub_encoder(encoder):
    """A `SentenceEncoder` for a keras-hub `TextEmbedder` (or other keras-hub model); else `encoder`.

    A keras-hub model is a callable Keras model that takes token ids, not
    strings: it is turned into the encoder with its pooling and
    normalisation (`keras_sentemb.models.keras_hub_models`). Nothing is
    imported unless keras-hub already is (this module stays light).
    """
    if "keras_hub" not in sys.modules:
        return encoder
    from keras_sentemb.models.keras_hub_models import is_keras_hub_model

    if not is_keras_hub_model(encoder):
        return encoder
    from keras_sentemb.models.sentence_encoder import SentenceEncoder

    return SentenceEncoder.from_preset(encoder)


def _encode(encoder, sentences, batch_size, pooling, encode_kwargs):
    """Encodes `sentences` once; returns a float array `[n, dim]`."""
    encode = getattr(encoder, "encode", None)
    if callable(encode):
        kwargs = dict(encode_kwargs)
        kwargs["batch_size"] = batch_size
        if pooling is not None:
            kwargs["pooling"] = pooling
        embeddings = encode(list(sentences), **reproducible(encode, kwargs))
    elif callable(encoder):
        if pooling is not None:
            raise ValueError(
                "`pooling` can only be passed to an encoder with an `encode` "
                f"method; received a plain callable {encoder!r}."
            )
        chunks = [
            np.asarray(encoder(list(sentences[i : i + batch_size]), **encode_kwargs))
            for i in range(0, len(sentences), batch_size)
        ]
        embeddings = np.concatenate(chunks, axis=0)
    else:
        raise TypeError(
            "`encoder` must have an `encode(sentences, ...)` method or be a "
            f"callable on a list of strings. Received: {type(encoder).__name__}"
        )
    embeddings = np.asarray(embeddings)
    if embeddings.ndim != 2 or embeddings.shape[0] != len(sentences):
        raise ValueError(
            f"The encoder must return an array of shape [{len(sentences)}, dim] "
            f"for {len(sentences)} sentences. Received shape {embeddings.shape}"
        )
    return embeddings


def _as_float(value):
    value = float(value)
    return None if math.isnan(value) else value


def _correlations(predicted, gold):
    """Spearman / Pearson x100 (None where undefined) and the pair count."""
    n = int(len(gold))
    if n < 2 or np.ptp(predicted) == 0 or np.ptp(gold) == 0:
        return {"spearman": None, "pearson": None, "n": n}
    return {
        "spearman": _as_float(100.0 * stats.spearmanr(predicted, gold)[0]),
        "pearson": _as_float(100.0 * stats.pearsonr(predicted, gold)[0]),
        "n": n,
    }


def _mean(values, weights=None):
    if not values or any(v is None for v in values):
        return None
    return float(np.average(values, weights=weights))


def _aggregate(per_subset, predicted, gold):
    """`all` / `mean` / `wmean` over subsets (see the module docstring)."""
    names = list(per_subset)
    counts = [per_subset[n]["n"] for n in names]
    total = int(sum(counts))
    out = {"all": _correlations(predicted, gold)}
    for key, weights in (("mean", None), ("wmean", counts)):
        out[key] = {
            metric: _mean(
                [per_subset[n][metric] for n in names],
                weights if total else None,
            )
            for metric in ("spearman", "pearson")
        }
        out[key]["n"] = total
    return out


def _pooling_name(pooling, encoder):
    if pooling is None:
        pooling = getattr(encoder, "pooling", None)
    if pooling is None or isinstance(pooling, str):
        return pooling
    for attr in ("pooling_mode", "mode", "name"):
        value = getattr(pooling, attr, None)
        if isinstance(value, str):
            return value
    return str(pooling)


def evaluate_sts(
    encoder,
    data_dir,
    tasks=None,
    batch_size=128,
    pooling=None,
    split=None,
    aggregation="all",
    **encode_kwargs,
):
    """Evaluates a sentence encoder on STS12-16, STS-B and SICK-R.

    Follows SentEval's unsupervised STS protocol as SimCSE runs it: each pair
    is scored by the cosine similarity of the two sentence embeddings, and
    Spearman's and Pearson's correlations with the gold scores are reported,
    multiplied by 100. Every unique sentence (over all pairs and tasks) is
    encoded exactly once.

    STS12-16 report each subset plus three aggregates: `all` (one correlation
    over the concatenated pairs, SimCSE's setting), `mean` (unweighted mean of
    the subsets' correlations) and `wmean` (mean weighted by subset size).
    STS-B and SICK-R report the requested split(s). `avg` is the mean over
    tasks of each task's main number: the aggregate chosen by `aggregation`
    for STS12-16, the test split (or the first requested split) for STS-B /
    SICK-R.

    Args:
        encoder: an object with `encode(sentences, batch_size=...,
            pooling=..., **kwargs) -> array [n, dim]` (e.g.
            `SentenceEncoder`), a keras-hub `TextEmbedder` (encoded with its
            pooling and normalisation), or a callable
            `f(list[str]) -> array [n, dim]` (called on chunks of
            `batch_size` sentences).
        data_dir: str or path. SentEval's `data/downstream` folder, its
            `STS/` folder, one task folder (e.g. `STS/STSBenchmark`,
            `STS/STS12-en-test`, `SICK`), or a single STS-B csv / SICK file.
        tasks: str, list of str, or None. Task names: `"STS12"` ... `"STS16"`,
            `"STSBenchmark"` (alias `"stsb"`), `"SICKRelatedness"` (alias
            `"sickr"`), `"STS17"` (STS 2017, multilingual and cross-lingual:
            one subset per language pair, outside `avg`). `None` evaluates
            every task whose folder exists in `data_dir` (STS12-16 and STS17
            only when the test split is requested). Defaults to `None`.
        batch_size: int. Passed to `encoder.encode`. Defaults to 128.
        pooling: str or None. Passed to `encoder.encode` only when not `None`
            (the encoder's own pooling is used otherwise). Defaults to `None`.
        split: str, list of str, or None. STS-B / SICK-R split(s): `"train"`,
            `"dev"`, `"test"` or `"all"` (train, dev and test). STS12-16 only
            have a test split. `None` means `"test"`. Defaults to `None`.
        aggregation: str. Which STS12-16 aggregate enters `avg`: `"all"`,
            `"mean"` or `"wmean"`. Defaults to `"all"`.
        **encode_kwargs: passed on to the encoder (e.g. `max_length=`).

    Returns:
        A JSON-serialisable dict (plain floats; `None` where a correlation is
        undefined, e.g. constant predictions):

        ```
        {"protocol": {"similarity": "cosine", "correlations": "x100",
                      "aggregation": ["all", "mean", "wmean"],
                      "avg_aggregation": "all", "pooling": "mean",
                      "data": {"STS12": {"path": ..., "splits": ["test"]},
                               ...}},
         "STS12": {"subsets": {"MSRpar": {"spearman": .., "pearson": ..,
                                          "n": 750}, ...},
                   "all": {...}, "mean": {...}, "wmean": {...}},
         "STSBenchmark": {"test": {"spearman": .., "pearson": .., "n": 1379}},
         "SICKRelatedness": {"test": {...}},
         "STS17": {"subsets": {"ar-ar": {...}, "en-en": {...}, ...},
                   "all": {...}, "mean": {...}, "wmean": {...}},
         "avg": {"spearman": .., "pearson": .., "tasks": ["STS12", ...],
                 "aggregation": "all", "split": "test"},
         "avg_by_aggregation": {"all": {...}, "mean": {...}, "wmean": {...}}}
        ```

        `avg` is the papers' 7-task average (over the tasks run, STS17
        excepted); `avg_by_aggregation` gives it under each STS12-16
        aggregation.

    Raises:
        ValueError: for an unknown task, split or aggregation, or an encoder
            output of the wrong shape.
        FileNotFoundError: if a requested task's files are missing (the
            message names the paths looked for).

    Examples:

    >>> def encode(sentences):  # any callable list[str] -> [n, dim]
    ...     return np.array([[len(s), s.count("a") + 1.0] for s in sentences])
    >>> results = evaluate_sts(encode, "data/downstream/STS", tasks="stsb")  # doctest: +SKIP
    >>> results["STSBenchmark"]["test"]["spearman"]  # doctest: +SKIP

    References:
        - [Conneau & Kiela, 2018](https://arxiv.org/abs/1803.05449): SentEval.
        - [Gao et al., 2021](https://arxiv.org/abs/2104.08821): SimCSE;
          Appendix B compares the "all", "mean" and "wmean" settings.
    """
    batch_size = _check_arguments(aggregation, batch_size)
    encoder = keras_hub_encoder(encoder)
    splits = _normalize_splits(split)
    names = _task_names(data_dir, tasks, splits)
    # Read everything first so that missing files fail before encoding.
    loaded = {}
    for task in names:
        groups, path = _load_groups(data_dir, task, splits)
        loaded[task] = (groups, path)
    score = _pair_scorer(encoder, loaded, batch_size, pooling, encode_kwargs)

    results = {
        "protocol": {
            "similarity": "cosine",
            "correlations": "x100",
            "aggregation": list(AGGREGATIONS),
            "avg_aggregation": aggregation,
            "pooling": _pooling_name(pooling, encoder),
            "data": {},
        }
    }
    main = {}
    main_split = "test" if "test" in splits else splits[0]
    for task, (groups, path) in loaded.items():
        task_result, main_result = _task_result(task, groups, score, aggregation, main_split)
        if main_result is not None:
            main[task] = main_result
        used_splits = ["test"] if task in SUBSET_TASKS else list(task_result)
        results[task] = task_result
        results["protocol"]["data"][task] = {
            "path": str(path),
            "splits": used_splits,
        }
    if main:
        results["avg"] = _average(results, main, aggregation, main_split)
        # The 7-task average under each STS12-16 aggregation (the papers differ).
        results["avg_by_aggregation"] = {
            agg: _average(results, main, agg, main_split) for agg in AGGREGATIONS
        }
    return results


def _check_arguments(aggregation, batch_size):
    """`batch_size` as an int, after checking it and `aggregation` (ValueError)."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(
            f"`aggregation` must be one of {list(AGGREGATIONS)}. "
            f"Received: aggregation={aggregation!r}"
        )
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, (int, np.integer))
        or batch_size < 1
    ):
        raise ValueError(
            f"`batch_size` must be a positive integer. Received: {batch_size!r}"
        )
    return int(batch_size)


def _task_names(data_dir, tasks, splits):
    """The canonical names of the tasks to run: `tasks`, or those found in `data_dir`."""
    if tasks is None:
        names = _discover(data_dir)
        if "test" not in splits:
            names = [t for t in names if t not in SUBSET_TASKS]
            if not names:
                raise FileNotFoundError(
                    f"No task with a {list(splits)} split found in {data_dir} "
                    "(STS12-16 only have a test split)."
                )
        return names
    if isinstance(tasks, str):
        tasks = [tasks]
    return resolved_names(tasks, resolve_task_name)


def resolved_names(tasks, resolve):
    """`resolve(task)` of each of `tasks`, first occurrences in order; an empty list is an error."""
    names = list(dict.fromkeys(resolve(task) for task in tasks))
    if not names:
        raise ValueError("`tasks` is empty; pass None for every task found.")
    return names


def _pair_scorer(encoder, loaded, batch_size, pooling, encode_kwargs):
    """`score(pairs) -> (predicted, gold)`, every unique sentence encoded exactly once."""
    sentences = list(
        dict.fromkeys(
            sentence
            for groups, _ in loaded.values()
            for pairs in groups.values()
            for s1, s2, _ in pairs
            for sentence in (s1, s2)
        )
    )
    if sentences:
        embeddings = _encode(encoder, sentences, batch_size, pooling, encode_kwargs)
    else:
        embeddings = np.zeros((0, 1), dtype=np.float32)
    index = {sentence: i for i, sentence in enumerate(sentences)}

    def score(pairs):
        first = np.array([index[p[0]] for p in pairs], dtype=np.int64)
        second = np.array([index[p[1]] for p in pairs], dtype=np.int64)
        predicted = cosine_scores(embeddings[first], embeddings[second])
        gold = np.array([p[2] for p in pairs], dtype=np.float64)
        return predicted, gold

    return score


def _task_result(task, groups, score, aggregation, main_split):
    """`(result, main)`: a task's correlations and its number in `avg` (None: none).

    STS12-16 and STS17: each subset, then the `all` / `mean` / `wmean`
    aggregates (STS17 stays out of `avg`); STS-B and SICK-R: each split.
    """
    if task in SUBSET_TASKS:
        per_subset, predicted_all, gold_all = {}, [], []
        for name, pairs in groups.items():
            predicted, gold = score(pairs)
            per_subset[name] = _correlations(predicted, gold)
            predicted_all.append(predicted)
            gold_all.append(gold)
        result = {"subsets": per_subset}
        result.update(
            _aggregate(
                per_subset,
                np.concatenate(predicted_all) if predicted_all else np.zeros(0),
                np.concatenate(gold_all) if gold_all else np.zeros(0),
            )
        )
        # STS17 is reported per language pair, not in the 7-task avg.
        return result, (None if task == STS17 else result[aggregation])
    result = {}
    for name, pairs in groups.items():
        result[name] = _correlations(*score(pairs))
    key = main_split if main_split in result else next(iter(result))
    return result, result[key]


def _average(results, main, aggregation, main_split):
    """The mean over the `main` tasks, with STS12-16 taken under `aggregation`."""
    picked = [results[t][aggregation] if t in STS_YEAR_TASKS else main[t] for t in main]
    out = {m: _mean([p[m] for p in picked]) for m in ("spearman", "pearson")}
    out.update(tasks=list(main), aggregation=aggregation, split=main_split)
    return out
