"""The masked-language-model method's settings, declared once: its options.

The `fit_mlm` signature and docstring, `keras-sentemb train mlm`'s flags and
help, the docs' option tables and the trainer's defaults are read from here.
"""

import dataclasses

from keras_sentemb import validation
from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.methods.options import option


def _fraction(name):
    return lambda value: validation.fraction(value, name)


@dataclasses.dataclass(frozen=True)
class MaskedLanguageModelConfig(MethodConfig):
    """MLM's options."""

    mask_rate: float = option(0.15, "Share of tokens selected.", above=0.0,
                              check=_fraction("mask_rate"))
    warmup_ratio: float = option(0.1, "Share of steps of linear warm-up.",
                                 check=_fraction("warmup_ratio"))
    weight_decay: float = option(0.01, "AdamW weight decay.", minimum=0.0)
