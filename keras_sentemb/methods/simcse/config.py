"""SimCSE's settings, declared once: its options and the papers' presets.

`fit_simcse`'s signature and docstring, `keras-sentemb train simcse`'s flags and
help, the docs' option tables and the trainer's defaults are read from here.
"""

import dataclasses

from keras_sentemb.methods.method import Preset
from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.methods.options import option

PAPER = "Gao et al. 2021"

# The official unsupervised script, whose flags the preset's sources cite.
SCRIPT = "princeton-nlp/SimCSE@49fa580 run_unsup_example.sh"
SIMCSE_MODES = ("unsup", "sup", "pairs", "paraphrase")
# The paper's pooling for a raw backbone ([CLS], with the MLP head in training).
PAPER_POOLING = "cls"


@dataclasses.dataclass(frozen=True)
class SimCSEConfig(MethodConfig):
    """SimCSE's options."""

    mode: str = option("unsup", "`\"unsup\"` (dropout views of each sentence), `\"sup\"` "
                       "(anchor, positive, hard-negative triplets), `\"pairs\"` (sentence, "
                       "positive pairs) or `\"paraphrase\"` (sentence1, sentence2, label rows).",
                       choices=SIMCSE_MODES)
    temperature: float = option(0.05, "Softmax temperature of the InfoNCE loss.", above=0.0,
                                source=f"{PAPER}, section 3")
    mlp: str = option("auto", "`\"auto\"` (a training-only MLP head exactly when pooling is "
                      "[CLS]), `\"train\"`, `\"none\"` or `\"keep\"` (a tanh head trained and kept "
                      "as the encoder's projection: supervised SimCSE's \"[CLS] with MLP\").",
                      choices=("auto", "train", "none", "keep"), source=f"{PAPER}, section 6.3")
    hard_negative_weight: float = option(0.0, "Added to the hard negatives' logits (sup mode; "
                                         "the paper's log-weight).", source=f"{PAPER}, Table 9")
    negative_weight: float = option(1.0, "Weight of the negative pairs' term (paraphrase mode).",
                                    minimum=0.0)
    negative_margin: float = option(0.0, "Cosine margin below which a negative pair costs "
                                    "nothing (paraphrase mode).")


# The papers' settings, named (`fit_simcse(..., preset=NAME)`, `--preset NAME`).
PRESETS = {
    "unsup-bert-base": Preset(
        "Unsupervised SimCSE-BERT-base (Gao et al. 2021, section 3 and appendix A), "
        "trained on Wikipedia sentences.", {
            "model": ("bert_base_en_uncased",
                      f"{SCRIPT}: --model_name_or_path bert-base-uncased"),
            "batch_size": (64, f"{SCRIPT}: --per_device_train_batch_size 64; README table"),
            "learning_rate": (3e-5, f"{SCRIPT}: --learning_rate 3e-5; README table "
                                    "(BERT-base)"),
            "max_length": (32, f"{SCRIPT}: --max_seq_length 32"),
            "temperature": (0.05, f"{SCRIPT}: --temp 0.05"),
            "pooling": ("cls", f"{SCRIPT}: --pooler_type cls"),
            "mlp": ("train", f"{SCRIPT}: --mlp_only_train (MLP in training, removed at "
                             "test)"),
            "eval_every": (125, f"{SCRIPT}: --eval_steps 125, --load_best_model_at_end on "
                                "stsb_spearman"),
            "seed": (42, "HF TrainingArguments default seed 42 (the script sets none)"),
        }),
}
