"""PromptBERT's settings, declared once: its options and the paper's presets.

`fit_promptbert`'s signature and docstring, `keras-sentemb train promptbert`'s
flags and help, the docs' option tables and the trainer's defaults are read
from here.
"""

import dataclasses

from keras_sentemb.methods.method import Preset
from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.methods.options import option
from keras_sentemb.models.prompt import check_template

PAPER = "Jiang et al. 2022"

# The official repository and the files the sources cite.
REPO = "kongds/Prompt-BERT@690ba6e"
SCRIPT = f"{REPO} run.sh"
MODELS = f"{REPO} prompt_bert/models.py"
# The paper's vector for a raw backbone: the last layer at the template's [MASK]. A model that
# declares its own pooling trains that (`pooling="auto"`): on the un-tuned start STS-B dev chose
# mean pooling over [MASK] (82.46 against 80.06 at 250 steps).
PAPER_POOLING = "mask"

BERT_TEMPLATE = 'This sentence of "[X]" means [MASK] .'
BERT_POSITIVE_TEMPLATE = 'This sentence : "[X]" means [MASK] .'
# Spaces matter to RoBERTa's byte-level BPE: as the official code builds them, the prefix ends
# without a space, the suffix starts with one (" ' means"), and [MASK] follows "means" directly.
ROBERTA_TEMPLATE = "This sentence : '[X] ' means[MASK]."
ROBERTA_POSITIVE_TEMPLATE = "The sentence : '[X] ' means[MASK]."


@dataclasses.dataclass(frozen=True)
class PromptBERTConfig(MethodConfig):
    """PromptBERT's options."""

    template: str = option(
        BERT_TEMPLATE, "The template of the sentence and of the saved encoder ([X]: the "
        "sentence, [MASK]: the tokenizer's mask token, whose last-layer state is the vector).",
        check=check_template,
        source=f"{PAPER}, section 5; {SCRIPT} unsup-bert: TEMPLATE")
    positive_template: str = option(
        BERT_POSITIVE_TEMPLATE, "The template of the positive: the same sentence in another "
        "template is its positive view (dropout differs too).", check=check_template,
        source=f"{PAPER}, section 6.1; {SCRIPT} unsup-bert: TEMPLATE2 "
               "(--mask_embedding_sentence_different_template)")
    denoise: bool = option(
        True, "Template denoising in training: subtract from each view's vector the [MASK] "
        "state of its template alone, positions shifted by the sentence's length.",
        source=f"{PAPER}, section 4.2; {SCRIPT} unsup-bert: --mask_embedding_sentence_delta")
    temperature: float = option(0.05, "Softmax temperature of the InfoNCE loss.", above=0.0,
                                source=f"{SCRIPT}: --temp 0.05")
    mlp: str = option("auto", "`\"auto\"` (a training-only MLP head exactly when pooling is "
                      "[MASK] or [CLS]: the paper's setting on a raw backbone), `\"train\"`, "
                      "`\"none\"` or `\"keep\"` (a tanh head trained and kept as the encoder's "
                      "projection).",
                      choices=("auto", "train", "none", "keep"),
                      source=f"{SCRIPT} unsup-bert: --mlp_only_train")


def _common(model, template, positive_template, source):
    """The settings every preset shares, with their sources."""
    return {
        "model": (model, f"{SCRIPT} {source}: MODEL"),
        "template": (template, f"{SCRIPT} {source}: TEMPLATE"),
        "positive_template": (positive_template, f"{SCRIPT} {source}: TEMPLATE2"),
        "batch_size": (256, f"{SCRIPT} {source}: BATCH=256"),
        "learning_rate": (1e-5, f"{SCRIPT} {source}: LR=1e-5"),
        "max_length": (32, f"{SCRIPT}: --max_seq_length 32 (the sentence's tokens; the "
                           "template's come on top)"),
        "temperature": (0.05, f"{SCRIPT}: --temp 0.05"),
        "denoise": (True, f"{SCRIPT} {source}: --mask_embedding_sentence_delta"),
        "mlp": ("train", f"{SCRIPT} {source}: --mlp_only_train"),
        "pooling": ("mask", f"{MODELS}: last_hidden[input_ids == mask_token_id]"),
        "eval_every": (125, f"{SCRIPT}: ES=125, --load_best_model_at_end on stsb_spearman"),
        "seed": (42, "HF TrainingArguments default seed 42 (the script passes its own)"),
    }


# The paper's settings, named (`fit_promptbert(..., preset=NAME)`, `--preset NAME`).
PRESETS = {
    "unsup-bert-base": Preset(
        "Unsupervised PromptBERT-BERT-base (Jiang et al. 2022, Table 5), trained on one "
        "million Wikipedia sentences.",
        _common("bert_base_en_uncased", BERT_TEMPLATE, BERT_POSITIVE_TEMPLATE, "unsup-bert")),
    "unsup-roberta-base": Preset(
        "Unsupervised PromptBERT-RoBERTa-base (Jiang et al. 2022, Table 5), trained on one "
        "million Wikipedia sentences.",
        _common("roberta_base_en", ROBERTA_TEMPLATE, ROBERTA_POSITIVE_TEMPLATE,
                "unsup-roberta")),
}
