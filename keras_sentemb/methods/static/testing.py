"""How the tests that cover every method train a tiny model with the static method."""

from keras_sentemb.methods.testing import MethodTest

METHOD_TEST = MethodTest(options={"dims": 8}, every_family=True)
