"""Self-guided contrastive learning's settings, declared once: its options and the paper's presets.

The `fit_*` signature and docstring, `keras-sentemb train`'s flags and help,
the docs' option tables and the trainer's defaults are read from here.
"""

import dataclasses
import typing

from keras_sentemb import validation
from keras_sentemb.losses.self_guided import SG_LOSSES
from keras_sentemb.methods.method import Preset
from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.methods.options import option

PAPER = "Kim et al. 2021"
# The official code the preset's sources cite.
CODE = "galsang/SG-BERT@23d5ebe training.py"
# SG's "auto" pooling is [CLS] whatever the model declares.
SG_POOLING_REASON = f"SG trains the [CLS] vector ({PAPER}, section 3)"


def _fraction(name):
    return lambda value: validation.fraction(value, name)
VIEW_POOLINGS = ("max", "mean")
# The paper's pooling for a raw backbone.
PAPER_POOLING = "cls"


@dataclasses.dataclass(frozen=True)
class SelfGuidedConfig(MethodConfig):
    """SG's options."""

    loss: str = option("opt3", "`\"opt3\"` (SG-OPT), `\"base\"` (SG), `\"opt1\"` or `\"opt2\"`.",
                       choices=SG_LOSSES, source=f"{PAPER}, section 3.2")
    epochs: int = option(1, "Passes over the corpus when `steps` is None.", minimum=1,
                         source=f"{PAPER}, Table 8")
    temperature: float = option(0.01, "Temperature of the NT-Xent loss.", above=0.0,
                                source=f"{PAPER}, Table 8")
    view_pooling: str = option("max", "How BERT_F's layers are pooled into views: `\"max\"` or "
                               "`\"mean\"`.", choices=VIEW_POOLINGS,
                               source=f"{PAPER}, section 3.1")
    min_layer: int = option(0, "Skip views below this layer.", minimum=0)
    max_layer: typing.Optional[int] = option(None, "Skip views above this layer; None is the "
                                             "last layer.", minimum=0)
    projection_dim: typing.Optional[int] = option(
        4096, "Projection head width; `None` trains without the head, like "
        "`projection=False`.", minimum=1, source=f"{PAPER}, section 3.1")
    projection: bool = option(True, "Use the projection head; `False` compares BERT_T's vector "
                              "and BERT_F's views directly.", source=f"{PAPER}, section 3.1")
    reg_weight: float = option(0.1, "Lambda of the regulariser.", minimum=0.0,
                               source=f"{PAPER}, Table 8")
    freeze_embeddings: bool = option(True, "Freeze BERT_T's embedding block.",
                                     source=f"{PAPER}, section 3.1")
    warmup_ratio: float = option(0.1, "Fraction of steps of linear warmup.",
                                 check=_fraction("warmup_ratio"))
    weight_decay: float = option(0.0, "AdamW weight decay (0, as in the authors' code).",
                                 minimum=0.0)
    patience: typing.Optional[int] = option(10, "Evaluations without improvement before "
                                            "stopping; None never stops early.", minimum=1,
                                            source=f"{PAPER}, Table 8")
    mode: str = option("unsup", "`\"unsup\"` (one sentence feeds both encoders) or `\"pairs\"` "
                       "(BERT_T reads the sentence, BERT_F the positive).",
                       choices=("unsup", "pairs"))


# The papers' settings, named (`--preset NAME`).
PRESETS = {
    "sg-opt-bert-base": Preset(
        "SG-OPT on BERT-base (Kim et al. 2021, Table 1, Table 8), trained on the STS-B "
        "sentences without labels.", {
            "model": ("bert_base_en_uncased", f"{CODE}: --model_name bert-base-uncased"),
            "loss": ("opt3", f"{CODE}: --obj SG-OPT"),
            "pooling": ("cls", "section 3: 'the [CLS] vector from the last layer of BERT_T "
                               "... is regarded as the final sentence embedding'; Table 1 "
                               "evaluates CLS"),
            "view_pooling": ("max", "section 3.1: 'we employ max pooling as p and a uniform "
                                    "sampler as sigma'; the official training.py defaults "
                                    "--pooling2 mean"),
            "temperature": (0.01, f"{CODE}: --T 1e-2"),
            "reg_weight": (0.1, f"{CODE}: --lamb 0.1"),
            "min_layer": (0, f"{CODE}: --lmin 0"),
            "epochs": (1, f"{CODE}: --num_epochs 1"),
            "batch_size": (16, f"{CODE}: --batch_size 16"),
            "learning_rate": (5e-5, f"{CODE}: --lr 5e-5 (AdamW betas (0.9, 0.9), "
                                    "weight_decay 0)"),
            "warmup_ratio": (0.1, f"{CODE}: warmup_steps = 10% of the training steps"),
            "max_length": (128, "galsang/SG-BERT@23d5ebe modules.py: "
                                "Transformer(max_seq_length=128)"),
            "eval_every": (50, f"{CODE}: --eval_step 50 (STS-B dev)"),
            "patience": (10, f"{CODE}: --es 10"),
            "projection_dim": (4096, "galsang/SG-BERT@23d5ebe loss.py l.247-253: "
                                     "Linear(d, 4096), GELU, Linear(4096, 4096), GELU"),
        }),
}
