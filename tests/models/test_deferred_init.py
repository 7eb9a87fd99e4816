"""`initializers_deferred`: no random draws for weights that loading overwrites, same values."""

import threading

import keras
import keras_hub
import numpy as np
import pytest

from keras_sentemb import compat
from keras_sentemb.kernels import deferred_init
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.kernels.deferred_init import initializers_deferred
from tests.conftest import make_tiny_encoder
from tests.helpers.files import write_hf_bert


def tiny_backbone():
    return keras_hub.models.BertBackbone(vocabulary_size=40, num_layers=1, num_heads=2,
                                         hidden_dim=8, intermediate_dim=16,
                                         max_sequence_length=16)


def assert_same_variables(got, expected):
    """The two models' variables, in order, are equal (auto-numbered names differ)."""
    assert len(got.variables) == len(expected.variables)
    for a, b in zip(got.variables, expected.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=b.path)


def test_never_assigned_variables_get_the_values_they_would_have_had():
    keras.utils.set_random_seed(3)
    plain = tiny_backbone()
    keras.utils.set_random_seed(3)
    with initializers_deferred():
        deferred = tiny_backbone()
        assert not any(v.numpy().any() for v in deferred.variables)  # zeros until the exit
    assert_same_variables(deferred, plain)


def test_assigned_values_are_kept_and_their_initializers_never_run():
    drawn = []

    class Counting(keras.initializers.GlorotUniform):
        def __call__(self, shape, dtype=None):
            drawn.append(shape)
            return super().__call__(shape, dtype=dtype)

    layers = [keras.layers.Dense(4, kernel_initializer=Counting(seed=i)) for i in range(3)]
    with initializers_deferred():
        for layer in layers:
            layer.build((None, 3))
        layers[0].kernel.assign(np.zeros((3, 4), "float32"))  # loaded zeros stay zeros
        layers[1].kernel.value.assign(np.ones((3, 4), "float32"))  # written around Keras' assign
    assert drawn == [(3, 4)]  # only the untouched kernel, at the exit
    np.testing.assert_array_equal(layers[0].kernel.numpy(), 0)
    np.testing.assert_array_equal(layers[1].kernel.numpy(), 1)
    np.testing.assert_array_equal(layers[2].kernel.numpy(),
                                  keras.initializers.GlorotUniform(seed=2)((3, 4)))


def test_a_loaded_folder_draws_nothing_and_equals_an_undeferred_load(tmp_path, monkeypatch):
    folder = write_hf_bert(make_tiny_encoder(max_length=32), tmp_path / "hf", pooler=False)
    unassigned = []
    original = deferred_init._initialize_unassigned
    monkeypatch.setattr(deferred_init, "_initialize_unassigned",
                        lambda entries: unassigned.extend(entries) or original(unassigned))
    keras.utils.set_random_seed(1)  # the dropout layers' seeds
    loaded = SentenceEncoder.from_preset(str(folder))
    # Only the dropout layers' seed states are left to their initializers.
    assert unassigned and all(v.path.endswith("seed_generator_state") for v, _ in unassigned)
    monkeypatch.setattr(compat, "has_variable_init_hooks", lambda: False)  # Keras as it is
    keras.utils.set_random_seed(1)
    plain = SentenceEncoder.from_preset(str(folder))
    assert_same_variables(loaded.backbone, plain.backbone)


def test_the_scope_is_per_thread_and_always_restores_keras():
    cls = keras.Variable
    before = (cls._initialize_with_initializer, cls._direct_assign)
    other = {}

    def make():
        other["v"] = keras.Variable(keras.initializers.Ones(), shape=(2,))
        other["during"] = other["v"].numpy()

    with pytest.raises(RuntimeError):
        with initializers_deferred():
            thread = threading.Thread(target=make)
            thread.start()
            thread.join()
            raise RuntimeError("boom")
    np.testing.assert_array_equal(other["during"], 1)  # another thread: initialised at once
    assert (cls._initialize_with_initializer, cls._direct_assign) == before
    assert keras.Variable(keras.initializers.Ones(), shape=(2,)).numpy().tolist() == [1, 1]
