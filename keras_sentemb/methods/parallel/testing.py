"""How the tests that cover every method train a tiny model with the parallel-pairs method."""

from keras_sentemb.methods.testing import MethodTest


def _trainer(encoder):
    from keras_sentemb.methods.parallel.trainer import ParallelContrastive

    return ParallelContrastive(encoder, encoder.clone("teacher"), queue_size=6, temperature=0.05,
                               pooling="mean", mlp="none")


METHOD_TEST = MethodTest(
    data="bitext",
    options={"eval_size": 10, "dev_size": 10, "queue_size": 8, "track_alignment": False},
    make_trainer=_trainer)
