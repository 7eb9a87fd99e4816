"""The old import path of `fit_parallel`: see `keras_sentemb.methods.parallel`."""

from keras_sentemb.methods.parallel import fit_parallel  # noqa: F401
