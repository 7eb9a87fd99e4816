"""Evaluation results added to a saved model's card (`evaluate ... --update-card`)."""

import os
from pathlib import Path

from keras_sentemb.model_card import CARD_JSON
from keras_sentemb.model_card import CARD_MD
from keras_sentemb.model_card import build_model_card
from keras_sentemb.model_card import evaluation_entries
from keras_sentemb.model_card import read_model_card
from keras_sentemb.model_card import write_model_card
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.models import presets


def add_evaluation(folder, benchmark, result):
    """Add an evaluation result to the card of a saved model folder (rewritten whole).

    Entries of the same name and protocol are replaced. A keras_sentemb
    model folder without a card (saved before cards existed) gets one.

    Raises:
        ValueError: when `folder` is not a keras_sentemb model folder.
    """
    folder = Path(os.fspath(folder))
    if not (folder / presets.SENTEMB_CONFIG).is_file():
        raise ValueError(
            f"--update-card needs a model folder written by keras_sentemb; {folder} is not one."
        )
    card = read_model_card(folder)
    if card is None:
        card = build_model_card(SentenceEncoder.from_preset(str(folder)))
    new = evaluation_entries(benchmark, result)
    keys = {(e["name"], e["protocol"], e.get("split")) for e in new}
    card["evaluation"] = [e for e in card.get("evaluation", [])
                          if (e["name"], e["protocol"], e.get("split")) not in keys] + new
    tmp = folder / f".{CARD_JSON}.tmp-{os.getpid()}"
    tmp.mkdir()
    try:
        write_model_card(tmp, card)
        for name in (CARD_JSON, CARD_MD):
            os.replace(tmp / name, folder / name)
    finally:
        for name in (CARD_JSON, CARD_MD):
            if (tmp / name).exists():
                os.remove(tmp / name)
        tmp.rmdir()
    return card
