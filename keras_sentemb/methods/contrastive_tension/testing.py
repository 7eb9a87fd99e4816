"""How the tests that cover every method train a tiny model with Contrastive Tension."""

from keras_sentemb.methods.testing import MethodTest


def _trainer(encoder):
    from keras_sentemb.methods.contrastive_tension.trainer import ContrastiveTension

    return ContrastiveTension(encoder, negatives="in_batch", logit_scale=10.0, dropout=True,
                              pooling="max")


METHOD_TEST = MethodTest(options={"negatives": "k3"}, make_trainer=_trainer)
