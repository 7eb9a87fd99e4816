"""The old import path of `fit_flow`: see `keras_sentemb.methods.bert_flow`."""

from keras_sentemb.methods.bert_flow import fit_flow  # noqa: F401
