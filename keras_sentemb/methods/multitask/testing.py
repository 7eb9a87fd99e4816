"""How the tests that cover every method train a tiny model with the multitask method."""

from keras_sentemb.methods.testing import MethodTest


def _trainer(encoder):
    from keras_sentemb.methods.multitask.trainer import MultitaskModel

    return MultitaskModel(encoder, head_sharing="none", hidden_dim=8, dropout=0.2,
                          num_classes=3, pooling="mean", pcgrad=True, pcgrad_shuffle=False,
                          fusion=True, fusion_temperature=0.1, seed=3, name="mt")


METHOD_TEST = MethodTest(data="multitask", options={"pretrain": "none"}, make_trainer=_trainer)
