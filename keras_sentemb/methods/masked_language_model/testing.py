"""How the tests that cover every method train a tiny model with masked language modelling."""

from keras_sentemb.methods.testing import MethodTest


def _trainer(encoder):
    from keras_sentemb.methods.masked_language_model.trainer import MaskedLanguageModel

    return MaskedLanguageModel(encoder, mask_rate=0.3, seed=5)


METHOD_TEST = MethodTest(make_trainer=_trainer, every_family=True)
