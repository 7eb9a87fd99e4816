"""The `README.md` model card of an exported Hugging Face folder.

YAML front matter in the Hub's format (`library_name`, `pipeline_tag`,
`tags`, `base_model`, `datasets`, `license`, and a `model-index` with the
STS results recorded in the encoder's model card), then the toolkit's own
card (`keras_sentemb.model_card.render_markdown`). The card is also written
as `model_card.json`.
"""

import json
import re

from keras_sentemb.model_card import CARD_JSON
from keras_sentemb.model_card import build_model_card
from keras_sentemb.model_card import render_markdown
from keras_sentemb.models import presets

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# Evaluation entries that are STS results (names as `evaluation_entries` writes them).
_STS_NAME = re.compile(r"^(STS|SICK)", re.IGNORECASE)


def _yaml(value):
    """A YAML scalar: JSON strings and numbers are valid YAML."""
    return json.dumps(value, ensure_ascii=False)


def _hub_base_model(base):
    """A Hub id for the card's `base_model`, or None for local paths."""
    if not isinstance(base, str):
        return None
    if base == "default":
        return DEFAULT_MODEL_ID
    return base if _HUB_ID.match(base) and not base.startswith((".", "/")) else None


def _default_license():
    """The bundled default model's license, from its own card's front matter."""
    try:
        text = (presets.default_model_dir() / "README.md").read_text(encoding="utf-8")
    except (OSError, presets.ModelNotFoundError, TypeError):
        return None
    match = re.search(r"^license:\s*(\S+)\s*$", text.split("\n---", 1)[0], re.MULTILINE)
    return match.group(1) if match else None


def sts_results(card):
    """`(dataset, split, spearman)` of the card's STS entries (Spearman as a fraction)."""
    out = []
    for entry in card.get("evaluation") or []:
        name, value = str(entry.get("name", "")), entry.get("value")
        protocol = str(entry.get("protocol", ""))
        if not isinstance(value, (int, float)) or not _STS_NAME.match(name):
            continue
        if "spearman" not in protocol.lower() or protocol.endswith((", mean", ", wmean")):
            continue
        out.append((name, entry.get("split") or "test", float(value) / 100.0))
    return out


def front_matter(card, format, name, license=None, datasets=None):
    """The YAML front matter lines of the card (between `---` lines)."""
    st = format == "sentence-transformers"
    training = card.get("training") or {}
    tags = ["sentence-transformers", "feature-extraction", "sentence-similarity",
            "keras-sentemb"] if st else ["feature-extraction", "keras-sentemb"]
    if training.get("method"):
        tags.append(str(training["method"]))
    base = _hub_base_model(card.get("base_model"))
    if license is None and card.get("base_model") == "default":
        license = _default_license()
    lines = ["---", f"library_name: {'sentence-transformers' if st else 'transformers'}",
             f"pipeline_tag: {'sentence-similarity' if st else 'feature-extraction'}", "tags:"]
    lines += [f"- {_yaml(t)}" for t in tags]
    if base:
        lines.append(f"base_model: {_yaml(base)}")
    if datasets:
        lines += ["datasets:"] + [f"- {_yaml(d)}" for d in datasets]
    if license:
        lines.append(f"license: {_yaml(license)}")
    results = sts_results(card)
    if results:
        lines += ["model-index:", f"- name: {_yaml(name)}", "  results:"]
        for dataset, split, value in results:
            lines += [
                "  - task:", "      type: semantic-similarity", "      name: Semantic Similarity",
                "    dataset:", f"      name: {_yaml(dataset)}", f"      type: {_yaml(dataset)}",
                f"      split: {_yaml(split)}",
                "    metrics:", "    - type: spearman_cosine", f"      value: {value:.6g}",
                "      name: Spearman Cosine",
            ]
    return lines + ["---"]


def write_hf_card(folder, encoder, format, report=None, license=None, datasets=None):
    """Write `README.md` (front matter + card) and `model_card.json` into `folder`."""
    card = build_model_card(encoder)
    card["export"] = {
        "format": format,
        "output_dim": int(encoder.output_dim),
        "verified_max_rel_diff": None if report is None else report["max_rel_diff"],
        "verified_min_cosine": None if report is None else report["min_cosine"],
    }
    name = folder.name.split(".tmp-")[0].lstrip(".") or "sentence-encoder"
    usage = (
        ["## Usage", "", "```python", "from sentence_transformers import SentenceTransformer",
         "", 'model = SentenceTransformer("PATH_OR_HUB_ID")',
         'embeddings = model.encode(["A sentence.", "Another one."])', "```", ""]
        if format == "sentence-transformers" else
        ["## Usage", "", "```python", "from transformers import AutoModel, AutoTokenizer", "",
         'model = AutoModel.from_pretrained("PATH_OR_HUB_ID")',
         'tokenizer = AutoTokenizer.from_pretrained("PATH_OR_HUB_ID")', "```", "",
         f"Sentence vectors: `{card['model']['pooling']}` pooling of `last_hidden_state`"
         + (", then L2 normalization." if card["model"]["normalize"] else "."), ""]
    )
    body = render_markdown(card, title=name).split("\n")
    text = "\n".join(front_matter(card, format, name, license, datasets) + [""] + body[:2]
                     + usage + body[2:])
    (folder / "README.md").write_text(text, encoding="utf-8")
    with open(folder / CARD_JSON, "w", encoding="utf-8") as f:
        json.dump(card, f, indent=2)
