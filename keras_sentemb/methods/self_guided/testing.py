"""How the tests that cover every method train a tiny model with self-guided contrastive learning."""

from keras_sentemb.methods.testing import MethodTest


def _trainer(encoder):
    from keras_sentemb.methods.self_guided.trainer import SelfGuided

    return SelfGuided(encoder, loss="opt2", temperature=0.05, view_pooling="mean", min_layer=1,
                      projection_dim=8, seed=2, pooling="mean")


METHOD_TEST = MethodTest(options={"projection_dim": 16}, make_trainer=_trainer,
                         every_family=True)
