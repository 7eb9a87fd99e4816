"""The `fit_*` entry points: one call from raw text to a trained encoder.

Each lives in `keras_sentemb.methods.<method>` beside its registered
`Method`, a thin wrapper over `keras_sentemb.methods.fit`; this module
names them all (read from the methods' own sources, imported on first use),
so `from keras_sentemb.api import fit_ct` works as `keras_sentemb.fit_ct`.
"""

from keras_sentemb.lazy_exports import lazy_exports
from keras_sentemb.methods.registry import BUILTIN_FIT_FUNCTIONS

__getattr__, __dir__, __all__ = lazy_exports(__name__, BUILTIN_FIT_FUNCTIONS)
