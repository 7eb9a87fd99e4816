"""The old import path of `fit_ct`: see `keras_sentemb.methods.contrastive_tension`."""

from keras_sentemb.methods.contrastive_tension import fit_ct  # noqa: F401
