"""The old import path of `fit_sts_regression`: see `keras_sentemb.methods.sts_regression`."""

from keras_sentemb.methods.sts_regression import fit_sts_regression  # noqa: F401
