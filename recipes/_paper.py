"""Shared pieces of the recipes: the paper-settings table, `--help`, `--seeds`.

Not a recipe. Each recipe keeps ONE table of its paper's main setting,
`PAPER = {name: Setting(value, source)}`, whose method settings are the
method's named preset (`preset_table`); its argparse defaults are taken
from that table (`paper_value(PAPER, name)`), and `paper_parser` prints the
table (value and where it was checked) and what differs here in `--help`.
"""

import argparse
import math
from dataclasses import dataclass

from keras_sentemb.quiet_startup import add_verbose_flag


@dataclass(frozen=True)
class Setting:
    """One value of a paper's main setting and where it was checked.

    Args:
        value: the value (as the recipe's flag takes it).
        source: str. Where the value comes from (paper section, official
            script and commit), or why it could not be verified.
    """

    value: object
    source: str


def preset_table(method, preset, rows):
    """A recipe's `PAPER` table, whose method settings are the method's named preset.

    The values and their sources are the preset's (declared once, beside the
    method: `keras-sentemb train METHOD --preset NAME` runs them too); what
    is the recipe's own (its data, protocol, evaluation) is given here.

    Args:
        method: str. The registered method.
        preset: str. The name of its preset.
        rows: list, in the table's order, of an argument name of the preset,
            a pair `(recipe name, argument name)` for a flag the recipe names
            differently, or a pair `(name, Setting)` of the recipe's own.

    Returns:
        dict name -> `Setting`.
    """
    from keras_sentemb.methods.registry import get_method

    settings = get_method(method).presets[preset].settings
    table = {}
    for row in rows:
        name, argument = (row, row) if isinstance(row, str) else row
        table[name] = argument if isinstance(argument, Setting) else Setting(*settings[argument])
    return table


def paper_value(paper, name):
    """The value of `name` in a recipe's `PAPER` table."""
    return paper[name].value


def paper_epilog(paper, differences):
    """`--help` text: the paper's settings with their sources, then what differs here."""
    width = max(len(name) for name in paper)
    lines = ["The paper's main setting (the defaults):"]
    for name, setting in paper.items():
        lines.append(f"  {name:<{width}}  {setting.value!r:<24} {setting.source}")
    lines.append("")
    lines.append("What differs here:")
    lines.extend(f"  - {line}" for line in differences)
    return "\n".join(lines)


def paper_parser(doc, paper, differences):
    """An `ArgumentParser` whose `--help` shows `doc`, the paper table and the differences.

    It takes `--verbose` (TensorFlow's start-up logs, see
    `keras_sentemb.quiet_startup.run_quietly`, the recipes' entry point).
    """
    return add_verbose_flag(argparse.ArgumentParser(
        description=doc,
        epilog=paper_epilog(paper, differences),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    ))


def add_seeds(parser, default=1, help_runs="the paper's"):
    """`--seeds N` (repeat the run with seeds seed..seed+N-1) on `parser`."""
    parser.add_argument(
        "--seeds", type=int, default=default,
        help=f"repeat the whole run with N seeds (--seed, --seed+1, ...) and report "
             f"mean and std of every score ({help_runs} number of runs: see below)",
    )


def mean_std(values):
    """Mean and sample standard deviation (0 for one value) of a list of floats."""
    values = [float(v) for v in values]
    mean = sum(values) / len(values)
    if len(values) < 2:
        return {"mean": round(mean, 2), "std": 0.0, "n": len(values)}
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return {"mean": round(mean, 2), "std": round(math.sqrt(var), 2), "n": len(values)}


def summarize_seeds(runs, keys):
    """`{key: mean_std([...])}` over the per-seed result dicts `runs` (nested keys as "a.b")."""
    def get(run, key):
        for part in key.split("."):
            run = run[part]
        return run

    return {key: mean_std([get(run, key) for run in runs]) for key in keys}


def add_row_args(parser, transfer=False, out=True):
    """`--sts-data`, `--transfer-data` (when the paper reports transfer tasks) and `--out`.

    The recipe's last line is the paper's table row (`emit_row`).
    """
    parser.add_argument(
        "--sts-data", default=None, metavar="DIR",
        help="SentEval's STS folder (STS12-en-test ... STS16-en-test, STSBenchmark, SICK) "
             "for the paper's full STS row; default: the bundled STS-B test only (the row "
             "says so)",
    )
    if transfer:
        parser.add_argument(
            "--transfer-data", default=None, metavar="DIR",
            help="SentEval's data/downstream folder: the transfer tasks the paper reports "
                 "(those present are run; default: none)",
        )
    if out:
        parser.add_argument("--out", default=None,
                            help="write the table row here (a .json file, or a folder: row.json)")


def table_row(encoder, args, paper, protocol, **row_kwargs):
    """The paper's table row for `encoder` (`paper_row`) with the recipe's data flags.

    Under `--smoke` without `--sts-data` only the first 150 STS-B test pairs
    are scored, and the row says it is a CPU check.
    """
    from keras_sentemb.evaluation.paper_row import paper_row

    smoke = getattr(args, "smoke", False)
    if smoke and args.sts_data is None:
        row_kwargs.setdefault("stsb_limit", 150)
    row = paper_row(
        encoder, paper, protocol=protocol, sts_data=args.sts_data,
        transfer_data=getattr(args, "transfer_data", None), **row_kwargs,
    )
    if smoke:
        row["protocol"]["smoke"] = "a CPU check of the pipeline, not a result"
    return row


def average_rows(rows):
    """One row from the rows of several seeds: every score is the mean over the seeds.

    The protocol records the seeds' count and each score's sample std
    (`protocol["std"]`).
    """
    if len(rows) == 1:
        return rows[0]
    row = {**rows[0], "protocol": dict(rows[0]["protocol"])}
    tasks, std = {}, {}
    for task in rows[0]["tasks"]:
        values = [r["tasks"][task] for r in rows]
        if any(v is None for v in values):
            tasks[task] = None
            continue
        summary = mean_std(values)
        tasks[task], std[task] = summary["mean"], summary["std"]
    row["tasks"] = tasks
    for key in ("avg", "transfer_avg"):
        if key in rows[0]:
            values = [r.get(key) for r in rows]
            row[key] = None if any(v is None for v in values) else mean_std(values)["mean"]
            if row[key] is not None:
                std[key] = mean_std(values)["std"]
    row["protocol"].update(runs=len(rows), std=std)
    return row


def emit_row(row, args):
    """Print the row as one JSON line (the recipe's last line) and write it to `--out`."""
    from keras_sentemb.evaluation.paper_row import write_row

    write_row(row, getattr(args, "out", None))
    return row
