"""The `fit_*` entry points: one call from raw text to a trained encoder.

Each lives in `keras_sentemb.methods.<method>` beside its registered
`Method`, a thin wrapper over `keras_sentemb.methods.fit`; this module
gathers them for `keras_sentemb.fit_*`.
"""

from keras_sentemb.methods.bert_flow import fit_flow  # noqa: F401
from keras_sentemb.methods.consert import fit_consert  # noqa: F401
from keras_sentemb.methods.contrastive_tension import fit_ct  # noqa: F401
from keras_sentemb.methods.masked_language_model import fit_mlm  # noqa: F401
from keras_sentemb.methods.multitask import fit_multitask  # noqa: F401
from keras_sentemb.methods.parallel import fit_parallel  # noqa: F401
from keras_sentemb.methods.self_guided import fit_self_guided  # noqa: F401
from keras_sentemb.methods.simcse import fit_simcse  # noqa: F401
from keras_sentemb.methods.sts_regression import fit_sts_regression  # noqa: F401
from keras_sentemb.methods.whitening import fit_whitening  # noqa: F401
