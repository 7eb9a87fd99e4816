"""Methods as registered objects: the registry, typed configs, the one runner."""

import dataclasses
import inspect
import subprocess
import sys
import textwrap
import typing

import numpy as np
import pytest

import keras_sentemb
from keras_sentemb.methods import Method
from keras_sentemb.methods import MethodConfig
from keras_sentemb.methods import UnknownMethodError
from keras_sentemb.methods import fit
from keras_sentemb.methods import get_method
from keras_sentemb.methods import list_methods
from keras_sentemb.methods import option
from keras_sentemb.methods import register_method
from keras_sentemb.methods.registry import BUILTIN_METHODS
from tests.conftest import REPO
from tests.conftest import make_tiny_encoder
from tests.helpers.plugins import installed_plugin

CORPUS = [f"the {a} {b} in the park ." for a in ("man", "woman", "dog", "cat")
          for b in ("runs", "sits", "is playing", "plays the piano")] * 2


@dataclasses.dataclass(frozen=True)
class ToyConfig(MethodConfig):
    temperature: float = option(0.05, "Softmax temperature.", above=0.0, source="a paper, 3.1")
    mode: str = option("a", "Which mode.", choices=("a", "b"))
    layers: typing.Tuple[int, ...] = option((1, 2), "Layers.", minimum=0)
    margin: typing.Optional[float] = option(None, "A margin.", maximum=1.0)
    flag: bool = option(False, "A switch.")


def test_list_methods_names_every_builtin_without_tensorflow():
    assert list_methods()[:len(BUILTIN_METHODS)] == list(BUILTIN_METHODS)
    assert list(BUILTIN_METHODS) == sorted(BUILTIN_METHODS)
    assert keras_sentemb.list_methods() == list_methods()
    script = ("import sys; sys.path.insert(0, %r); import keras_sentemb; "
              "print(keras_sentemb.list_methods()); print('tensorflow' in sys.modules)" % str(REPO))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-1] == "False"


def test_unknown_method_is_one_clear_error():
    known = ", ".join(list_methods())
    with pytest.raises(UnknownMethodError) as info:
        get_method("nope")
    assert str(info.value) == f"unknown training method 'nope'; known methods: {known}"


def test_config_validates_and_normalizes_every_field():
    config = ToyConfig(temperature=1, layers=[3, 4], margin=0)
    assert config.temperature == 1.0 and isinstance(config.temperature, float)
    assert config.layers == (3, 4) and config.margin == 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.temperature = 2.0
    bad = [({"temperature": 0.0}, "must be > 0.0"), ({"temperature": "x"}, "must be a number"),
           ({"temperature": True}, "must be a number"), ({"mode": "c"}, "must be one of 'a', 'b'"),
           ({"layers": (1, -1)}, "must be >= 0"), ({"layers": 3}, "tuple of int"),
           ({"margin": 2.0}, "must be <= 1.0"), ({"flag": 1}, "must be a bool")]
    for kwargs, message in bad:
        with pytest.raises(ValueError, match=message):
            ToyConfig(**kwargs)


def test_option_fields_document_type_default_and_source():
    fields = {f.name: f for f in ToyConfig.option_fields()}
    assert fields["temperature"].doc_line() == (
        "float. Softmax temperature. Defaults to `0.05` (a paper, 3.1).")
    assert fields["margin"].type_text() == "float or None" and fields["margin"].optional
    assert fields["layers"].type_text() == "tuple of int"
    assert 'One of "a", "b".' in fields["mode"].doc_line()
    with pytest.raises(TypeError, match="immutable"):
        option([1], "a list default")


def _toy_method(**attributes):
    class Toy(Method):
        """A toy method."""

        config_class = ToyConfig

        def train(self, run, data, config):
            return config

    for key, value in attributes.items():
        setattr(Toy, key, value)
    return Toy


def test_register_method_refuses_bad_definitions():
    with pytest.raises(ValueError, match="lower case"):
        register_method("Bad Name")
    with pytest.raises(TypeError, match="Method subclass"):
        register_method("toy_x")(object)
    with pytest.raises(ValueError, match="built-in method"):
        register_method("simcse")(_toy_method())
    with pytest.raises(TypeError, match="must define train"):
        register_method("toy_no_train")(type("NoTrain", (Method,), {}))

    class Undecorated(MethodConfig):  # its field would silently not be one
        x: int = option(1, "x")

    with pytest.raises(TypeError, match="frozen dataclass"):
        register_method("toy_undecorated")(_toy_method(config_class=Undecorated))
    with pytest.raises(TypeError, match="frozen dataclass"):
        register_method("toy_not_config")(_toy_method(config_class=dict))

    @dataclasses.dataclass(frozen=True)
    class Clash(MethodConfig):
        batch_size: int = option(1, "clashes with the shared argument")

    with pytest.raises(TypeError, match="clash"):
        register_method("toy_clash")(_toy_method(config_class=Clash))
    with pytest.raises(TypeError, match="run_defaults"):
        register_method("toy_defaults")(_toy_method(run_defaults={"nope": 1}))
    with pytest.raises(TypeError, match="optional"):
        register_method("toy_optional")(_toy_method(optional=("nope",)))


def test_signature_and_docstring_come_from_the_definition():
    toy = register_method("toy_signature")(_toy_method(run_defaults={"batch_size": 8},
                                                       optional=("max_grad_norm",)))
    params = toy.signature().parameters
    names = list(params)
    assert names[0] == "data" and names[-2:] == ["max_grad_norm", "preset"]
    assert names.index("temperature") > names.index("verbose")
    assert params["batch_size"].default == 8
    doc = toy.docstring()
    assert doc.startswith("A toy method.") and "    temperature: float. Softmax" in doc
    assert "batch_size: int. Rows per optimizer step (global, across replicas). Defaults to `8`." \
        in " ".join(doc.split())
    assert "toy_signature" in list_methods()


@pytest.mark.parametrize("name", list(BUILTIN_METHODS))
def test_every_fit_function_has_its_methods_signature(name):
    method = get_method(name)
    wrappers = [getattr(keras_sentemb, n) for n in keras_sentemb.__all__ if n.startswith("fit_")]
    wrapper, = [w for w in wrappers if getattr(w, "method", None) == name]
    assert inspect.signature(wrapper) == method.signature()
    assert wrapper.__doc__ == method.docstring()


def test_fit_by_name_is_fit_simcse():
    kwargs = dict(steps=2, batch_size=8, dev=None, pooling="mean", mlp="none", verbose=0)
    by_name = fit("simcse", CORPUS, model=make_tiny_encoder(), **kwargs)
    wrapper = keras_sentemb.fit_simcse(CORPUS, model=make_tiny_encoder(), **kwargs)
    for a, b in zip(by_name.get_weights(), wrapper.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert by_name.training_report.method == "simcse"
    assert by_name.training_report.hyperparameters["temperature"] == 0.05


def test_fit_refuses_unknown_options_and_bad_values_before_loading_a_model():
    with pytest.raises(TypeError, match="unexpected option\\(s\\) temprature; its options: model"):
        fit("simcse", CORPUS, model="no-such-model", temprature=0.1)
    with pytest.raises(ValueError, match="`temperature` must be > 0.0"):
        fit("simcse", CORPUS, model="no-such-model", temperature=-1.0)
    with pytest.raises(TypeError, match="unexpected"):
        keras_sentemb.fit_simcse(CORPUS, temprature=0.1)


PLUGIN = textwrap.dedent('''
    """A method defined outside keras_sentemb."""
    import dataclasses

    from keras_sentemb.methods import Method, MethodConfig, option, register_method


    @dataclasses.dataclass(frozen=True)
    class ShiftConfig(MethodConfig):
        shift: float = option(0.5, "How far.")


    @register_method("shift_plugin")
    class Shift(Method):
        """Shifts nothing; reports its config."""

        config_class = ShiftConfig

        def train(self, run, data, config):
            return ("trained", config.shift, run.batch_size)
''')


def test_an_installed_plugin_is_found_through_its_entry_point(tmp_path):
    (tmp_path / "shift_plugin.py").write_text(PLUGIN, encoding="utf-8")
    info = tmp_path / "shift_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: shift-plugin\nVersion: 0.1\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text(
        "[keras_sentemb.methods]\nshift_plugin = shift_plugin\n", encoding="utf-8")
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{str(tmp_path)!r}, {str(REPO)!r}]
        import keras_sentemb
        print(keras_sentemb.list_methods()[-1], "shift_plugin" in sys.modules)
        print(keras_sentemb.fit("shift_plugin", ["a"], shift=2, batch_size=3))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines()[-2:] == ["shift_plugin False", "('trained', 2.0, 3)"]


def test_a_plugin_that_fails_to_load_names_itself_and_hides_nothing(tmp_path, monkeypatch):
    from keras_sentemb.methods import PluginError

    installed_plugin(tmp_path, "broken", 'raise ImportError("failed on purpose")\n')
    installed_plugin(tmp_path, "silent", "VALUE = 1  # registers nothing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert list_methods()[:len(BUILTIN_METHODS)] == list(BUILTIN_METHODS)
    assert {"broken", "silent"} <= set(list_methods())
    with pytest.raises(PluginError) as info:
        get_method("broken")
    assert str(info.value) == (
        "the training method 'broken' cannot be loaded: entry point broken = broken_mod "
        "(distribution broken-plugin 0.1) failed (ImportError: failed on purpose)")
    with pytest.raises(PluginError, match="entry point silent = silent_mod .distribution "
                       "silent-plugin 0.1. registers no method of that name"):
        get_method("silent")
    described = list_methods(verbose=True)
    assert described["simcse"] == ("built-in (keras_sentemb.methods.simcse); "
                                   "presets: unsup-bert-base")
    assert described["broken"] == (
        "plugin that fails to load: entry point broken = broken_mod (distribution broken-plugin "
        "0.1) failed (ImportError: failed on purpose)")
    assert list(described)[:len(BUILTIN_METHODS)] == list(BUILTIN_METHODS)
