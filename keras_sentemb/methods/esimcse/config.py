"""ESimCSE's settings, declared once: its options and the papers' presets.

`fit_esimcse`'s signature and docstring, `keras-sentemb train esimcse`'s flags
and help, the docs' option tables and the trainer's defaults are read from here.
"""

import dataclasses
import typing

from keras_sentemb.augment.views import parse_view_pair
from keras_sentemb.augment.views import parse_view_rates
from keras_sentemb.methods.method import Preset
from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.methods.options import option

PAPER = "Wu et al. 2022"

# The official training script, whose flags the presets' sources cite.
SCRIPT = "caskcsg/sentemb@5eeec55 ESimCSE/run.sh"
# The paper's pooling for a raw backbone ([CLS], with the MLP head in training), as SimCSE's.
PAPER_POOLING = "cls"
# The batch size the paper's queue ratio is read against (queue = ratio x batch).
PAPER_BATCH_SIZE = 64


@dataclasses.dataclass(frozen=True)
class ESimCSEConfig(MethodConfig):
    """ESimCSE's options."""

    dup_rate: float = option(
        0.32, "Word repetition rate: each positive repeats a random number of its subword "
        "tokens, up to max(2, int(dup_rate * N)) of its N tokens.", minimum=0.0, maximum=1.0,
        source=f"{PAPER}, section 3.1; {SCRIPT}: dup_rate=0.32 (BERT)")
    momentum: float = option(
        0.995, "Momentum of the encoder that embeds the queue's negatives "
        "(theta_m <- momentum * theta_m + (1 - momentum) * theta after each step).",
        minimum=0.0, maximum=1.0, source=f"{PAPER}, section 3.2; {SCRIPT}: momentum=0.995")
    queue_ratio: float = option(
        2.5, "Rows of the momentum queue of negatives as a multiple of the batch size "
        "(0: no momentum encoder and no queue, word repetition alone).", minimum=0.0,
        source=f"{PAPER}, section 3.2; {SCRIPT}: neg_size=160 with batch 64")
    temperature: float = option(0.05, "Softmax temperature of the InfoNCE loss.", above=0.0,
                                source=f"{SCRIPT}: --temp 0.05")
    views: typing.Union[str, typing.Tuple[str, ...]] = option(
        "none,none", "ConSERT's views of the sentence and of its repeated positive, on top of "
        "the encoder's dropout, e.g. `\"shuffle,feature_cutoff\"` (a pair or `\"a,b\"`; "
        "`\"none,none\"`: the paper's ESimCSE). The momentum encoder's queue rows are not "
        "augmented.", check=parse_view_pair)
    view_rates: typing.Union[str, typing.Tuple[typing.Optional[float], ...], None] = option(
        None, "Rates of the two views, e.g. `\"0.1,0.2\"`; None is each view's default rate.",
        check=parse_view_rates)
    mlp: str = option("auto", "`\"auto\"` (a training-only MLP head exactly when pooling is "
                      "[CLS]), `\"train\"`, `\"none\"` or `\"keep\"` (a tanh head trained and kept "
                      "as the encoder's projection).",
                      choices=("auto", "train", "none", "keep"),
                      source=f"{SCRIPT}: --pooler_type cls --mlp_only_train")


def _common(lr, lr_source):
    """The settings every preset shares, with their sources."""
    return {
        "batch_size": (64, f"{SCRIPT}: bs=64"),
        "learning_rate": (lr, lr_source),
        "max_length": (32, f"{SCRIPT}: --max_seq_length 32"),
        "temperature": (0.05, f"{SCRIPT}: --temp 0.05"),
        "dup_rate": (0.32, f"{SCRIPT}: dup_rate=0.32"),
        "momentum": (0.995, f"{SCRIPT}: momentum=0.995"),
        "queue_ratio": (2.5, f"{SCRIPT}: neg_size=160 = 2.5 x bs 64"),
        "pooling": ("cls", f"{SCRIPT}: --pooler_type cls"),
        "mlp": ("train", f"{SCRIPT}: --mlp_only_train (MLP in training, removed at test)"),
        "eval_every": (125, f"{SCRIPT}: --eval_steps 125, --load_best_model_at_end on "
                            "stsb_spearman"),
        "seed": (42, "HF TrainingArguments default seed 42 (the script sets none)"),
    }


# The papers' settings, named (`fit_esimcse(..., preset=NAME)`, `--preset NAME`).
PRESETS = {
    "unsup-bert-base": Preset(
        "Unsupervised ESimCSE-BERT-base (Wu et al. 2022, the BERT rows of its main results), trained "
        "on one million Wikipedia sentences.", {
            "model": ("bert_base_en_uncased", f"{SCRIPT}: bert-base-uncased"),
            **_common(3e-5, f"{SCRIPT}: lr=3e-5 (bert-base-uncased)"),
        }),
    "unsup-bert-large": Preset(
        "Unsupervised ESimCSE-BERT-large (Wu et al. 2022, the BERT rows of its main results), trained "
        "on one million Wikipedia sentences.", {
            "model": ("bert_large_en_uncased", f"{SCRIPT}: bert-large-uncased"),
            **_common(1e-5, f"{SCRIPT}: lr=1e-5 (bert-large-uncased)"),
        }),
}
