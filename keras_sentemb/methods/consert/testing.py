"""How the tests that cover every method train a tiny model with ConSERT."""

from keras_sentemb.methods.testing import MethodTest


def _trainer(encoder):
    from keras_sentemb.methods.consert.trainer import ConSERT

    return ConSERT(encoder, views=("token_cutoff", "dropout"), view_rates=(0.1, 0.3),
                   temperature=0.2, mode="joint", alpha=0.3, num_labels=2, seed=4)


METHOD_TEST = MethodTest(make_trainer=_trainer, every_family=True)
