"""The old import path of `fit_mlm`: see `keras_sentemb.methods.masked_language_model`."""

from keras_sentemb.methods.masked_language_model import fit_mlm  # noqa: F401
