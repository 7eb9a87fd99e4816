"""The multitask method's settings, declared once: its options and the report's presets.

The `fit_*` signature and docstring, `keras-sentemb train`'s flags and help,
the docs' option tables and the trainer's defaults are read from here.
"""

import dataclasses
import os
import typing

from keras_sentemb import validation
from keras_sentemb.data.multitask import PRETRAIN_MODES
from keras_sentemb.data.multitask import PROCEDURES
from keras_sentemb.data.multitask import STSB_TEST_LEAKAGE_WARNING
from keras_sentemb.methods.method import Preset
from keras_sentemb.methods.multitask.three_given import THREE_GIVEN
from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.methods.options import option

PAPER = "Chen, CS224N report"
# The starter code the preset's sources cite.
STARTER = "gpoesia/minbert-default-final-project@7ac8260 multitask_classifier.py"
MULTITASK_DEV = "multitask"
WEIGHT_DECAY = 0.01
HEAD_STYLES = ("residual", "plain")
HEAD_SHARING = ("first_layer", "none", "full")
# The paper's pooling for a raw backbone.
PAPER_POOLING = "cls"


def _refuse_stsb_test(value):
    if value:
        raise ValueError("Refusing evaluate_stsb_test=True: " + STSB_TEST_LEAKAGE_WARNING)


def _dropout(value):
    validation.fraction(value, "dropout")


@dataclasses.dataclass(frozen=True)
class MultitaskConfig(MethodConfig):
    """`fit_multitask`'s options."""

    procedure: str = option("average", "`\"average\"` (one batch per task per step, mean loss), "
                            "`\"batch_round_robin\"`, `\"epoch_round_robin\"`, `\"pcgrad\"` or "
                            "`\"single\"`.", choices=PROCEDURES, source=f"{PAPER}, section 4.2")
    head_sharing: str = option("first_layer", "`\"first_layer\"` (the paraphrase and similarity "
                               "heads share their first layer), `\"none\"` or `\"full\"`.",
                               choices=HEAD_SHARING, source=f"{PAPER}, section 4.2")
    single_task: str = option("similarity", "The task of `procedure=\"single\"`: "
                              "`\"sentiment\"`, `\"paraphrase\"` or `\"similarity\"`.")
    fusion: bool = option(False, "Fusion training (each similarity batch also gets an "
                          "unsupervised SimCSE update, with its own optimizer).")
    pretrain: str = option("unsup", "`\"unsup\"` (SimCSE on the sentences of all three train "
                           "sets), `\"paraphrase\"` (supervised SimCSE: Quora paraphrases as "
                           "positives, non-paraphrases as hard negatives), `\"nli\"` (supervised "
                           "SimCSE on `nli_file` triplets), `\"three_given\"` (the report's \"3 "
                           "Given\" schedule: 5 epochs of supervised Quora with negatives, then "
                           "unsupervised SST, then unsupervised STS; see `three_given` in this "
                           "method's folder) or "
                           "`\"none\"`.", choices=PRETRAIN_MODES)
    pretrain_steps: typing.Optional[int] = option(
        None, "Pre-training steps; `None` = `steps` (`\"three_given\"`: 5 full epochs of its "
        "three stages; an int is their total, shared in proportion to the stages' sizes).",
        minimum=0)
    pretrain_learning_rate: float = option(3e-5, "Pre-training learning rate (AdamW with "
                                           "linear decay).", above=0.0)
    pretrain_temperature: float = option(0.05, "InfoNCE temperature of the pre-training.",
                                         source=f"{PAPER}, section 5.3")
    nli_file: typing.Optional[typing.Union[str, os.PathLike]] = option(
        None, "`sent0,sent1,hard_neg` CSV for `pretrain=\"nli\"`; `None` is "
        "`nli/snli_devtest_triplets.csv` next to the multitask folder.", trainer=False)
    head_learning_rate: float = option(1e-3, "Learning rate of the heads (AdamW, weight decay "
                                       "0.01).", above=0.0)
    hidden_dim: typing.Optional[int] = option(None, "Head width; `None` is the embedding size.")
    dropout: float = option(0.1, "Head dropout, in [0, 1).", check=_dropout)
    quora_dev_fraction: float = option(0.1, "Share of quora-dev.csv held out as dev.")
    dev_limit: typing.Optional[int] = option(None, "Evaluate on the first `dev_limit` dev "
                                             "examples of each task only; `None`: all.",
                                             minimum=1)
    evaluate_stsb_test: bool = option(False, "Refused (raises): `multitask/sts-train.csv` holds "
                                      "STS-B test pairs.", check=_refuse_stsb_test)
    head_style: str = option("residual", "`\"residual\"` (zero-initialised residual pair "
                             "transforms) or `\"plain\"` (the report's plain 2-layer MLP heads "
                             "with dropout at each linear layer). "
                             "the `three_given` preset holds the "
                             "report's whole setting.", choices=HEAD_STYLES)


# fit_multitask's arguments for the report's headline setting ("3 Given", Table 2):
# argument -> (value, where the report says so); the "three_given" preset below.
THREE_GIVEN_SETTINGS = {
    "pretrain": (THREE_GIVEN, "section 4.1: Quora paraphrases as positives, non-paraphrases as "
                              "negatives, 'In each epoch, this is followed by unsupervised "
                              "training on the other 2 datasets sequentially'"),
    "pretrain_learning_rate": (2e-5, "Table 10: pre-training learning rate 2e-5 (the bold, "
                                     "headline row)"),
    "pretrain_temperature": (0.05, "section 5.3: 'a default temperature parameter of 0.05'"),
    "batch_size": (16, "section 5.3: 'a default batch size of 16'"),
    "learning_rate": (1e-5, "section 5.3: 'All reported models are trained with a default "
                            "learning rate of 1e-05'"),
    "head_learning_rate": (1e-5, "section 5.3: the same default learning rate (the heads are "
                                 "not given their own)"),
    "head_style": ("plain", "sections 4.2 / 5.3: 'a small (2-layer) MLP network with dropout', "
                            "hidden dimension 768"),
    "head_sharing": ("first_layer", "section 4.2 / Table 3: 'the first layer of the MLP networks "
                                    "is shared between STS and paraphrase detection heads'"),
    "dropout": (0.3, "section 5.3: 'dropout probability of 0.3 at each linear layer'"),
    "procedure": ("average", "section 4.2 / section 7: 'Multi-task training, with an average "
                             "loss of the 3 single-task losses, turns out better'"),
    "fusion": (False, "sections 4.2 / 5.4.1: fusion is the best unsupervised setting, not part "
                      "of '3 Given'"),
    "pooling": ("cls", "section 4.1: 'the final BERT embeddings (i.e. hidden state of the [CLS] "
                       "token)'"),
}


# The papers' settings, named (`--preset NAME`).
PRESETS = {
    THREE_GIVEN: Preset(
        "The CS224N report's \"3 Given\" setting (Table 2): contrastive pre-training on the "
        "three given datasets, then plain MLP heads trained with the average loss.", {
            "model": ("bert_base_en_uncased", f"section 5.1 (minBERT, BERT-base); "
                                              f"{STARTER} l.48: "
                                              "BertModel.from_pretrained('bert-base-uncased')"),
            **THREE_GIVEN_SETTINGS,
        }),
}
