"""How the tests that cover every method train a tiny model with BERT-flow."""

from keras_sentemb.methods.testing import MethodTest


def _trainer(encoder):
    from keras_sentemb.methods.bert_flow.trainer import BertFlow
    from keras_sentemb.models.glow_flow import GlowFlow

    glow = GlowFlow(encoder.output_dim, levels=2, depth=1, coupling_width=8, coupling="additive",
                    permutation="reverse", pooling="mean", seed=1)
    return BertFlow(glow, name="flow_trainer")


METHOD_TEST = MethodTest(postprocess="GlowFlow", make_trainer=_trainer, every_family=True)
