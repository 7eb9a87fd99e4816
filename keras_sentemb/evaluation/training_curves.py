"""Training curves: the loss and the dev score per step, from a training report.

Every `fit_*` function (and `keras-sentemb train`) saves a
`training_report.json` beside the model it writes. The report holds the
mean training loss of each `eval_every` steps (`loss_history`) and, with a
dev set, every candidate's dev score at each evaluation
(`selection["history"]`). This module reads those two series and draws them
as one PNG of two panels, so a run can be judged at a glance: did the loss
fall, did the dev score rise, and where was the kept checkpoint.

Reports written before the loss was recorded have no `loss_history`; their
loss panel says so and the dev panel is drawn as usual.
"""

import json
import os

from keras_sentemb.evaluation import _plotting

REPORT_FILE = "training_report.json"
# The loss panel is log-scaled when the loss spans at least this factor.
LOG_SCALE_RATIO = 20


def load_training_report(model_dir):
    """The training report of a model folder, as a dict.

    Args:
        model_dir: str or path. A model folder written by a `fit_*` function
            or `keras-sentemb train`.

    Returns:
        The dict of `training_report.json`.

    Raises:
        FileNotFoundError: the folder holds no training report (a one-line
            message naming the folder).

    Examples:

    ```python
    report = load_training_report("models/ct")
    report["method"], report["steps_trained"]
    ```
    """
    path = os.path.join(os.fspath(model_dir), REPORT_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"no training report in {os.fspath(model_dir)}: {REPORT_FILE} is written "
            "beside a model trained by `keras-sentemb train` or a fit_* function"
        )
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not valid JSON ({e.msg}, line {e.lineno})") from None


def training_curves(report):
    """The loss and dev-score series of a training report.

    Args:
        report: dict (the JSON of `training_report.json`, see
            `load_training_report`) or a `TrainingReport`.

    Returns:
        A dict: `method`, `steps_trained`, `loss` (list of `[step, loss]`,
        empty for reports without a recorded loss), `monitor` (the dev
        metric's name or None), `dev` (`{candidate: [[step, score], ...]}`,
        empty without a dev set), `kept`, `kept_step` and `kept_score` (the
        checkpoint the dev selection kept, or None).

    Examples:

    ```python
    curves = training_curves(load_training_report("models/ct"))
    curves["loss"][:2]    # [[50, 2.31], [100, 1.87]]
    curves["dev"].keys()  # dict_keys(['tower1', 'tower2'])
    ```
    """
    if hasattr(report, "to_dict"):
        report = report.to_dict()
    if not isinstance(report, dict) or "method" not in report:
        raise ValueError("`report` must be a training report (a dict with a 'method').")
    selection = report.get("selection") or {}
    dev = {}
    for step, scores in selection.get("history") or []:
        for name, score in scores.items():
            dev.setdefault(name, []).append([int(step), score])
    return {
        "method": report["method"],
        "steps_trained": report.get("steps_trained"),
        "loss": [[int(step), loss] for step, loss in report.get("loss_history") or []],
        "monitor": selection.get("monitor"),
        "dev": dev,
        "kept": selection.get("kept"),
        "kept_step": selection.get("kept_step"),
        "kept_score": selection.get("kept_score"),
    }


def plot_training_curves(results, path, title=None):
    """Loss per step (left) and dev score per step (right) as one PNG.

    The loss axis is logarithmic when the loss falls (or rises) by a factor
    of 20 or more; both panels share the steps axis.

    Args:
        results: one `training_curves` result or `{name: result}` (several
            runs on the same axes).
        path: str. The PNG to write (folders are created).
        title: str or None. The figure's title. Defaults to the method's
            training curves.

    Returns:
        `path`.

    Examples:

    ```python
    curves = training_curves(load_training_report("models/ct"))
    plot_training_curves(curves, "img/training.png")
    ```
    """
    results = _plotting.named_results(results, "loss", "training curves")
    fig, (loss_ax, dev_ax) = _plotting.axes(figsize=(11, 4), ncols=2)
    for name, res in results.items():
        if res["loss"]:
            steps = [s for s, _ in res["loss"]]
            losses = [float("nan") if v is None else v for _, v in res["loss"]]
            loss_ax.plot(steps, losses, "o-", markersize=3, label=name or None)
        for candidate, points in res["dev"].items():
            label = " ".join(p for p in (name, candidate) if p) or None
            dev_ax.plot([s for s, _ in points], [v for _, v in points], "o-", markersize=3, label=label)
        if res["kept_step"] is not None and res["kept_score"] is not None:
            dev_ax.plot([res["kept_step"]], [res["kept_score"]], "k*", markersize=12)
    if not any(res["loss"] for res in results.values()):
        loss_ax.text(0.5, 0.5, "no loss recorded in the report", ha="center", va="center",
                     transform=loss_ax.transAxes)
    if not any(res["dev"] for res in results.values()):
        dev_ax.text(0.5, 0.5, "no dev set in this run", ha="center", va="center",
                    transform=dev_ax.transAxes)
    losses = [v for res in results.values() for _, v in res["loss"] if v is not None]
    if losses and min(losses) > 0 and max(losses) / min(losses) >= LOG_SCALE_RATIO:
        loss_ax.set_yscale("log")  # a loss that falls by orders of magnitude
    if losses and any(res["dev"] for res in results.values()):
        loss_ax.set_xlim(dev_ax.get_xlim())  # the same steps under both panels
    monitor = next((r["monitor"] for r in results.values() if r["monitor"]), None)
    loss_ax.set_xlabel("optimizer step")
    loss_ax.set_ylabel("mean loss over each eval_every steps")
    loss_ax.set_title("Training loss")
    dev_ax.set_xlabel("optimizer step")
    dev_ax.set_ylabel(monitor or "dev score")
    dev_ax.set_title("Dev score (star: the kept checkpoint)")
    for ax in (loss_ax, dev_ax):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize=8)
    methods = sorted({res["method"] for res in results.values()})
    fig.suptitle(title or f"Training curves: {', '.join(methods)}")
    return _plotting.save(fig, path)
