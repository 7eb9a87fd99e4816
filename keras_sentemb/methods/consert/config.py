"""ConSERT's settings, declared once: its options and the paper's presets.

The `fit_*` signature and docstring, `keras-sentemb train`'s flags and help,
the docs' option tables and the trainer's defaults are read from here.
"""

import dataclasses
import os
import typing

from keras_sentemb import validation
from keras_sentemb.augment.views import parse_view_pair
from keras_sentemb.augment.views import parse_view_rates
from keras_sentemb.methods.method import Preset
from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.methods.options import option
from keras_sentemb.models.pooling import parse_pooling

PAPER = "Yan et al. 2021"
# The official code the preset's sources cite.
SCRIPT = "yym6472/ConSERT@03c9e8f scripts/unsup-consert-base.sh"
MAIN = "yym6472/ConSERT@03c9e8f main.py"
# Streamed labelled pairs: rows read to count the classes.
LABEL_SAMPLE = 10_000
UNSUP_VIEWS = ("shuffle", "feature_cutoff")


def _fraction(name):
    return lambda value: validation.fraction(value, name)
CONSERT_FIT_MODES = ("unsup", "sup", "joint", "sup_unsup", "joint_unsup")
ADVERSARIAL = "adversarial"
# The paper's pooling for a raw backbone.
PAPER_POOLING = "mean"


def parse_views(views):
    """ConSERT's two views: the registry's, or `"adversarial"` in supervised modes."""
    return parse_view_pair(views, extra=(ADVERSARIAL,))


@dataclasses.dataclass(frozen=True)
class ConSERTConfig(MethodConfig):
    """ConSERT's options."""

    mode: str = option("unsup", "`\"unsup\"`, `\"sup\"`, `\"joint\"`, `\"sup_unsup\"` or "
                       "`\"joint_unsup\"`.", choices=CONSERT_FIT_MODES,
                       trainer=False)  # the trainer's `mode` is one stage of these
    supervised: typing.Union[str, os.PathLike, list, tuple, None] = option(
        None, "NLI / labelled-pair data of the two-stage modes (a path or a list of rows).",
        trainer=False)
    views: typing.Union[str, typing.Tuple[str, ...]] = option(
        "shuffle,feature_cutoff", "The two views, e.g. `\"shuffle,feature_cutoff\"` or "
        "`\"token_cutoff,dropout_exact\"` (a pair or `\"a,b\"`).", check=parse_views,
        source=f"{PAPER}, section 5.2")
    view_rates: typing.Union[str, typing.Tuple[typing.Optional[float], ...], None] = option(
        None, "Rates of the two views, e.g. `\"0.1,0.2\"`; None is each view's default rate "
        "(`none` for one of them, e.g. `\"none,0.2\"`).", check=parse_view_rates)
    temperature: float = option(0.1, "Temperature of the NT-Xent loss.", above=0.0,
                                source=f"{PAPER}, section 4.1")
    encoder_dropout: bool = option(False, "Keep the encoder's own dropout on (the paper "
                                   "removes it).", source=f"{PAPER}, section 4.1")
    alpha: float = option(0.15, "Contrastive weight in joint modes.", minimum=0.0,
                          source=f"{PAPER}, section 4.1")
    noise_norm: float = option(1.0, "Adversarial view strength.", above=0.0)
    supervised_steps: typing.Optional[int] = option(
        None, "Steps of the supervised stage of the two-stage modes; None is one epoch of the "
        "supervised data.", minimum=1)
    supervised_learning_rate: float = option(2e-5, "Learning rate of the supervised stage of "
                                             "the two-stage modes.", above=0.0)
    epochs: int = option(10, "Passes over the data when `steps` is None (ConSERT's "
                         "unsupervised setting, `scripts/unsup-consert-base.sh`).", minimum=1)
    warmup_ratio: float = option(0.1, "Share of each stage's steps of linear warm-up.",
                                 check=_fraction("warmup_ratio"), source=f"{PAPER}, section 4.1")
    patience: typing.Optional[int] = option(10, "Dev evaluations without improvement before "
                                            "stopping; None never stops early.", minimum=1)
    dev_pooling: typing.Optional[str] = option(
        None, "The pooling the dev set is scored with (e.g. `\"mean_last2\"`, the paper's "
        "evaluation); None scores with the training pooling.", check=parse_pooling)


# The papers' settings, named (`--preset NAME`).
PRESETS = {
    "unsup-bert-base": Preset(
        "Unsupervised ConSERT-base (Yan et al. 2021, section 4.1, Table 2), trained on the "
        "unlabeled STS texts.", {
            "model": ("bert_base_en_uncased", "section 4.1: 'We use both the BERT-base and "
                                              "BERT-large'; Table 2 ConSERT-base"),
            "views": ("shuffle,feature_cutoff", "section 5 (Figure 5): 'When combined "
                                                "Shuffle with Feature Cutoff, we achieve "
                                                "the best result'"),
            "temperature": (0.1, "section 4.1: 'The temperature tau of NT-Xent loss is set "
                                 "to 0.1'"),
            "batch_size": (96, "section 4.1: 'The batch size is set to 96 in most of our "
                               "experiments'"),
            "learning_rate": (5e-7, "section 4.1: 'We adopt Adam optimizer and set the "
                                    "learning rate to 5e-7'"),
            "max_length": (64, "section 4.1: 'The max sequence length is set to 64'"),
            "epochs": (10, f"paper silent; official code does --num_epochs 10 ({SCRIPT})"),
            "warmup_ratio": (0.1, "section 4.1: 'a linear learning rate warm-up over 10% "
                                  "of the training steps'"),
            "eval_every": (200, "section 4.1: 'evaluate the model every 200 steps during "
                                "training. The best checkpoint on the dev set of STSb is "
                                "saved for test'"),
            "patience": (10, f"paper silent; official code does --patience 10 ({SCRIPT})"),
            "encoder_dropout": (False, "section 4.1: 'we remove the default dropout layer "
                                       "in BERT architecture'"),
            "pooling": ("mean", "section 3.1 / Figure 2: average pooling of the last layer "
                                f"for training ({MAIN} l.189: Pooling(mean tokens))"),
            "dev_pooling": ("mean_last2", "section 4.1 Evaluation: 'averaging the token "
                                          "embeddings at the last two layers'; used for "
                                          "dev selection too"),
            "seed": (1, f"paper silent; official code does --seed 1 ({SCRIPT})"),
        }),
}
