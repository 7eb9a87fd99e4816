"""One line per paper: the STS (and transfer) row a paper's results table reports.

`paper_row` scores an encoder the way a paper's main table does and returns
one JSON-serialisable dict:

```
{"paper": "Carlsson et al. 2021 (CT), Table 1",
 "protocol": {"pooling": "mean", "sts": "...", "aggregation": "all", ...},
 "tasks": {"STS12": 61.2, ..., "STS-B": 70.1, "SICK-R": 65.3, "MR": 80.2, ...},
 "avg": 66.7}
```

STS scores are Spearman x100 of cosine similarity; STS12-16 use the `all`
aggregation (one correlation over the concatenated subsets, the setting of
SimCSE's tables and of ConSERT's section 4.1: "we merge all sentences
together ... and calculate spearman correlation for only once"). `avg` is the
mean over the tasks the paper averages (`avg_tasks`); it is `None` when one
of them is missing, and the protocol names what was run. Transfer tasks
(SentEval, accuracy x100) are reported beside the STS tasks when their data
is given; their mean is `transfer_avg`.

Without `sts_data` only STS-B test is scored, from the STS-B files found by
`load_stsb_pairs("stsb")`, and the protocol says so: the seven-task row needs
SentEval's STS folders (`STS12-en-test`, ..., `STSBenchmark`, `SICK`).

References:
    - [Conneau & Kiela, 2018](https://arxiv.org/abs/1803.05449): SentEval.
    - [Gao et al., 2021](https://arxiv.org/abs/2104.08821): SimCSE,
      Appendix B (the `all` aggregation).
"""

import json
import math
import os
from pathlib import Path

from scipy.stats import spearmanr

from keras_sentemb.evaluation.readers import load_stsb_pairs
from keras_sentemb.evaluation.sts import STS_TASKS
from keras_sentemb.evaluation.sts import STS_YEAR_TASKS
from keras_sentemb.evaluation.sts import _discover
from keras_sentemb.evaluation.sts import _pooling_name
from keras_sentemb.evaluation.sts import evaluate_sts
from keras_sentemb.evaluation.sts_spread import pair_cosines
from keras_sentemb.evaluation.transfer import evaluate_transfer
from keras_sentemb.evaluation.transfer_readers import available_transfer_tasks

ROW_NAMES = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R"}
TRANSFER_TASKS = ("MR", "CR", "SUBJ", "MPQA", "SST2", "TREC", "MRPC")
STSB_ONLY = (
    "STS-B test only (the STS-B files found by load_stsb_pairs('stsb')); pass "
    "SentEval's STS folders (--sts-data DIR) for the paper's full row"
)


def _short(task):
    return ROW_NAMES.get(task, task)


def _round(value):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(float(value), 2)


def _check_tasks(tasks, valid, what):
    tasks = list(tasks)
    unknown = [t for t in tasks if t not in valid]
    if unknown:
        raise ValueError(f"Unknown {what} {unknown}; expected names from {list(valid)}.")
    return tasks


def paper_row(
    encoder,
    paper,
    protocol=None,
    sts_data=None,
    sts_tasks=STS_TASKS,
    avg_tasks=None,
    pooling=None,
    transfer_data=None,
    transfer_tasks=(),
    transfer_config="paper",
    stsb_limit=None,
    batch_size=128,
):
    """The paper's table row for `encoder`: STS tasks, transfer tasks, average.

    Args:
        encoder: a `SentenceEncoder` (or anything with `encode(sentences,
            batch_size=..., pooling=..., show_progress=...)`).
        paper: str. The paper and table the row stands beside (e.g.
            `"Kim et al. 2021 (SG-OPT), Table 1"`).
        protocol: dict or None. The training protocol to record (e.g.
            `{"name": "paper", "steps": 50000}`); the evaluation protocol is
            added to it. Defaults to None.
        sts_data: str, path or None. SentEval's STS folder (its `STS/`
            folder or `data/downstream`). None scores STS-B test only (see
            the module docstring). Defaults to None.
        sts_tasks: sequence of str. The STS tasks of the paper's table, in
            `evaluate_sts` names (`"STS12"` ... `"STS16"`, `"STSBenchmark"`,
            `"SICKRelatedness"`). Defaults to all seven.
        avg_tasks: sequence of str or None. The tasks the paper averages.
            Defaults to `sts_tasks`.
        pooling: str or None. The pooling of the paper's evaluation (passed
            to `encode`); None uses the encoder's own. Defaults to None.
        transfer_data: str, path or None. SentEval's `data/downstream`
            folder for the transfer tasks. Defaults to None (not run).
        transfer_tasks: sequence of str. The transfer tasks the paper
            reports (`"MR"`, `"CR"`, `"SUBJ"`, `"MPQA"`, `"SST2"`, `"TREC"`,
            `"MRPC"`); those whose files exist in `transfer_data` are run.
            Defaults to `()`.
        transfer_config: str or dict. SentEval classifier configuration
            (`"paper"` or `"fast"`, see `evaluate_transfer`). Defaults to
            `"paper"`.
        stsb_limit: int or None. Without `sts_data`: score only the first
            `stsb_limit` STS-B test pairs (quick checks; recorded). Defaults
            to None.
        batch_size: int. Encoding batch size. Defaults to `128`.

    Returns:
        dict: `paper`, `protocol`, `tasks` (`{short name: score x100}`),
        `avg` (mean over `avg_tasks`, or None if one is missing) and, with
        transfer tasks run, `transfer_avg`.

    Raises:
        ValueError: for unknown task names.
        FileNotFoundError: if `sts_data` holds none of `sts_tasks`.

    Examples:

    ```python
    row = paper_row(encoder, "Yan et al. 2021 (ConSERT), Table 2",
                    sts_data="SentEval/data/downstream/STS", pooling="mean_last2")
    print(json.dumps(row))
    ```

    References:
        - [Conneau & Kiela, 2018](https://arxiv.org/abs/1803.05449)
    """
    sts_tasks = _check_tasks(sts_tasks, STS_TASKS, "STS tasks")
    avg_tasks = sts_tasks if avg_tasks is None else _check_tasks(avg_tasks, sts_tasks, "avg tasks")
    transfer_tasks = _check_tasks(transfer_tasks, TRANSFER_TASKS, "transfer tasks")
    evaluation = {
        "similarity": "cosine",
        "metric": "Spearman x100",
        "pooling": _pooling_name(pooling, encoder),
        "aggregation": "all (STS12-16 subsets concatenated, one correlation)",
        "avg_over": [_short(t) for t in avg_tasks],
    }
    tasks = _sts_scores(encoder, sts_data, sts_tasks, pooling, stsb_limit, batch_size, evaluation)
    present = [tasks.get(_short(t)) for t in avg_tasks]
    avg = None if any(v is None for v in present) else _round(sum(present) / len(present))
    if avg is None:
        evaluation["avg"] = "not computed: the paper's average needs every task in avg_over"
    row = {"paper": paper, "protocol": {**dict(protocol or {}), "evaluation": evaluation},
           "tasks": tasks, "avg": avg}
    if transfer_tasks:
        _add_transfer(row, encoder, transfer_data, transfer_tasks, transfer_config, pooling,
                      batch_size)
    return row


def _sts_scores(encoder, sts_data, sts_tasks, pooling, stsb_limit, batch_size, evaluation):
    """`paper_row`'s STS scores, `{short name: Spearman x100}`, in `sts_tasks` order.

    Records in `evaluation` what was scored (`"sts"`) and, with `sts_data`,
    the tasks it lacks (`"sts_missing"`).
    """
    tasks = {}
    if sts_data is None:
        pairs = load_stsb_pairs("stsb", "test")
        if stsb_limit:
            pairs = pairs[: int(stsb_limit)]
        evaluation["sts"] = STSB_ONLY + (f"; first {len(pairs)} pairs" if stsb_limit else "")
        if "STSBenchmark" in sts_tasks:
            cosines = pair_cosines(encoder, pairs, batch_size=batch_size, pooling=pooling)
            rho = spearmanr(cosines, [p[2] for p in pairs]).correlation
            tasks["STS-B"] = _round(100 * rho)
        return tasks
    found = set(_discover(sts_data))
    run = [t for t in sts_tasks if t in found]
    if not run:
        raise FileNotFoundError(
            f"None of the STS tasks {[_short(t) for t in sts_tasks]} found in {sts_data} "
            "(SentEval layout: STS12-en-test/ ... STS16-en-test/, STSBenchmark/, SICK/)."
        )
    result = evaluate_sts(
        encoder, sts_data, tasks=run, batch_size=batch_size, pooling=pooling,
        split="test", aggregation="all", show_progress=False,
    )
    for task in run:
        score = result[task]["all"] if task in STS_YEAR_TASKS else result[task]["test"]
        tasks[_short(task)] = _round(score["spearman"])
    missing = [_short(t) for t in sts_tasks if t not in found]
    evaluation["sts"] = f"SentEval STS folders in {os.fspath(sts_data)}, test splits"
    if missing:
        evaluation["sts_missing"] = missing
    return tasks


def _add_transfer(row, encoder, transfer_data, transfer_tasks, transfer_config, pooling,
                  batch_size):
    """Add the transfer tasks found in `transfer_data` to `row` (accuracy x100).

    Their scores go into `row["tasks"]`, their mean into
    `row["transfer_avg"]` (None when a task is missing); the evaluation
    protocol records what was run or why not.
    """
    evaluation, tasks = row["protocol"]["evaluation"], row["tasks"]
    if transfer_data is None:
        evaluation["transfer"] = (
            f"not run: the paper also reports {list(transfer_tasks)}; pass SentEval's "
            "data/downstream folder (--transfer-data DIR)"
        )
        return
    have = set(available_transfer_tasks(transfer_data))
    run = [t for t in transfer_tasks if t in have]
    missing = [t for t in transfer_tasks if t not in have]
    evaluation["transfer"] = f"SentEval ({transfer_config}) on {os.fspath(transfer_data)}"
    if missing:
        evaluation["transfer_missing"] = missing
    if run:
        result = evaluate_transfer(
            encoder, transfer_data, tasks=run, pooling=pooling, config=transfer_config,
            batch_size=batch_size, show_progress=False,
        )
        for task in run:
            tasks[task] = _round(result[task]["acc"])
        row["transfer_avg"] = (
            None if missing else _round(sum(tasks[t] for t in run) / len(run))
        )


def write_row(row, out=None):
    """Print `row` as one JSON line; write it to `out` too.

    `out` is a `.json` file path, or a folder (created if needed) that gets
    `row.json`. Returns the path written, or None.
    """
    print(json.dumps(row), flush=True)
    if out is None:
        return None
    out = Path(os.fspath(out))
    path = out if out.suffix == ".json" else out / "row.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(row, indent=1) + "\n")
    return path
