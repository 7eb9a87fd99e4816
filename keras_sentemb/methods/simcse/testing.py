"""How the tests that cover every method train a tiny model with SimCSE."""

from keras_sentemb.methods.testing import MethodTest


def _trainer(encoder):
    from keras_sentemb.methods.simcse.trainer import SimCSE

    return SimCSE(encoder, mode="sup", temperature=0.1, pooling="cls", mlp="train",
                  hard_negative_weight=0.5, mini_batch_size=2)


METHOD_TEST = MethodTest(make_trainer=_trainer)
