"""Every registered method on tiny data: the files each one trains on and options that keep it tiny."""

from keras_sentemb.methods.registry import BUILTIN_METHODS
from keras_sentemb.methods.testing import method_test
from tests.conftest import make_tiny_encoder
from tests.helpers.methods import write_tiny_data

# method -> its folder's `MethodTest` (the data of its tiny run and the options that keep it tiny),
# read from the registry: a method is covered as soon as its folder exists.
RUNS = {name: method_test(module) for name, module in BUILTIN_METHODS.items()}

PROBE = ["a man plays the guitar .", "the cat sits on the mat ."]


def write_every_method_data(root):
    """The tiny model (`root/tiny`) and every method's tiny training data under `root`."""
    make_tiny_encoder().save(root / "tiny")
    for run in RUNS.values():
        write_tiny_data(run.data, root)
    return root


def fit_tiny(method, root, **extra):
    """`keras_sentemb.fit(method, ...)` on the tiny model and data under `root`, 2 steps, seed 0."""
    import keras_sentemb

    run = RUNS[method]
    data = write_tiny_data(run.data, root)  # its path (written again: the same bytes)
    return keras_sentemb.fit(method, str(data), model=str(root / "tiny"), steps=2,
                             batch_size=8, max_length=16, dev=None, verbose=0, seed=0,
                             **run.options, **extra)
