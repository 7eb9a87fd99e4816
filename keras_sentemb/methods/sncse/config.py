"""SNCSE's settings, declared once: its options and the paper's presets.

`fit_sncse`'s signature and docstring, `keras-sentemb train sncse`'s flags
and help, the docs' option tables and the trainer's defaults are read from here.
"""

import dataclasses

from keras_sentemb.methods.method import Preset
from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.methods.options import option

PAPER = "Wang et al. 2022"

# The official repository (Sense-GVT/SNCSE@faa013e) and the files the sources cite.
REPO = "Sense-GVT/SNCSE@faa013e"
SCRIPT = f"{REPO} train_SNCSE.sh"
TRAIN = f"{REPO} SNCSE/train_SNCSE.py"
MODELS = f"{REPO} SNCSE/simcse/models.py"
# The paper's pooling for a raw backbone. The official code pools the prompt's [MASK]
# token (PromptBERT's template); here the ordinary [CLS] vector, as SimCSE's `--pooler_type
# cls`, with the same training-only MLP head (see the method's docstring).
PAPER_POOLING = "cls"


@dataclasses.dataclass(frozen=True)
class SNCSEConfig(MethodConfig):
    """SNCSE's options."""

    temperature: float = option(0.05, "Softmax temperature of the InfoNCE loss.", above=0.0,
                                source=f"{PAPER}; {SCRIPT} line 16: --temp 0.05")
    bml_alpha: float = option(
        0.1, "Lower margin of the bidirectional margin loss: the soft negative costs nothing "
        "while cos(h, h_neg) - cos(h, h+) <= -bml_alpha.",
        source=f"{PAPER}; {TRAIN} line 364: alpha = 0.1")
    bml_beta: float = option(
        0.3, "Upper margin of the bidirectional margin loss: the soft negative costs nothing "
        "while cos(h, h_neg) - cos(h, h+) >= -bml_beta.",
        source=f"{PAPER}; {TRAIN} line 365: beta = 0.3")
    bml_weight: float = option(
        1e-3, "Weight of the bidirectional margin loss added to InfoNCE (the paper's lambda; "
        "the official code uses 5e-4 for RoBERTa).", minimum=0.0,
        source=f"{PAPER}; {TRAIN} lines 366-369: lambda_ = 1e-3 (BERT), "
               "5e-4 (RoBERTa)")
    mlp: str = option("auto", "`\"auto\"` (a training-only MLP head exactly when pooling is "
                      "[CLS]), `\"train\"`, `\"none\"` or `\"keep\"` (a tanh head trained and kept "
                      "as the encoder's projection).",
                      choices=("auto", "train", "none", "keep"),
                      source=f"{SCRIPT} line 15: --mlp_only_train; {MODELS} lines 139-140")

    def __post_init__(self):
        super().__post_init__()
        if self.bml_alpha > self.bml_beta:
            raise ValueError(
                "`bml_alpha` must be at most `bml_beta` (the gap cos(h, h_neg) - cos(h, h+) "
                f"is kept in [-bml_beta, -bml_alpha]); received bml_alpha={self.bml_alpha}, "
                f"bml_beta={self.bml_beta}")


def _common(batch, batch_line, lr, lr_line):
    """The settings every preset shares, with their sources."""
    return {
        "batch_size": (batch, f"{SCRIPT} line {batch_line}: --per_device_train_batch_size "
                              f"{batch}"),
        "learning_rate": (lr, f"{SCRIPT} line {lr_line}: --learning_rate {lr:g}"),
        "max_length": (32, f"{SCRIPT}: --max_seq_length 32 (lines 12, 28)"),
        "temperature": (0.05, f"{SCRIPT}: --temp 0.05 (lines 16, 32)"),
        "bml_alpha": (0.1, f"{TRAIN} line 364: alpha = 0.1"),
        "bml_beta": (0.3, f"{TRAIN} line 365: beta = 0.3"),
        "bml_weight": (1e-3, f"{TRAIN} line 369: lambda_ = 1e-3 (BERT)"),
        "pooling": ("cls", f"{SCRIPT}: --pooler_type cls (the official vector is the "
                           "prompt's [MASK] token, see the method's docstring)"),
        "mlp": ("train", f"{SCRIPT}: --mlp_only_train; {MODELS} lines 139-140 (MLP in "
                         "training, none at test)"),
        "eval_every": (125, f"{SCRIPT}: --save_steps 125, the best checkpoint on STS-B dev "
                            "(README: bert_evaluation.py)"),
        "seed": (42, "HF TrainingArguments default seed 42 (the script sets none)"),
        "max_grad_norm": (1.0, "HF TrainingArguments default max_grad_norm 1.0 (the script "
                               "sets none)"),
    }


# The paper's settings, named (`fit_sncse(..., preset=NAME)`, `--preset NAME`).
PRESETS = {
    "unsup-bert-base": Preset(
        "Unsupervised SNCSE-BERT-base (Wang et al. 2022; the official script), one epoch "
        "over one million Wikipedia sentences (wiki1m_for_simcse.txt).", {
            "model": ("bert_base_en_uncased", f"{SCRIPT} line 6: bert-base-uncased"),
            **_common(256, 10, 1e-5, 11),
        }),
    "unsup-bert-large": Preset(
        "Unsupervised SNCSE-BERT-large (Wang et al. 2022; the official script), one epoch "
        "over one million Wikipedia sentences (wiki1m_for_simcse.txt).", {
            "model": ("bert_large_en_uncased", f"{SCRIPT} line 22: bert-large-uncased"),
            **_common(128, 26, 5e-6, 27),
        }),
}
