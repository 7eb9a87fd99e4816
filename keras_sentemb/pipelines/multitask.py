"""The old import path of `fit_multitask`: see `keras_sentemb.methods.multitask`."""

from keras_sentemb.methods.multitask import fit_multitask  # noqa: F401
