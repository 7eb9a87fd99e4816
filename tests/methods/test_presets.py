"""Presets, built-in methods found in their own place, entry-point names and `train --help`."""

import importlib
import inspect
import re
import subprocess
import sys
import textwrap

import pytest

import keras_sentemb
from keras_sentemb import cli
from keras_sentemb.methods import PluginError
from keras_sentemb.methods import get_method
from keras_sentemb.methods import list_methods
from keras_sentemb.methods.method import UnknownPresetError
from keras_sentemb.methods.registry import BUILTIN_FIT_FUNCTIONS
from keras_sentemb.methods.registry import BUILTIN_METHODS
from keras_sentemb.methods.registry import builtin_declarations
from keras_sentemb.methods.runner import split_options
from tests.conftest import REPO
from tests.helpers.plugins import installed_plugin


def _each_preset():
    for name in BUILTIN_METHODS:
        for preset in get_method(name).presets:
            yield name, preset


@pytest.mark.parametrize("name, preset", list(_each_preset()))
def test_every_preset_is_a_valid_call_of_its_method_with_a_source_for_each_value(name, preset):
    method = get_method(name)
    run_arguments, config = split_options(method, {}, preset)
    values = method.presets[preset].values
    merged = {**run_arguments, **config.to_dict()}
    assert {k: merged[k] for k in values} == values
    assert all(source.strip() for source in method.presets[preset].sources.values())


def test_a_method_whose_defaults_cite_a_paper_has_its_settings_as_a_preset():
    cited = 0
    for name in BUILTIN_METHODS:
        method = get_method(name)
        sources = [f.source or "" for f in method.config_class.option_fields()]
        if any(re.search(r"et al\. (19|20)\d\d", source) for source in sources):
            cited += 1
            assert method.presets, name
    assert cited >= 1


def test_explicit_arguments_override_the_preset(monkeypatch):
    seen = {}

    def train(self, run, data, config):
        seen.update(run=run, config=config)
        return "done"

    monkeypatch.setattr(get_method("simcse"), "train", train)
    assert keras_sentemb.fit_simcse(["x"], model="my-model", batch_size=8, dev=None,
                                    preset="unsup-bert-base") == "done"
    run, config = seen["run"], seen["config"]
    assert (run.config.model, run.batch_size, run.config.pooling) == ("my-model", 8, "cls")
    assert (config.mlp, run.config.max_length, run.config.seed) == ("train", 32, 42)
    assert keras_sentemb.fit("simcse", ["x"], preset="unsup-bert-base", dev=None) == "done"
    assert seen["run"].config.model == "bert_base_en_uncased"


def test_an_unknown_preset_is_one_line_naming_the_known_ones():
    with pytest.raises(UnknownPresetError) as info:
        keras_sentemb.fit_simcse(["x"], preset="sup-large")
    assert str(info.value) == ("unknown preset 'sup-large' for the 'simcse' method; its "
                               "presets: unsup-bert-base")
    with pytest.raises(UnknownPresetError, match="its presets: none"):
        keras_sentemb.fit("whitening", ["x"], preset="anything")


def test_list_methods_and_train_help_name_the_presets(capsys):
    assert list_methods(verbose=True)["parallel"].endswith(
        "presets: bert-base, objective-comparison")
    text = " ".join(cli.train.train_help("consert").split())
    assert "--preset NAME a paper's settings (unsup-bert-base: Unsupervised" in text


def test_train_with_an_unknown_preset_exits_with_one_line(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a sentence\nanother one\n", encoding="utf-8")
    code = cli.main(["train", "simcse", "--train-file", str(corpus), "--output",
                     str(tmp_path / "out"), "--preset", "nope", "--no-resume"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1] == ("keras-sentemb: error: unknown preset 'nope' for the 'simcse' method; "
                       "its presets: unsup-bert-base")


def test_the_builtin_methods_and_their_fit_functions_are_read_from_their_own_modules():
    for name, module in BUILTIN_METHODS.items():
        assert get_method(name).__module__ == module
    fits = {n for n in keras_sentemb.__all__ if n.startswith("fit_")}
    assert fits == set(BUILTIN_FIT_FUNCTIONS)
    for function, module in BUILTIN_FIT_FUNCTIONS.items():
        assert getattr(keras_sentemb, function).__module__ == module


def test_every_method_is_a_folder_with_its_config_and_one_declaration():
    folder = REPO / "keras_sentemb" / "methods"
    packages = sorted(p for p in folder.iterdir() if (p / "__init__.py").is_file())
    modules = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    assert set(modules) == {"method", "options", "registry", "runner", "testing"}, modules
    found = {module.rsplit(".", 1)[1] for module in BUILTIN_METHODS.values()}
    assert found == {p.name for p in packages}
    for package in packages:
        assert (package / "config.py").is_file(), package.name
        module = f"keras_sentemb.methods.{package.name}"
        assert list(BUILTIN_METHODS.values()).count(module) == 1, package.name
        assert list(BUILTIN_FIT_FUNCTIONS.values()).count(module) == 1, package.name
        config = importlib.import_module(f"{module}.config")
        method = get_method(next(n for n, m in BUILTIN_METHODS.items() if m == module))
        assert method.config_class.__module__ == config.__name__, package.name
        assert method.presets is getattr(config, "PRESETS", method.presets), package.name


def test_a_method_dropped_into_the_package_is_found(tmp_path):
    (tmp_path / "method.py").write_text('"""@register_method("framework")\nclass X:"""\n')
    (tmp_path / "mean_shift").mkdir()
    (tmp_path / "mean_shift" / "__init__.py").write_text(textwrap.dedent('''
        """A method; its docstring shows another one, which is not declared.

        Examples:

        @register_method("docstring_example")
        class Example(Method):
            ...

        fit_docstring_example = fit_function("docstring_example", "fit_docstring_example")
        def fit_other(data):
        """


        @register_method("mean_shift")
        class MeanShiftMethod(Method):
            """A method."""

            def train(self, run, data, config):
                fit_inner = None


        # @register_method("commented_out")
        fit_mean_shift = fit_function("mean_shift", "fit_mean_shift")
    '''))
    (tmp_path / "notes").mkdir()  # a folder that is no package
    names, functions = builtin_declarations(tmp_path, "pkg.methods")
    assert names == {"mean_shift": "pkg.methods.mean_shift"}
    assert functions == {"fit_mean_shift": "pkg.methods.mean_shift"}


MISNAMED = textwrap.dedent('''
    from keras_sentemb.methods import Method, register_method


    @register_method("named_otherwise")
    class Misnamed(Method):
        """Registers a name its entry point does not list."""

        def train(self, run, data, config):
            return "trained"
''')


def test_an_entry_point_must_register_the_name_it_is_listed_under(tmp_path, monkeypatch, capsys):
    installed_plugin(tmp_path, "listed", MISNAMED)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "listed" in list_methods()
    expected = ("entry point listed = listed_mod (distribution listed-plugin 0.1) registers "
                "'named_otherwise', not 'listed' (an entry point's name must be the name its "
                "module registers)")
    with pytest.raises(PluginError) as info:
        get_method("listed")
    assert str(info.value) == f"the training method 'listed' cannot be loaded: {expected}"
    assert "\n" not in str(info.value)
    assert list_methods(verbose=True)["listed"] == f"plugin that fails to load: {expected}"
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a sentence\n", encoding="utf-8")
    code = cli.main(["train", "listed", "--train-file", str(corpus), "--output",
                     str(tmp_path / "out"), "--no-resume"])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"keras-sentemb: error: the training method 'listed' cannot be loaded: {expected}")


def test_train_help_speaks_command_line():
    text = cli.train.train_help("simcse")
    flat = " ".join(text.split())
    assert "--batch-size N Rows per optimizer step (global, across replicas). (default: 64)" \
        in flat
    assert "--output DIR required." in flat and "--train-file FILE required." in flat
    assert "--learning-rate LR Peak learning rate; none is the method's own. (default: 3e-5)" \
        in flat
    assert "or an encoder" not in flat and "SentenceEncoder" not in flat
    for python in ("str or None", "int or None", "float or None", " int.", " str.", " bool.",
                   "`"):
        assert python not in flat, python
    assert "--mode {unsup,sup,pairs,paraphrase}" in flat and "(default: unsup)" in flat
    assert "--dropout, --no-dropout" in " ".join(cli.train.train_help("ct").split())


def test_every_method_option_has_its_default_in_the_help():
    for name in BUILTIN_METHODS:
        parser, method = cli.method_option_parser(name)
        for action in parser._actions:
            if action.option_strings and action.help and "Defaults to" not in action.help:
                assert "(default: " in action.help, (name, action.option_strings)


def test_help_piped_into_a_closed_reader_exits_quietly():
    process = subprocess.Popen([sys.executable, "-m", "keras_sentemb", "train", "ct", "--help"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    process.stdout.close()  # the reader is gone before the help is written (`| head -0`)
    err = process.stderr.read().decode()
    assert process.wait(timeout=300) == 0
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-2000:]


def test_the_literal_fit_signatures_are_the_methods():
    for function, module in BUILTIN_FIT_FUNCTIONS.items():
        fit = getattr(keras_sentemb, function)
        assert inspect.signature(fit) == get_method(fit.method).signature(), function
