"""How the tests that cover every method train a tiny model with STS regression."""

from keras_sentemb.methods.testing import MethodTest


def _trainer(encoder):
    from keras_sentemb.methods.sts_regression.trainer import STSRegression

    return STSRegression(encoder, pooling="mean_last2")


METHOD_TEST = MethodTest(data="sts", make_trainer=_trainer)
