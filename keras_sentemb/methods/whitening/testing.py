"""How the tests that cover every method train a tiny model with BERT-whitening."""

from keras_sentemb.methods.testing import MethodTest

METHOD_TEST = MethodTest(postprocess="Whitening")
