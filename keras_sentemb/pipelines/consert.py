"""The old import path of `fit_consert`: see `keras_sentemb.methods.consert`."""

from keras_sentemb.methods.consert import fit_consert  # noqa: F401
