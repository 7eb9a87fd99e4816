"""TSDAE's settings, declared once: its options and the paper's presets.

`fit_tsdae`'s signature and docstring, `keras-sentemb train tsdae`'s flags
and help, the docs' option tables and the trainer's defaults are read from here.
"""

import dataclasses

from keras_sentemb.methods.method import Preset
from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.methods.options import option

PAPER = "Wang et al. 2021"

# The reference training script, whose settings the presets' sources cite.
SCRIPT = ("UKPLab/sentence-transformers examples/unsupervised_learning/TSDAE/"
          "train_tsdae_from_file.py")
# The reference noise and loss.
NOISE = "sentence-transformers DenoisingAutoEncoderDataset.delete"
LOSS = "sentence-transformers DenoisingAutoEncoderLoss"
# The paper's pooling for a raw backbone: [CLS] (section 5.1: the best of [CLS], mean, max).
PAPER_POOLING = "cls"


@dataclasses.dataclass(frozen=True)
class TSDAEConfig(MethodConfig):
    """TSDAE's options."""

    deletion_rate: float = option(
        0.6, "Share of the words of the encoder's input deleted (each word independently; "
        "at least one word kept). The decoder reconstructs the whole sentence.",
        minimum=0.0, maximum=1.0,
        source=f"{PAPER}, section 5.1 (deletion ratio 0.6); {NOISE}: del_ratio=0.6")
    tie_decoder: bool = option(
        True, "The decoder shares the encoder's weights (embeddings, self-attention and "
        "feed-forward layers); only its cross-attention and its LM head's transform are "
        "its own. `False`: the decoder is a copy of the starting encoder, trained apart.",
        source=f"{PAPER}, section 5.1 (tying the encoder and decoder); "
               f"{LOSS}: tie_encoder_decoder=True")
    weight_decay: float = option(0.0, "AdamW's decoupled weight decay.", minimum=0.0,
                                 source=f"{SCRIPT}: weight_decay=0", trainer=False)


def _common():
    """The settings every preset shares, with their sources."""
    return {
        "batch_size": (8, f"{SCRIPT}: batch_size = 8"),
        "learning_rate": (3e-5, f"{SCRIPT}: optimizer_params={{'lr': 3e-5}}, "
                                "scheduler='constantlr'"),
        "pooling": ("cls", f"{SCRIPT}: models.Pooling(..., 'cls')"),
        "deletion_rate": (0.6, f"{NOISE}: del_ratio=0.6"),
        "tie_decoder": (True, f"{SCRIPT}: tie_encoder_decoder=True"),
        "weight_decay": (0.0, f"{SCRIPT}: weight_decay=0"),
        "max_grad_norm": (1.0, "SentenceTransformer.fit's default max_grad_norm=1"),
    }


# The paper's settings, named (`fit_tsdae(..., preset=NAME)`, `--preset NAME`).
PRESETS = {
    "bert-base": Preset(
        "TSDAE on BERT-base-uncased (Wang et al. 2021; the reference script), one epoch over "
        "the in-domain sentences.", {
            "model": ("bert_base_en_uncased", f"{SCRIPT}: model_name = 'bert-base-uncased'"),
            **_common(),
        }),
}
