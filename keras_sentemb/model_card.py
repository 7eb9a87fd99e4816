"""Model cards: how a saved or exported encoder came to be, as JSON and markdown.

Every model folder written by `SentenceEncoder.save` (so by `train` and by
every `fit_*(output=...)`) holds `model_card.json` and `MODEL_CARD.md`;
`export_saved_model` copies them into the SavedModel's `assets.extra/`. A
card holds:

- `model`: architecture, layers, widths, pooling, normalisation, length;
- `base_model`: what training started from;
- `training`: the `TrainingReport` of the `fit_*` call (method, every
  hyperparameter and what `"auto"` resolved to, data counts, steps, the
  selection rule and the dev history, method extras, wall time), or None;
- `evaluation`: results, each named with its protocol: the dev selection
  (STS-B dev Spearman of the kept checkpoint, or the method's own rule) and
  any result added later with `add_evaluation` (`keras-sentemb evaluate ...
  --update-card`);
- `previous`: the card of the model this one was trained from, if it had one;
- `versions`: keras_sentemb, Keras, keras-hub, TensorFlow.
"""

import json
from pathlib import Path

from keras_sentemb.version import library_versions

CARD_JSON = "model_card.json"
CARD_MD = "MODEL_CARD.md"
CARD_FORMAT = 1


def _selection_evaluation(selection):
    """The dev-selection result of a training report, named with its protocol."""
    if not selection or selection.get("kept") is None:
        return None
    monitor = selection.get("monitor")
    protocol = (
        "STS-B dev (SentEval files), Spearman x100 of cosine similarity"
        if monitor == "sts_dev_spearman" else monitor
    )
    return {
        "name": "dev selection",
        "protocol": protocol,
        "split": "dev",
        "value": selection.get("kept_score"),
        "kept": selection.get("kept"),
        "kept_step": selection.get("kept_step"),
        "every": selection.get("every"),
    }


def build_model_card(encoder, evaluations=None):
    """The card of `encoder` as a JSON-serialisable dict.

    Uses `encoder.training_report` (set by the `fit_*` functions) and
    `encoder.model_card` (the card the encoder was loaded with, if any).

    Args:
        encoder: `SentenceEncoder`.
        evaluations: list of dicts or None. Extra evaluation entries (each
            with at least `name` and `protocol`).

    Returns:
        dict (see the module docstring).
    """
    report = getattr(encoder, "training_report", None)
    loaded = getattr(encoder, "model_card", None) or {}
    backbone = encoder.backbone
    card = {
        "format_version": CARD_FORMAT,
        "model": {
            "architecture": type(backbone).__name__,
            "num_layers": int(encoder.num_layers),
            "hidden_dim": int(encoder.hidden_dim),
            "output_dim": int(encoder.output_dim),
            "vocabulary_size": int(backbone.vocabulary_size),
            "pooling": encoder.pooling,
            "normalize": bool(encoder.normalize),
            "max_length": int(encoder.max_length),
            "projection_dim": encoder.projection_dim,
        },
        "base_model": None,
        "training": None,
        "evaluation": [],
        "previous": None,
        "versions": library_versions(),
    }
    if report is not None:
        training = report.to_dict()
        card["base_model"] = training.pop("model")
        training.pop("versions", None)
        card["training"] = training
        selected = _selection_evaluation(training.get("selection"))
        if selected is not None:
            card["evaluation"].append(selected)
        if loaded:  # trained from a model that had a card
            card["previous"] = {k: loaded.get(k) for k in ("base_model", "training", "previous")}
    elif loaded:
        for key in ("base_model", "training", "evaluation", "previous"):
            card[key] = loaded.get(key, card[key])
        card["evaluation"] = list(card["evaluation"] or [])
    card["evaluation"].extend(evaluations or [])
    return card


def _fmt(value):
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return "`" + json.dumps(value) + "`"
    return "-" if value is None else f"`{value}`" if isinstance(value, str) else str(value)


def _rows(mapping):
    return [f"| {k} | {_fmt(v)} |" for k, v in mapping.items()]


def render_markdown(card, title=None):
    """`MODEL_CARD.md` text for a card dict."""
    training = card.get("training") or {}
    method = training.get("method")
    lines = [f"# {title or ('Sentence encoder' + (f' trained with {method}' if method else ''))}", ""]
    lines += ["Written by keras_sentemb. `model_card.json` holds the same facts as data.", ""]
    lines += ["## Model", "", "| | |", "|---|---|"] + _rows(card["model"])
    lines += ["", f"Base model: {_fmt(card.get('base_model'))}", ""]
    if training:
        lines += ["## Training", "", "| | |", "|---|---|"]
        for key in ("method", "pooling", "pooling_reason", "steps", "steps_trained", "stopped", "seconds"):
            lines.append(f"| {key} | {_fmt(training.get(key))} |")
        lines += ["", "### Hyperparameters (every argument of the call)", "", "| name | value |", "|---|---|"]
        lines += _rows(training.get("hyperparameters") or {})
        lines += ["", "### Resolved (what `auto` and the defaults became)", "", "| name | value |", "|---|---|"]
        lines += _rows(training.get("resolved") or {})
        lines += ["", "### Data", "", "| | count |", "|---|---|"] + _rows(training.get("data") or {})
        selection = training.get("selection")
        if selection:
            lines += ["", "### Selection", "",
                      f"Rule: keep the best candidate by `{selection.get('monitor')}` every "
                      f"{selection.get('every')} steps, the starting weights included. Kept: "
                      f"{_fmt(selection.get('kept'))} at step {_fmt(selection.get('kept_step'))} "
                      f"({_fmt(selection.get('kept_score'))}).", "", "| step | scores |", "|---|---|"]
            lines += [f"| {step} | {_fmt(scores)} |" for step, scores in selection.get("history", [])]
        if training.get("extras"):
            lines += ["", "### Method extras", "", "| | |", "|---|---|"] + _rows(training["extras"])
        lines.append("")
    else:
        lines += ["## Training", "", "Not trained by keras_sentemb (no training report).", ""]
    lines += ["## Evaluation", ""]
    if card.get("evaluation"):
        lines += ["| name | protocol | split | value |", "|---|---|---|---|"]
        for entry in card["evaluation"]:
            lines.append(
                f"| {entry.get('name')} | {entry.get('protocol')} | {entry.get('split', '-')} | "
                f"{_fmt(entry.get('value'))} |"
            )
    else:
        lines.append("No evaluation recorded.")
    if card.get("previous"):
        prev = card["previous"]
        method = (prev.get("training") or {}).get("method")
        lines += ["", "## Trained from", "",
                  f"A keras_sentemb model (base {_fmt(prev.get('base_model'))}"
                  + (f", method {_fmt(method)}" if method else "") + "); its card is under `previous`."]
    if card.get("export"):
        lines += ["", "## Export", "", "| | |", "|---|---|"] + _rows(card["export"])
    lines += ["", "## Versions", "", "| library | version |", "|---|---|"] + _rows(card["versions"])
    return "\n".join(lines) + "\n"


def write_model_card(folder, card):
    """Write `model_card.json` and `MODEL_CARD.md` into `folder` (which exists)."""
    folder = Path(folder)
    with open(folder / CARD_JSON, "w", encoding="utf-8") as f:
        json.dump(card, f, indent=2)
    (folder / CARD_MD).write_text(render_markdown(card), encoding="utf-8")


def read_model_card(folder):
    """The card dict stored in a model folder, or None."""
    path = Path(folder) / CARD_JSON
    if not path.is_file():
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def evaluation_entries(benchmark, result):
    """Card entries (name, protocol, split, value) from an `evaluate_*` result.

    Args:
        benchmark: str. `"sts"`, `"transfer"`, `"all"` or `"retrieval"`.
        result: dict. What `evaluate_sts` / `evaluate_transfer` /
            `evaluate_all` / `evaluate_retrieval` returned.
    """
    if benchmark == "all":
        return [e for kind in ("sts", "transfer") if result.get(kind)
                for e in evaluation_entries(kind, result[kind])]
    protocol = result.get("protocol", {})
    entries = []
    if benchmark == "retrieval":
        described = (f"BEIR {protocol.get('data')}, {protocol.get('similarity')}, "
                     f"dim {protocol.get('dim')}, exact search, trec_eval x100")
        for key in ("query_prompt", "corpus_prompt"):
            if protocol.get(key):
                described += f", {key.replace('_', ' ')} {protocol[key]!r}"
        return [{"name": f"retrieval {metric}", "protocol": described,
                 "split": protocol.get("split"), "value": result[metric]}
                for metric in ("ndcg@10", "mrr@10", "map@100", "recall@1", "recall@10",
                               "recall@100")]
    if benchmark == "sts":
        described = f"cosine, Spearman x100, pooling {protocol.get('pooling')}"
        for task, value in result.items():
            if task in ("protocol", "avg", "avg_by_aggregation", "model"):
                continue
            if "subsets" in value:
                for agg in ("all", "mean", "wmean"):
                    entries.append({"name": task, "protocol": f"{described}, {agg}", "split": "test",
                                    "value": value[agg]["spearman"]})
            else:
                entries += [{"name": task, "protocol": described, "split": split,
                             "value": scores["spearman"]} for split, scores in value.items()]
        if "avg" in result:
            entries.append({"name": f"STS avg ({len(result['avg']['tasks'])} tasks)",
                            "protocol": f"{described}, STS12-16 {result['avg']['aggregation']}",
                            "split": "test", "value": result["avg"]["spearman"]})
        return entries
    described = (f"{protocol.get('name')} (logistic regression, seed {protocol.get('seed')}), "
                 f"pooling {protocol.get('pooling')}")
    for task, value in result.items():
        if task in ("protocol", "avg", "model"):
            continue
        entries.append({"name": task, "protocol": f"{described}, {value.get('protocol')}, accuracy %",
                        "split": "test", "value": value["acc"]})
        if "f1" in value:
            entries.append({"name": f"{task} F1", "protocol": f"{described}, F1 x100",
                            "split": "test", "value": value["f1"]})
    return entries
