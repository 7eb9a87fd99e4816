"""The parallel-pairs method's settings, declared once: its options and the paper's presets.

`fit_parallel`'s signature and docstring, `keras-sentemb train parallel`'s flags
and help, the docs' option tables and the trainer's defaults are read from here.
"""

import dataclasses
import os
import typing

from keras_sentemb import validation
from keras_sentemb.methods.method import Preset
from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.methods.options import option
from keras_sentemb.models.model_kinds import transformer_check
from keras_sentemb.models.sentence_encoder import SentenceEncoder
from keras_sentemb.models.vocabulary import INITS

PAPER = "parallel-translation paper, ACL ARR 2022"
MODES = ("frozen_teacher", "dual", "shared")
# The paper's pooling for a raw backbone ([CLS], with the MLP head in training).
PAPER_POOLING = "cls"
EncoderSpec = typing.Optional[typing.Union[str, os.PathLike, SentenceEncoder]]


def resolve_temperature(temperature):
    """`"learnable"` -> None, a positive number (or its string) -> float."""
    if isinstance(temperature, str):
        if temperature.strip().lower() == "learnable":
            return None
        try:
            temperature = float(temperature)
        except ValueError:
            raise ValueError(
                "`temperature` must be 'learnable' or a positive float, "
                f"received {temperature!r}."
            ) from None
    return validation.positive_float(temperature, "temperature")


@dataclasses.dataclass(frozen=True)
class ParallelConfig(MethodConfig):
    """`fit_parallel`'s options."""

    teacher: EncoderSpec = option(
        None, "The source-side encoder: in the paper a trained sentence encoder "
        "(SimCSE-RoBERTa-large for step A); `None` is `model`, with a warning in "
        "`\"frozen_teacher\"` mode (the student would learn from its own starting point).",
        check=transformer_check("teacher", "the teacher is a Transformer encoder"), trainer=False)
    student: EncoderSpec = option(None, "The student's initialisation; `None` is a copy of "
                                  "`model`.", check=transformer_check(
                                      "student", "the student is a Transformer encoder"),
                                  trainer=False)
    mode: str = option("frozen_teacher", "`\"frozen_teacher\"` (only the student is trained), "
                       "`\"dual\"` (both encoders are trained) or `\"shared\"` (one encoder for "
                       "both languages).", choices=MODES, source=f"{PAPER}, section 3.2")
    queue_size: int = option(10000, "Memory queue rows (0: in-batch only).", minimum=0,
                             source=f"{PAPER}, section 4.2.2")
    temperature: typing.Union[str, float] = option(
        "learnable", "`\"learnable\"` or a fixed positive temperature.",
        check=resolve_temperature, source=f"{PAPER}, section 4.2.2 and Table 1")
    init_temperature: float = option(0.07, "Starting value of a learnable temperature.")
    max_logit_scale: float = option(100.0, "Upper bound of a learnable logit scale "
                                    "(1 / temperature).")
    mlp: str = option("auto", "`\"auto\"` (a training-only MLP head exactly when pooling is "
                      "[CLS]), `\"train\"` or `\"none\"`.", choices=("auto", "train", "none"),
                      source=f"{PAPER}, section 4.2")
    weight_decay: float = option(0.01, "AdamW weight decay.", minimum=0.0)
    warmup_ratio: float = option(0.1, "Fraction of steps of linear warmup (then cosine decay).")
    eval_size: int = option(1000, "Held-out test pairs.", minimum=0)
    dev_size: int = option(500, "Held-out dev pairs for `dev=\"retrieval\"`.", minimum=0)
    track_alignment: bool = option(True, "Log alignment/uniformity of the student on the test "
                                   "pairs.")
    track_every: int = option(0, "Steps between tracking points (`0`: steps // 10).")
    plot: typing.Optional[typing.Union[str, os.PathLike]] = option(
        None, "PNG path of the alignment/uniformity plot; `None` is "
        "`output/alignment_uniformity.png` when `output` is given.", trainer=False)
    extend_vocabulary: int = option(10000, "At most this many new tokens for the student, "
                                    "learned on the training targets (`0`: keep its "
                                    "vocabulary).", minimum=0)
    vocabulary_min_count: int = option(2, "Minimum occurrences of a new token in the training "
                                       "targets.", minimum=1)
    vocabulary_init: str = option("aligned", "Initial embedding rows of new tokens: "
                                  "`\"aligned\"` (the rows of the source tokens each new token "
                                  "is aligned with in the training pairs, by IBM Model 1), "
                                  "`\"mean\"`, `\"pieces\"` or `\"normal\"` (see "
                                  "`add_vocabulary`).", choices=INITS)


# The paper's step B on BERT-base (section 4.2.2, Table 6): argument -> (value, source).
_BERT_BASE = {
    "model": ("bert_base_multi", "section 4.2.1: step A trains a Chinese RoBERTa-large under a "
                                 "frozen SimCSE-RoBERTa-large, section 4.2.2: step B a "
                                 "BERT/RoBERTa (Table 2); here one keras-hub multilingual "
                                 "BERT-base for both languages"),
    "learning_rate": (2e-4, "section 4.2.2 and Table 6: BERT-base learning rate 2e-4 "
                            "(RoBERTa-large and step A: 5e-5)"),
    "batch_size": (400, "section 4.2.2 and Table 6: BERT-base batch 400 per GPU (RoBERTa-large "
                        "and step A: 200)"),
    "queue_size": (10000, "section 4.2.2 and Table 6: BERT-base queue 10T = 10,000 "
                          "(RoBERTa-large and step A: 200,000)"),
    "max_length": (50, "section 4.2.1: 'the input sentence length is 50' (and section 4.2.3 "
                       "for NLI)"),
    "teacher": ("default", "section 4.2.1: 'we adopt the pre-trained SimCSE-RoBERTa large model "
                           "as the source language (English) encoder' and freeze it; here the "
                           "toolkit's trained English encoder (all-MiniLM-L6-v2), never the "
                           "untrained student"),
    "temperature": ("learnable", "section 4.2.2 and Table 1: 'temperature is parameter 1 (a "
                                 "learnable parameter in training)'"),
    "init_temperature": (1.0, "section 4.2 ('Effect of Temperature') and 4.2.2: 'temperature is "
                              "parameter 1 (a learnable parameter in training)': a learnable "
                              "temperature starting at 1"),
    "eval_every": (250, "sections 4.2.1 / 4.2.2: 'We evaluate every 250 training steps on the "
                        "development set of STS-B and save the best checkpoint'"),
}

# The papers' settings, named (`fit_parallel(..., preset=NAME)`, `--preset NAME`).
PRESETS = {
    "bert-base": Preset(
        "Step B on a multilingual BERT-base under a frozen English teacher (section "
        "4.2.2, Table 6).", _BERT_BASE),
    "objective-comparison": Preset(
        "The objectives' comparison (section 4.4.2, Table 5): batch 128, learning rate "
        "2e-4, no queue.", {
            **_BERT_BASE,
            "learning_rate": (2e-4, "section 4.4.2 / Table 5: 'learning rate is 2e-4'"),
            "batch_size": (128, "section 4.4.2 / Table 5: 'batch size is 128'"),
            "queue_size": (0, "section 4.4.2 / Table 5: 'queue size is 0'"),
        }),
}
