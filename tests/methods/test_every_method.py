"""Every registered method, read from the registry: a tiny run saves, reloads and encodes the same.

A method's folder adds what its tiny run needs, and checks of its own, in its
`testing.py` (`keras_sentemb.methods.testing.MethodTest`); nothing here names
a method.
"""

import pytest

from keras_sentemb.methods.registry import BUILTIN_METHODS
from keras_sentemb.methods.testing import MethodTest
from keras_sentemb.methods.testing import method_test
from tests.helpers.methods import run_method_test


@pytest.mark.parametrize("name", list(BUILTIN_METHODS))
def test_a_tiny_run_saves_reloads_and_encodes_the_same(name, tmp_path):
    run_method_test(name, tmp_path)


REFERENCED = [name for name in BUILTIN_METHODS
              if method_test(BUILTIN_METHODS[name]).reference is not None]


@pytest.mark.parametrize("name", REFERENCED)
def test_a_method_matches_its_reference_implementation(name, tmp_path, torch_worker):
    from tests.conftest import make_tiny_encoder

    method_test(BUILTIN_METHODS[name]).reference(make_tiny_encoder(), tmp_path, torch_worker)


@pytest.mark.parametrize("name", list(BUILTIN_METHODS))
def test_every_methods_test_options_are_its_options(name):
    from keras_sentemb.methods import get_method

    spec = method_test(BUILTIN_METHODS[name])
    assert isinstance(spec, MethodTest)
    get_method(name).config_class(**spec.options)  # refused if not the method's options


def test_method_test_flags_are_the_command_lines():
    spec = MethodTest(options={"queue_size": 8, "track_alignment": False, "dropout": True,
                               "views": ("a", "b")})
    assert spec.flags() == ["--queue-size", "8", "--no-track-alignment", "--dropout",
                            "--views", "a,b"]
    with pytest.raises(ValueError, match="MethodTest.data must be one of"):
        MethodTest(data="nope")


@pytest.mark.parametrize("name", list(BUILTIN_METHODS))
def test_mlp_keep_returns_an_encoder_with_its_projection_head(name, tmp_path):
    """A method with `mlp="keep"` adds a projection head to a start without one and keeps it."""
    import keras_sentemb
    from keras_sentemb.methods import get_method
    from tests.conftest import make_tiny_encoder
    from tests.helpers.methods import TINY_RUN
    from tests.helpers.methods import write_tiny_data

    options = {o.name: o for o in get_method(name).config_class.option_fields()}
    if "mlp" not in options or "keep" not in (options["mlp"].choices or ()):
        pytest.skip(f"{name} has no mlp='keep'")
    spec = method_test(BUILTIN_METHODS[name])
    start = make_tiny_encoder()
    assert start.projection is None
    encoder = keras_sentemb.fit(name, str(write_tiny_data(spec.data, tmp_path)), model=start,
                                **{**TINY_RUN, "steps": 1, **spec.options, "mlp": "keep"})
    assert encoder.projection is not None
    assert encoder.training_report.resolved["mlp"] == "keep"
