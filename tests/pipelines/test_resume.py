"""Every method resumes a killed run the same way (BackupAndRestore).

The methods come from the registry: a method with no entry in `METHODS`
resumes its folder's tiny run (`MethodTest.data` and `options`); `METHODS`
holds the variants of a method and the runs that need more.

A run of 6 steps in epochs of 3 (`eval_every`) is killed during step 5,
after the step-3 backup; the same call again resumes at step 3 with the same
data order, schedule and dev selection, and ends where the uninterrupted run
ends.
"""

import keras
import numpy as np
import pytest

import keras_sentemb
from keras_sentemb.methods.registry import BUILTIN_METHODS
from keras_sentemb.methods.testing import method_test
from tests.conftest import make_tiny_encoder
from tests.helpers.corpora import CORPUS, DEV
from tests.helpers.training import StepRecorder
from tests.numeric import assert_close_vectors

PAIRS = [(CORPUS[i], CORPUS[i + 1], float(i % 6)) for i in range(0, 120)]
TRIPLETS = [(CORPUS[i], CORPUS[i + 1], CORPUS[i + 2]) for i in range(0, 120)]
BITEXT = [(CORPUS[i], CORPUS[i + 150]) for i in range(0, 150)]

# Variants of a method, and methods whose resumed run needs more than their folder's tiny
# run (`MethodTest`): every other registered method is added from the registry below.
METHODS = {
    "ct_in_batch": lambda **kw: keras_sentemb.fit_ct(
        CORPUS, negatives="in_batch", batch_size=8, learning_rate=1e-2, **kw),
    "simcse_sup": lambda **kw: keras_sentemb.fit_simcse(
        TRIPLETS, mode="sup", batch_size=8, learning_rate=1e-2, **kw),
    # No early stop: the run must reach the kill at step 5.
    "sg": lambda **kw: keras_sentemb.fit_self_guided(
        CORPUS, batch_size=8, learning_rate=1e-2, projection_dim=16, patience=None, **kw),
    # STS-B-style scored pairs, given as tuples.
    "sts": lambda **kw: keras_sentemb.fit_sts_regression(
        PAIRS, batch_size=8, learning_rate=1e-2, **kw),
    # Retrieval dev on held-out pairs, and the queue of targets as training state.
    "parallel": lambda **kw: keras_sentemb.fit_parallel(
        BITEXT, batch_size=8, learning_rate=1e-2, eval_size=10, dev_size=10,
        queue_size=12, track_alignment=False, **kw),
}
# The registered method each entry trains (an entry may be one of its variants).
METHOD_OF = {"ct_in_batch": "ct", "simcse_sup": "simcse"}
# Registered methods resumed elsewhere or with no steps to resume, and why.
NOT_HERE = {
    "whitening": "no training steps: one pass over the vectors",
    "multitask": "its stages and their backups resume in tests/trainers/test_multitask.py",
}


# The tiny data of a method's `MethodTest.data` kind, for methods with no entry above.
DATA_OF_KIND = {"corpus": CORPUS, "pairs": [(a, b) for a, b, _ in PAIRS], "triplets": TRIPLETS,
                "bitext": BITEXT}


def _registered_case(name):
    """A method with no entry above: its tiny run's data and options (its `testing.py`)."""
    spec = method_test(BUILTIN_METHODS[name])
    if not isinstance(spec.data, str) or spec.data not in DATA_OF_KIND:
        return None
    data = DATA_OF_KIND[spec.data]
    return lambda **kw: keras_sentemb.fit(name, data, batch_size=8, learning_rate=1e-2,
                                          **spec.options, **kw)


for _name in BUILTIN_METHODS:
    if _name not in METHODS and _name not in NOT_HERE and _registered_case(_name):
        METHODS[_name] = _registered_case(_name)


def test_every_registered_method_is_resumed():
    """Every method is resumed: an entry above, its folder's tiny run, or named why not."""
    covered = {METHOD_OF.get(entry, entry) for entry in METHODS}
    assert covered.isdisjoint(NOT_HERE)
    assert covered | set(NOT_HERE) == set(BUILTIN_METHODS)


class Kill(keras.callbacks.Callback):
    """Raises during the first attempt's step 5 (after the step-3 backup)."""

    def __init__(self):
        super().__init__()
        self.armed = True

    def on_train_batch_end(self, batch, logs=None):
        if self.armed and int(self.model.optimizer.iterations) == 5:
            self.armed = False
            raise RuntimeError("killed")


def _run(method, callbacks=()):
    dev = "retrieval" if method == "parallel" else DEV
    return METHODS[method](model=make_tiny_encoder(), steps=6, eval_every=3, dev=dev,
                           seed=3, verbose=0, callbacks=list(callbacks))


_UNINTERRUPTED = {}


def _uninterrupted(method):
    """The run that is never killed: deterministic, so trained once per method for this file."""
    if method not in _UNINTERRUPTED:
        _UNINTERRUPTED[method] = _run(method)
    return _UNINTERRUPTED[method]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_killed_run_resumes_where_it_stopped(method, tmp_path):
    full = _uninterrupted(method)
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "backup"))
    with pytest.raises(RuntimeError, match="killed"):
        _run(method, [backup, Kill()])
    steps = StepRecorder()
    resumed = _run(method, [backup, steps])
    assert steps.seen == [3, 4, 5]  # from the step-3 backup, to exactly 6 steps
    assert resumed.training_report.steps_trained == 6
    for a, b in zip(full.get_weights(), resumed.get_weights()):
        assert_close_vectors(a, b, rtol=1e-4)
    a, b = full.training_report.selection, resumed.training_report.selection
    assert [s for s, _ in a["history"]] == [s for s, _ in b["history"]] == [0, 3, 6]
    assert (a["kept"], a["kept_step"]) == (b["kept"], b["kept_step"])
    for (_, x), (_, y) in zip(a["history"], b["history"]):
        assert x == pytest.approx(y, abs=0.05)
    # The loss of the epoch before the kill is kept from the first attempt.
    a, b = full.training_report.loss_history, resumed.training_report.loss_history
    assert [s for s, _ in a] == [s for s, _ in b] == [3, 6]
    for (_, x), (_, y) in zip(a, b):
        assert x == pytest.approx(y, rel=1e-3)
    assert not (tmp_path / "backup").exists()  # removed after the completed run


@pytest.mark.parametrize("method", ["ct", "simcse"])
def test_killed_run_resumes_from_the_atomic_backup(method, tmp_path):
    """The command line's `TrainingBackup`: a fresh callback object (a new
    process) resumes from what the killed run wrote."""
    from keras_sentemb.pipelines.backup import TrainingBackup

    full = _uninterrupted(method)
    with pytest.raises(RuntimeError, match="killed"):
        _run(method, [TrainingBackup(tmp_path / "backup"), Kill()])
    assert sorted(p.name for p in (tmp_path / "backup").iterdir() if "weights" in p.name) == [
        "epoch-1.weights.h5"]
    steps = StepRecorder()
    resumed = _run(method, [TrainingBackup(tmp_path / "backup"), steps])
    assert steps.seen == [3, 4, 5]
    for a, b in zip(full.get_weights(), resumed.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert not (tmp_path / "backup").exists()
