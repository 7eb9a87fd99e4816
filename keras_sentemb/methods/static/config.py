"""The static method's settings, declared once: its options.

`fit_static`'s signature and docstring, `keras-sentemb train static`'s flags and
help and the docs' option tables are read from here.
"""

import dataclasses
import typing

from keras_sentemb.methods.options import MethodConfig
from keras_sentemb.methods.options import option
from keras_sentemb.methods.static.distill import WEIGHTINGS
from keras_sentemb.models.static_runtime import TABLE_DTYPES

OBJECTIVES = ("distill", "contrastive", "pairs")
COLUMNS = {"distill": ("sentence",), "contrastive": ("sentence",), "pairs": ("sent0", "sent1")}


@dataclasses.dataclass(frozen=True)
class StaticConfig(MethodConfig):
    """The `static` method's options."""

    dims: typing.Optional[int] = option(
        256, "Size of the static vectors (PCA components of the teacher's token vectors); "
        "None keeps the teacher's size.", minimum=1, source="model2vec's default (pca_dims=256)")
    weighting: str = option(
        "zipf", "Per-token weights of the distillation: `zipf` (SIF on Zipf-estimated "
        "frequencies), `sif` (SIF on frequencies counted on the training sentences; on the "
        "bundled Wikipedia sentences when the data streams) or `none`.",
        choices=WEIGHTINGS, source="model2vec's default (sif_coefficient=1e-4)")
    objective: str = option(
        "distill", "`distill` (cosine to the teacher's sentence vectors), `contrastive` "
        "(InfoNCE, the teacher's vectors as positives) or `pairs` (InfoNCE on (a, b) pairs).",
        choices=OBJECTIVES)
    temperature: float = option(0.05, "InfoNCE temperature (`contrastive`, `pairs`).",
                                above=0.0)
    table_dtype: str = option(
        "float32", "How the table is saved: `float32`, `float16` or `int8` (a scale per row).",
        choices=TABLE_DTYPES)
