"""The shared fit_* arguments: one definition, every signature, doc and CLI help."""

import inspect
import subprocess
import sys

import pytest

import keras_sentemb
from keras_sentemb.pipelines.arguments import OPTIONAL_NAMES
from keras_sentemb.pipelines.arguments import SHARED_NAMES
from keras_sentemb.pipelines.arguments import option_docs

FITS = sorted(n for n in keras_sentemb.__all__ if n.startswith("fit_"))
IN_BATCH = ("fit_ct", "fit_simcse", "fit_consert", "fit_self_guided", "fit_parallel",
            "fit_multitask")


@pytest.mark.parametrize("name", FITS)
def test_signature_starts_with_the_shared_arguments_and_docs_list_every_argument(name):
    fit = getattr(keras_sentemb, name)
    params = list(inspect.signature(fit).parameters)
    assert params[: 1 + len(SHARED_NAMES)] == ["data", *SHARED_NAMES]
    assert params[-1] == "preset"
    body = params[:-1]
    assert all(p not in body[: -len(OPTIONAL_NAMES)] for p in OPTIONAL_NAMES if p in body)
    docs = option_docs(fit)
    assert set(params) <= set(docs), set(params) - set(docs)
    for shared in SHARED_NAMES:
        assert docs[shared].endswith(".") and "Defaults to" in docs[shared]


def test_the_method_defaults_are_kept():
    sig = inspect.signature(keras_sentemb.fit_ct)
    assert sig.parameters["steps"].default == 500
    assert sig.parameters["batch_size"].default == 16
    assert sig.parameters["max_length"].default == 75
    assert "Defaults to `16`" in option_docs(keras_sentemb.fit_ct)["batch_size"]
    sig = inspect.signature(keras_sentemb.fit_simcse)
    assert (sig.parameters["learning_rate"].default, sig.parameters["seed"].default) == (3e-5, 42)


@pytest.mark.parametrize("name", IN_BATCH)
def test_in_batch_methods_refuse_a_batch_of_one_before_any_work(name):
    fit = getattr(keras_sentemb, name)
    with pytest.raises(ValueError, match=r"`batch_size` must be >= 2 .*Received: batch_size=1"):
        fit(["a sentence", "another one"], model="no-such-model", batch_size=1, dev=None)


def test_a_wrapper_binds_positional_calls_and_validates_once(monkeypatch):
    from keras_sentemb.methods import simcse

    seen = {}

    def train(self, run, data, config):
        seen.update(run=run, data=data, config=config)
        return "done"

    monkeypatch.setattr(simcse.SimCSEMethod, "train", train)
    assert keras_sentemb.fit_simcse(["x"], "my-model", 3, temperature=0.1, dev=None) == "done"
    run = seen["run"]
    assert (run.model, run.config.steps, run.batch_size, seen["config"].temperature) == (
        "my-model", 3, 64, 0.1)
    assert run.report.hyperparameters["temperature"] == 0.1
    with pytest.raises(ValueError, match="`steps` must be >= 1"):
        keras_sentemb.fit_simcse(["x"], steps=0)
    with pytest.raises(TypeError, match="unexpected"):
        keras_sentemb.fit_simcse(["x"], no_such_option=1)
    assert "    steps: int or None." in keras_sentemb.fit_simcse.__doc__


def test_train_method_help_lists_the_method_options():
    out = subprocess.run(
        [sys.executable, "-m", "keras_sentemb", "train", "ct", "--help"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    text = " ".join(out.stdout.split())
    for flag in ("--train-file", "--steps", "--negatives", "--keep", "--dropout, --no-dropout",
                 "--pooling", "--mini-batch-size"):
        assert flag in text
    assert "k7 (any kN) or in_batch. The paper's: Carlsson et al. 2021, section 5. (default: k7)" in text
    assert "Defaults to `500`" not in text.split("--negatives")[1]


def test_max_grad_norm_defaults_follow_each_methods_reference_code():
    defaults = {name: inspect.signature(getattr(keras_sentemb, name)).parameters["max_grad_norm"].default
                for name in ("fit_simcse", "fit_consert", "fit_self_guided", "fit_ct",
                             "fit_parallel", "fit_multitask", "fit_mlm", "fit_sts_regression")}
    assert defaults == {"fit_simcse": 1.0, "fit_consert": 1.0, "fit_self_guided": 1.0,
                        "fit_ct": None, "fit_parallel": None, "fit_multitask": None,
                        "fit_mlm": None, "fit_sts_regression": None}
    assert "clip_grad_norm_" in option_docs(keras_sentemb.fit_simcse)["max_grad_norm"]


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), "1"])
def test_max_grad_norm_must_be_positive_before_any_work(value):
    with pytest.raises(ValueError, match=r"`max_grad_norm` must be (> 0|a number)"):
        keras_sentemb.fit_simcse(["a", "b"], model="no-such-model", max_grad_norm=value, dev=None)


def test_the_run_clips_the_optimizer_it_compiles():
    import keras

    from keras_sentemb.pipelines.scaffold import FitScaffold

    def scaffold(**arguments):
        defaults = {name: p.default for name, p in
                    inspect.signature(keras_sentemb.fit_simcse).parameters.items()}
        arguments = {**defaults, "data": None, **arguments}
        return FitScaffold("simcse", arguments, "cls")

    assert scaffold().clipped(keras.optimizers.SGD()).global_clipnorm == 1.0
    assert scaffold(max_grad_norm=None).clipped(keras.optimizers.SGD()).global_clipnorm is None
    with pytest.raises(ValueError, match="already clips"):
        scaffold().clipped(keras.optimizers.SGD(clipnorm=2.0))
