"""The papers' benchmark in one call: STS + transfer, as JSON and markdown tables.

- `sts_markdown(result)`: the 7-task STS table of the papers (STS12-16,
  STS-B, SICK-R, Avg.; Spearman x100), one row per STS12-16 aggregation,
  plus an STS 2017 table (one column per language pair) when it was run.
- `transfer_markdown(result)`: MR, CR, SUBJ, MPQA, SST2, TREC, MRPC, Avg.
  (accuracy %, MRPC also F1).
- `evaluate_all(encoder, data_dir)`: `evaluate_sts` + `evaluate_transfer`
  over whatever the folder holds; `report_markdown(report)` renders it.

References:
    - [Gao et al., 2021](https://arxiv.org/abs/2104.08821): SimCSE, Tables
      5 and 7 (the layouts).
"""

from keras_sentemb.evaluation.sts import AGGREGATIONS
from keras_sentemb.evaluation.sts import STS17
from keras_sentemb.evaluation.sts import STS_TASKS
from keras_sentemb.evaluation.sts import STS_YEAR_TASKS
from keras_sentemb.evaluation.sts import evaluate_sts
from keras_sentemb.evaluation.transfer import evaluate_transfer
from keras_sentemb.evaluation.transfer_readers import TRANSFER_TASKS
from keras_sentemb.evaluation.transfer_readers import available_transfer_tasks

SHORT_NAMES = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R"}


def _cell(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _protocol_line(protocol, keys):
    parts = [f"{k}: {protocol[k]}" for k in keys if protocol.get(k) is not None]
    return "Protocol: " + "; ".join(parts) + "." if parts else ""


def sts_markdown(result, metric="spearman"):
    """The papers' STS table from an `evaluate_sts` result (markdown).

    One row per STS12-16 aggregation (`all`, SimCSE's; `mean`; `wmean`,
    SentEval's "weighted average") when STS12-16 were run, else one row;
    STS-B and SICK-R give their test split (or the split that was run). An
    STS17 table follows when it was run.

    Args:
        result: dict. What `evaluate_sts` returned.
        metric: str. `"spearman"` or `"pearson"`. Defaults to `"spearman"`.

    Returns:
        str (markdown).

    Examples:

    >>> result = {"protocol": {"similarity": "cosine", "pooling": "mean"},
    ...           "STSBenchmark": {"test": {"spearman": 82.03, "pearson": 83.0, "n": 1379}},
    ...           "avg_by_aggregation": {"all": {"spearman": 82.03, "pearson": 83.0}}}
    >>> print(sts_markdown(result))
    | Spearman x100 | STS-B | Avg. |
    |---|---|---|
    | test | 82.03 | 82.03 |
    <BLANKLINE>
    Protocol: similarity: cosine; pooling: mean.
    """
    if metric not in ("spearman", "pearson"):
        raise ValueError(f"`metric` must be 'spearman' or 'pearson'. Received: {metric!r}.")
    tasks = [t for t in STS_TASKS if t in result]
    has_years = any(t in STS_YEAR_TASKS for t in tasks)
    blocks = []
    if tasks:
        header = [f"{metric.capitalize()} x100"] + [SHORT_NAMES.get(t, t) for t in tasks] + ["Avg."]
        rows = []
        for agg in AGGREGATIONS if has_years else ("all",):
            row = [f"STS12-16 {agg}" if has_years else "test"]
            for task in tasks:
                value = result[task]
                if task in STS_YEAR_TASKS:
                    row.append(_cell(value[agg][metric]))
                else:
                    split = "test" if "test" in value else next(iter(value))
                    row.append(_cell(value[split][metric]))
            avg = result.get("avg_by_aggregation", {}).get(agg, {}).get(metric)
            row.append(_cell(avg))
            rows.append(row)
        blocks.append(_table(header, rows))
    if STS17 in result:
        subsets = result[STS17]["subsets"]
        header = [f"STS17 {metric} x100"] + list(subsets) + ["mean"]
        row = ["test"] + [_cell(s[metric]) for s in subsets.values()]
        row.append(_cell(result[STS17]["mean"][metric]))
        blocks.append(_table(header, [row]))
    line = _protocol_line(result.get("protocol", {}), ("similarity", "pooling"))
    return "\n\n".join(blocks + ([line] if line else []))


def transfer_markdown(result):
    """The papers' transfer table from an `evaluate_transfer` result (markdown).

    Examples:

    >>> result = {"protocol": {"name": "senteval-paper", "pooling": "mean"},
    ...           "TREC": {"acc": 91.2}, "MRPC": {"acc": 75.1, "f1": 82.4},
    ...           "avg": {"acc": 83.15}}
    >>> print(transfer_markdown(result))
    | accuracy % | TREC | MRPC | Avg. |
    |---|---|---|---|
    | test | 91.20 | 75.10 / 82.40 | 83.15 |
    <BLANKLINE>
    MRPC: accuracy / F1. Protocol: name: senteval-paper; pooling: mean.
    """
    tasks = [t for t in TRANSFER_TASKS if t in result]
    row = ["test"]
    for task in tasks:
        cell = _cell(result[task]["acc"])
        if "f1" in result[task]:
            cell += f" / {_cell(result[task]['f1'])}"
        row.append(cell)
    row.append(_cell(result.get("avg", {}).get("acc")))
    table = _table(["accuracy %"] + tasks + ["Avg."], [row])
    note = "MRPC: accuracy / F1. " if "MRPC" in tasks else ""
    line = _protocol_line(result.get("protocol", {}), ("name", "pooling", "mrpc_features", "seed"))
    return table + "\n\n" + note + line


def report_markdown(report, title=None):
    """Markdown of an `evaluate_all` report: the STS table, then the transfer table."""
    parts = [f"# {title or 'Evaluation report'}"]
    if report.get("model"):
        parts.append(f"Model: `{report['model']}`")
    if report.get("sts"):
        parts += ["## STS (cosine, Spearman x100)", sts_markdown(report["sts"])]
    if report.get("transfer"):
        parts += ["## SentEval transfer tasks", transfer_markdown(report["transfer"])]
    return "\n\n".join(parts) + "\n"


def evaluate_all(encoder, data_dir, pooling=None, seed=1111, config="paper", batch_size=128,
                 sts_tasks=None, transfer_tasks=None):
    """STS and transfer tasks found in `data_dir`, in one report.

    Args:
        encoder: see `evaluate_sts`.
        data_dir: str or path. SentEval's `data/downstream` folder.
        pooling: str or None. Overrides the encoder's pooling.
        seed: int. The transfer classifiers' seed. Defaults to `1111`.
        config: str or dict. The transfer configuration. Defaults to `"paper"`.
        batch_size: int. Encoding batch size. Defaults to `128`.
        sts_tasks: list or None. STS tasks (None: every one found).
        transfer_tasks: list or None. Transfer tasks (None: every one found).

    Returns:
        dict `{"sts": ..., "transfer": ...}`; a part is None when no task of
        that kind was found (and not asked for).
    """
    quiet = {"show_progress": False} if hasattr(encoder, "encode") else {}
    report = {"sts": None, "transfer": None}
    try:
        report["sts"] = evaluate_sts(encoder, data_dir, tasks=sts_tasks, batch_size=batch_size,
                                     pooling=pooling, **quiet)
    except FileNotFoundError:
        if sts_tasks is not None:
            raise
    if transfer_tasks is not None or available_transfer_tasks(data_dir):
        report["transfer"] = evaluate_transfer(
            encoder, data_dir, tasks=transfer_tasks, pooling=pooling, seed=seed, config=config,
            batch_size=batch_size, **quiet,
        )
    if report["sts"] is None and report["transfer"] is None:
        raise FileNotFoundError(f"No STS or SentEval transfer task found in {data_dir}.")
    return report
