"""The old import path of `fit_whitening`: see `keras_sentemb.methods.whitening`."""

from keras_sentemb.methods.whitening import fit_whitening  # noqa: F401
