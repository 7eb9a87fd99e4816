"""BERT-flow's settings, declared once: its options.

`fit_flow`'s signature and docstring, `keras-sentemb train flow`'s flags and help
and the docs' option tables are read from here.
"""

import dataclasses

from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.methods.options import option
from keras_sentemb.models.glow_flow import COUPLINGS
from keras_sentemb.models.glow_flow import PERMUTATIONS


@dataclasses.dataclass(frozen=True)
class FlowConfig(MethodConfig):
    """`fit_flow`'s options."""

    epochs: int = option(1, "Passes over the sentences when `steps` is None.")
    levels: int = option(3, "Multi-scale levels.", minimum=1)
    depth: int = option(3, "Flow steps per level.", minimum=1)
    coupling_width: int = option(32, "Hidden width of the coupling networks.", minimum=1)
    coupling: str = option("affine", "`\"affine\"` or `\"additive\"`.", choices=COUPLINGS)
    permutation: str = option("lu", "`\"lu\"` (a learned 1x1 convolution) or `\"reverse\"`.",
                              choices=PERMUTATIONS)
    warmup_ratio: float = option(0.1, "Fraction of steps of linear warmup.")
    weight_decay: float = option(0.01, "AdamW weight decay.", minimum=0.0)
    encode_batch_size: int = option(128, "Sentences per encoding batch.", minimum=1)
