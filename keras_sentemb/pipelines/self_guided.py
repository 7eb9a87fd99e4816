"""The old import path of `fit_self_guided`: see `keras_sentemb.methods.self_guided`."""

from keras_sentemb.methods.self_guided import fit_self_guided  # noqa: F401
