"""WhitenedCSE's settings, declared once: its options and the paper's preset.

`fit_whitenedcse`'s signature and docstring, `keras-sentemb train whitenedcse`'s
flags and help, the docs' option tables and the trainer's defaults are read from here.
"""

import dataclasses

from keras_sentemb.methods.method import Preset
from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.methods.options import option

PAPER = "Zhuo et al. 2023"

# The official repository and the files the sources cite.
REPO = "SupstarZh/WhitenedCSE@957605e"
SCRIPT = f"{REPO} run_unsup_example.sh"
MODELS = f"{REPO} whitenedcse/models.py"
SGW = f"{REPO} whitenedcse/shuffled_group_whitening.py"
# The paper's pooling for a raw backbone: [CLS], with the (whitening +) MLP head in training.
PAPER_POOLING = "cls"


@dataclasses.dataclass(frozen=True)
class WhitenedCSEConfig(MethodConfig):
    """WhitenedCSE's options."""

    temperature: float = option(0.05, "Softmax temperature of the InfoNCE losses.", above=0.0,
                                source=f"{PAPER}; {SCRIPT}: --temp 0.05")
    positives: int = option(
        2, "Dropout views of each sentence besides its first, each whitened on its own and "
        "each a positive of the first (one InfoNCE loss per positive, summed).", minimum=1,
        source=f"{PAPER}; {SCRIPT}: --num_pos 3 (the sentence and two positives); {MODELS}: "
               "loss = loss1 + loss2")
    group_size: int = option(
        6, "Channels per whitening group: the pooled vector's channels are shuffled, cut into "
        "groups of this size and each group whitened over the batch (ZCA).", minimum=1,
        source=f"{PAPER}; {MODELS}: ShuffledGroupWhitening(hidden_size, num_groups=128), "
               "6 channels a group on BERT-base's 768")
    shuffle: bool = option(
        True, "Shuffle the channels before grouping (a new permutation for every view and "
              "step); off: fixed groups of neighbouring channels.",
        source=f"{SGW}: shuffle=True")
    epsilon: float = option(
        1e-5, "Added to each eigenvalue of a group's covariance before its inverse square "
        "root (the official code adds none; this keeps a rank-deficient group finite).",
        minimum=0.0)
    dup_rate: float = option(
        0.0, "ESimCSE's word repetition for the positives: each positive is a dropout view of "
        "one copy of the sentence that repeats a random number of its subword tokens, up to "
        "max(2, int(dup_rate * N)) of its N (0: the positives are views of the sentence "
        "itself, as in the paper).", minimum=0.0, maximum=1.0,
        source="Wu et al. 2022 (ESimCSE), section 3.1: dup_rate=0.32 on BERT")
    mlp: str = option("auto", "`\"auto\"` (a training-only MLP head after the whitening "
                      "exactly when pooling is [CLS]), `\"train\"`, `\"none\"` or `\"keep\"` "
                      "(a tanh head trained and kept as the encoder's projection).",
                      choices=("auto", "train", "none", "keep"),
                      source=f"{SCRIPT}: --mlp_only_train; {MODELS}: MLPLayer (whitening, "
                             "dense, tanh)")


# The paper's setting, named (`fit_whitenedcse(..., preset=NAME)`, `--preset NAME`).
PRESETS = {
    "unsup-bert-base": Preset(
        "Unsupervised WhitenedCSE-BERT-base (Zhuo et al. 2023; the official example script), "
        "one epoch over one million Wikipedia sentences (wiki1m_for_simcse.txt).", {
            "model": ("bert_base_en_uncased",
                      f"{PAPER}: BERT-base (the example script starts from "
                      "princeton-nlp/unsup-simcse-bert-base-uncased)"),
            "batch_size": (64, f"{SCRIPT}: --per_device_train_batch_size 64"),
            "learning_rate": (3e-5, f"{SCRIPT}: --learning_rate 3e-5"),
            "max_length": (32, f"{SCRIPT}: --max_seq_length 32"),
            "temperature": (0.05, f"{SCRIPT}: --temp 0.05"),
            "positives": (2, f"{SCRIPT}: --num_pos 3"),
            "group_size": (6, f"{MODELS}: num_groups=128 on a 768-wide model"),
            "pooling": ("cls", f"{SCRIPT}: --pooler_type cls"),
            "mlp": ("train", f"{SCRIPT}: --mlp_only_train"),
            "eval_every": (125, f"{SCRIPT}: --eval_steps 125, the best checkpoint on STS-B "
                                "dev (--load_best_model_at_end)"),
            "seed": (42, "HF TrainingArguments default seed 42 (the script sets none)"),
            "max_grad_norm": (1.0, "HF TrainingArguments default max_grad_norm 1.0 (the "
                                   "script sets none)"),
        }),
}
