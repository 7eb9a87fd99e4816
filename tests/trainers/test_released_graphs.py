"""A finished `fit_*` leaves nothing traced behind: its training step and weights go with it."""

import gc

import tensorflow as tf

import keras_sentemb
from keras_sentemb.kernels.gradient_registry import custom_gradient_names
from keras_sentemb.kernels.gradient_registry import releasing_custom_gradients
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS


def _training_graphs():
    gc.collect()
    return [o for o in gc.get_objects()
            if type(o).__name__ == "FuncGraph" and o.name.startswith("one_step_on_data")]


def test_a_finished_run_releases_its_training_step_and_custom_gradients():
    before = custom_gradient_names()
    held = len(_training_graphs())
    for _ in range(2):
        encoder = keras_sentemb.fit_simcse(CORPUS[:32], model=make_tiny_encoder(), steps=2,
                                           batch_size=8, max_length=16, dev=None, verbose=0,
                                           precision="float32")
        del encoder
    # Each traced step registered the fused kernels' gradients (whose closures hold the
    # step's graph, hence its model's variables); the run removed them when it ended.
    assert custom_gradient_names() == before
    assert len(_training_graphs()) == held


def test_a_finished_run_leaves_no_cycles_for_a_later_collection():
    """The run's trainer, traced step and optimizer state hold one another in reference cycles
    (tens of thousands of objects for the tiny model, 100,000 for the default one): the run
    collects them when it ends, so that no later collection (in the middle of the next run's
    trace, or of a request) pays for them."""
    gc.collect()
    gc.disable()  # no automatic collection may take the cycles instead
    try:
        encoder = keras_sentemb.fit_simcse(CORPUS[:32], model=make_tiny_encoder(), steps=2,
                                           batch_size=8, max_length=16, dev=None, verbose=0,
                                           precision="float32")
        left = gc.collect()
    finally:
        gc.enable()
    assert left < 500, left
    assert encoder.encode(["a man plays the guitar"]).shape[0] == 1


def test_the_release_removes_only_what_was_registered_inside():
    @tf.custom_gradient
    def doubled(x):
        return 2 * x, lambda dy: 2 * dy

    @tf.function
    def traced(x):
        return doubled(x)

    traced(tf.constant(1.0))  # registered outside: kept
    kept = custom_gradient_names()
    with releasing_custom_gradients():
        tf.function(lambda x: doubled(x))(tf.constant(1.0))
        assert len(custom_gradient_names()) == len(kept) + 1
    assert custom_gradient_names() == kept


def test_encoding_registers_no_gradient_and_its_graph_goes_with_the_encoder():
    import weakref

    before = custom_gradient_names()
    for precision in ("float32", "bfloat16"):
        encoder = make_tiny_encoder()
        encoder.encode(CORPUS[:20], precision=precision)
        gone = weakref.ref(encoder)
        del encoder
        gc.collect()
        assert gone() is None, precision
    # A forward-only graph takes the fused GELU's forward kernel without a custom gradient.
    assert custom_gradient_names() == before
