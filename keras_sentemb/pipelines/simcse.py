"""The old import path of `fit_simcse`: see `keras_sentemb.methods.simcse`."""

from keras_sentemb.methods.simcse import fit_simcse  # noqa: F401
