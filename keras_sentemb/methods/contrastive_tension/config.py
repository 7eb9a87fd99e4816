"""Contrastive Tension's settings, declared once: its options and the paper's presets.

The `fit_*` signature and docstring, `keras-sentemb train`'s flags and help,
the docs' option tables and the trainer's defaults are read from here.
"""

import dataclasses
import typing

import keras

from keras_sentemb.data.ct_sampler import LAYOUTS
from keras_sentemb.methods.method import Preset
from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.methods.options import option

PAPER = "Carlsson et al. 2021"
# The official code the preset's sources cite.
REPO = "FreddeFrallan/Contrastive-Tension@75293a8"
TRAIN = f"{REPO} ContrastiveTension/Training.py"
KEEP = ("best", "tower1", "tower2", "worst")
# The first-stage learning rate when the run gives none: the paper's with
# K negatives (RMSprop, CT's step schedule), sentence-transformers' for the
# in-batch variant (AdamW).
LEARNING_RATES = {"kN": 1e-5, "in_batch": 2e-5}
LOGITS = ("dot", "cosine")
# The paper's pooling for a raw backbone.
PAPER_POOLING = "mean"


def parse_negatives(negatives):
    """`"k7"` (any `"kN"`) or `"in_batch"` -> (mode, K)."""
    if negatives == "in_batch":
        return "in_batch", 0
    if isinstance(negatives, str) and negatives[:1] == "k" and negatives[1:].isdigit():
        k = int(negatives[1:])
        if k >= 1:
            return "k", k
    raise ValueError(
        f"`negatives` must be 'kN' (N >= 1 random negative pairs per positive, "
        f"the paper uses 'k7') or 'in_batch'; received {negatives!r}."
    )


@dataclasses.dataclass(frozen=True)
class ContrastiveTensionConfig(MethodConfig):
    """Contrastive Tension's options."""

    negatives: str = option("k7", "`\"k7\"` (any `\"kN\"`) or `\"in_batch\"`.",
                            check=parse_negatives, source=f"{PAPER}, section 5")
    logits: str = option("dot", "`\"dot\"` (the paper's raw dot product) or `\"cosine\"` "
                         "(learnable scale).", choices=LOGITS, source=f"{PAPER}, section 4")
    keep: str = option("best", "`\"best\"` (best tower on dev), `\"tower1\"` or `\"tower2\"` "
                       "(that tower at the last step; sentence-transformers keeps tower 2), or "
                       "`\"worst\"` (the tower scoring lower after the last step, the paper's "
                       "reporting rule).", choices=KEEP)
    dropout: bool = option(False, "Dropout on in the towers.")
    optimizer: typing.Union[str, keras.optimizers.Optimizer, None] = option(
        None, "An optimizer name (e.g. `\"adamw\"`, run on the same learning-rate schedule), "
        "a `keras.optimizers.Optimizer`, or None: RMSprop (`kN`) or AdamW (`in_batch`).",
        trainer=False)
    negatives_layout: str = option(
        "official", "The negative rows of a `kN` group: `\"official\"` (`(a, b)`, two random "
        "sentences, as the authors' code samples them) or `\"paper\"` (`(s, n)`, the group's "
        "sentence against a random negative embedded by tower 2, as section 4 and Appendix A.1 "
        "describe). See `ct_pair_dataset`.", choices=LAYOUTS, trainer=False)
    tower_score: typing.Optional[typing.Callable] = option(
        None, "With `keep=\"worst\"`, `encoder -> score` ranking the two towers after training "
        "(e.g. the average of the paper's STS tasks); None scores them on `dev`.",
        python_only=True)


# The papers' settings, named (`--preset NAME`).
PRESETS = {
    "paper-bert-base": Preset(
        "BERT-Base-CT (Carlsson et al. 2021, section 5, Table 1): 50,000 steps on "
        "Wikipedia sentences, the worse tower reported.", {
            "model": ("bert_base_en_uncased", "Table 1 / App. C.1: BERT-Base-CT from "
                                              "bert-base"),
            "batch_size": (16, "section 5: 'The batch size is set to 16'"),
            "negatives": ("k7", "section 5: 'K = 7 negative sentence pairs for each "
                                "positive sentence pair'"),
            "negatives_layout": ("paper", "section 4 and App. A.1 (Figure 4): (s, negative) "
                                          "pairs, 'always use f2 to embed the K negative "
                                          f"sentences'; {REPO} samples (a, b) pairs of two "
                                          "random sentences (negatives_layout "
                                          "'official')"),
            "max_length": (75, f"paper silent; official code does max_sent_len = 75 "
                               f"({REPO} ExampleTraining.py)"),
            "learning_rate": (1e-5, "section 5 and App. A.3: RMSProp, fixed schedule from "
                                    "1e-5 down to 2e-6 (steps as in the official "
                                    f"{TRAIN}: [500, 1000, 1500, 2000])"),
            "logits": ("dot", "section 4, eq. (1): z = f1(s1)^T f2(s2)"),
            "pooling": ("mean", "section 4: 'mean pooling over the features in the final "
                                "layer'"),
            "dropout": (False, "paper silent; official code runs the towers with "
                               f"training=False ({REPO} ContrastiveTensionModel.py)"),
            "steps": (50000, "section 5: 'we strictly perform 50,000 update steps before "
                             "evaluating'"),
            "keep": ("worst", "section 5: 'for all unsupervised tasks we report results "
                              "for the worst-performing of the two models'"),
            "eval_every": (500, f"paper silent; official code evaluates after every "
                                f"500-step epoch ({TRAIN})"),
        }),
}
