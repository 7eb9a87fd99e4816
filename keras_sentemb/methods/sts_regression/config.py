"""STS regression's settings, declared once: its options and the paper's preset.

`fit_sts_regression`'s signature and docstring, `keras-sentemb train sts`'s flags
and help and the docs' option tables are read from here.
"""

import dataclasses

from keras_sentemb.methods.method import Preset
from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.methods.options import option

PAPER = "Carlsson et al. 2021"
# What the preset's sources say where the paper is silent.
NO_CODE = ("paper silent; the authors' repository (FreddeFrallan/Contrastive-Tension@75293a8) "
           "has no regression code")
LABEL_MODES = ("model_specific", "unit")
STS_SCORE_RANGE = (0.0, 5.0)
# The columns of streamed pairs (`.jsonl` keys, a `.csv` header; the first three `.tsv` columns).
STREAM_COLUMNS = ("sentence1", "sentence2", "score")


@dataclasses.dataclass(frozen=True)
class STSRegressionConfig(MethodConfig):
    """`fit_sts_regression`'s options."""

    labels: str = option("model_specific", "`\"model_specific\"` (gold scores mapped onto "
                         "[M, 1]) or `\"unit\"` (onto [0, 1]).", choices=LABEL_MODES,
                         source=f"{PAPER}, section 5.2")
    epochs: int = option(4, "Epochs when `steps` is None.")
    num_buckets: int = option(20, "Buckets used to find M.", minimum=1,
                              source=f"{PAPER}, section 5.2")
    warmup_ratio: float = option(0.1, "Fraction of steps of linear warm-up.")
    weight_decay: float = option(0.01, "AdamW weight decay.", minimum=0.0)


# The paper's settings, named (`--preset NAME`).
PRESETS = {
    "ct-bert-base": Preset(
        "CT's supervised STS-b regression (Carlsson et al. 2021, section 5.2, Table 2) on "
        "BERT-base (or a CT model): labels mapped onto [M, 1], 8 epochs.", {
            "model": ("bert_base_en_uncased", "Table 2: BERT-base and its CT / S-BERT "
                                              "variants"),
            "labels": ("model_specific", "section 5.2: labels 'linearly mapped to the range "
                                         "[M, 1], where M is the mean cosine similarity of "
                                         "the lowest bucket'"),
            "num_buckets": (20, "section 5.2: 20 buckets of width 5/20 = 0.25 over STS-b "
                                "train, right-closed: '[0, 0.25] and the next bucket covers "
                                "the range (0.25, 0.5]'"),
            "epochs": (8, "section 5.2: '10 training runs for 8 epochs'"),
            "batch_size": (16, f"{NO_CODE}; the S-BERT regression setup it follows "
                               "(section 5.2) trains STS-B with batch 16 in "
                               "sentence-transformers' example"),
            "learning_rate": (2e-5, f"{NO_CODE}; sentence-transformers' default (AdamW "
                                    "2e-5) of the S-BERT setup"),
            "max_length": (75, f"{NO_CODE}; CT's own max_sent_len = 75 "
                               "(ExampleTraining.py)"),
        }),
}
