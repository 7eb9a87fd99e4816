"""Shared plumbing of the evaluation plots (matplotlib with the Agg backend)."""

from pathlib import Path


def axes(figsize=(6, 4), ncols=1):
    """A new `(figure, axes)` pair drawn off-screen (Agg; no display needed).

    With `ncols` > 1, `axes` is the row of `ncols` panels.
    """
    import matplotlib  # loaded only when a plot is drawn (a slow import)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after choosing the off-screen backend

    return plt.subplots(ncols=ncols, figsize=figsize)


def named_results(results, marker, what):
    """One result (a dict holding `marker`) or `{name: result}` as `{name: result}`."""
    if isinstance(results, dict) and marker in results:
        return {"": results}
    if not isinstance(results, dict) or not results:
        raise ValueError(
            f"`results` must be a {what} result or a non-empty {{name: result}} dict."
        )
    return results


def save(fig, path, legend=False):
    """Lay out, optionally add the legend, write `path` (folders created) and close."""
    import matplotlib.pyplot as plt  # loaded only when a plot is drawn

    if legend:
        fig.axes[0].legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
