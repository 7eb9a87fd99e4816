"""The run plan: what "auto" and the unset arguments become, resolved without training."""

import dataclasses
import inspect

import pytest

import keras_sentemb
from keras_sentemb.pipelines.plan import RunConfig
from keras_sentemb.pipelines.plan import RunPlan
from keras_sentemb.pipelines.plan import resolve
from keras_sentemb.pipelines.scaffold import FitScaffold
from tests.conftest import make_tiny_encoder

STS_PAIRS = [("a man plays guitar", "a man is playing guitar", 4.5),
             ("a dog runs", "a cat sits on a mat", 0.5)]


def arguments(fit_function=keras_sentemb.fit_simcse, **overrides):
    defaults = {name: p.default for name, p in inspect.signature(fit_function).parameters.items()}
    return {**defaults, "data": None, "dev": None, **overrides}


def config(**overrides):
    return RunConfig.from_arguments("simcse", arguments(**overrides), in_batch=True)


@pytest.fixture(scope="module")
def raw():
    return make_tiny_encoder()  # declares no pooling, 64 positions, max_length 64


@pytest.fixture(scope="module")
def declared():
    return make_tiny_encoder(pooling="max", max_length=48)


def test_auto_pooling_is_the_models_own_else_the_papers(raw, declared):
    plan = resolve(config(), raw, "cls", examples=640)
    assert (plan.pooling, plan.pooling_reason) == (
        "cls", "the model declares no pooling; the paper's cls pooling")
    plan = resolve(config(), declared, "cls", examples=640)
    assert (plan.pooling, plan.pooling_reason) == ("max", "the model declares max pooling")
    plan = resolve(config(pooling="mean"), declared, "cls", examples=640)
    assert (plan.pooling, plan.pooling_reason) == ("mean", "set by the caller")


def test_a_method_can_keep_its_papers_pooling_whatever_the_model_declares(declared):
    plan = resolve(config(), declared, "cls", examples=640, paper_pooling_only="trains [CLS]")
    assert plan.pooling == "cls"
    assert plan.pooling_reason == "auto: trains [CLS]; the model's own max pooling is not used"
    asked = resolve(config(pooling="mean"), declared, "cls", examples=640,
                    paper_pooling_only="trains [CLS]")
    assert (asked.pooling, asked.pooling_reason) == ("mean", "set by the caller")


def test_the_token_limit_is_capped_at_the_backbones_positions(raw):
    assert resolve(config(max_length=32), raw, "cls", examples=64).max_length == 32
    capped = resolve(config(max_length=512), raw, "cls", examples=64)
    assert capped.max_length == 64 and capped.training_max_length == 64
    own = resolve(config(max_length=None), raw, "cls", examples=64)
    assert own.max_length is None and own.training_max_length == raw.max_length
    with pytest.raises(ValueError, match=r"`max_length` must be >= 3"):
        resolve(config(max_length=2), raw, "cls", examples=64)


def test_steps_are_given_or_epochs_of_the_data(raw):
    assert resolve(config(steps=7), raw, "cls", examples=10_000).steps == 7
    assert resolve(config(steps=None, batch_size=64), raw, "cls", examples=640).steps == 10
    assert resolve(config(steps=None, batch_size=64), raw, "cls", examples=640,
                   epochs=3).steps == 30
    assert resolve(config(steps=None, batch_size=64), raw, "cls", examples=10).steps == 1
    with pytest.raises(ValueError, match=r"`steps` is needed: .* \(a stream\)"):
        resolve(config(steps=None), raw, "cls", examples=None)
    with pytest.raises(ValueError, match="epochs"):
        resolve(config(steps=None), raw, "cls", examples=640, epochs=0)


def test_the_learning_rate_is_the_runs_else_the_methods_default(raw):
    assert resolve(config(learning_rate=1e-4), raw, "cls", examples=64,
                   learning_rate=2e-5).learning_rate == 1e-4
    assert resolve(config(learning_rate=None), raw, "cls", examples=64,
                   learning_rate=2e-5).learning_rate == 2e-5


def test_the_training_mlp_follows_the_resolved_pooling(raw, declared):
    assert resolve(config(), raw, "cls", examples=64, mlp="auto").mlp == "train"
    assert resolve(config(), declared, "cls", examples=64, mlp="auto").mlp == "none"
    assert resolve(config(), declared, "cls", examples=64, mlp="keep").mlp == "keep"
    assert resolve(config(), raw, "cls", examples=64).mlp is None  # a method without one
    with pytest.raises(ValueError, match="mlp"):
        resolve(config(), raw, "cls", examples=64, mlp="always")


def test_the_plan_is_frozen_and_records_what_it_resolved(raw):
    plan = resolve(config(steps=None, batch_size=16, max_length=None, precision="float32"),
                   raw, "cls", examples=64, mlp="auto")
    assert isinstance(plan, RunPlan)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.steps = 5
    assert plan.record() == {"pooling": "cls", "max_length": 64, "steps": 4,
                             "precision": "float32", "precision_reason": "asked for",
                             "learning_rate": 3e-5, "mlp": "train"}


def test_resolving_changes_neither_the_config_nor_the_encoder(declared):
    run_config = config(max_length=512, steps=None)
    before = (dataclasses.asdict(run_config), declared.pooling, declared.max_length)
    first = resolve(run_config, declared, "cls", examples=640)
    second = resolve(run_config, declared, "cls", examples=640)
    assert first == second
    assert (dataclasses.asdict(run_config), declared.pooling, declared.max_length) == before


def test_the_run_config_validates_once_and_is_frozen():
    with pytest.raises(ValueError, match=r"`batch_size` must be >= 2 for simcse"):
        config(batch_size=1)
    with pytest.raises(ValueError, match=r"`pooling` must be a string"):
        config(pooling=3)
    with pytest.raises(ValueError, match="`strategy` must be a tf.distribute.Strategy"):
        config(strategy="mirrored")
    with pytest.raises(ValueError, match="`matryoshka_weights` needs `matryoshka_dims`"):
        config(matryoshka_weights=[1.0])
    made = config(dev=STS_PAIRS, callbacks=[]).read_files()
    assert made.dev_pairs == tuple(STS_PAIRS) and made.callbacks == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.batch_size = 8
    custom = RunConfig.from_arguments("parallel", arguments(keras_sentemb.fit_parallel, dev="retrieval"),
                                      custom_dev=("retrieval",))
    assert custom.dev == "retrieval" and custom.dev_pairs is None


def test_the_scaffold_reads_resolved_values_from_the_plan_only(raw):
    run = FitScaffold("simcse", arguments(steps=None), "cls", in_batch=True)
    assert run.batch_size == 64 and run.config.steps is None
    for name in ("steps", "max_length", "pooling", "learning_rate"):
        with pytest.raises(AttributeError, match=rf"`run.{name}` is resolved per encoder"):
            getattr(run, name)
    with pytest.raises(AttributeError, match="read-only"):
        run.callbacks = []
    plan = run.resolve(raw, examples=640, mlp="auto")
    assert plan.steps == 10
    assert run.report.pooling == "cls" and run.report.resolved == plan.record()


def test_checking_the_arguments_reads_no_file_and_resolving_logs_nothing(raw, tmp_path, caplog):
    missing = str(tmp_path / "no-such-stsb")
    checked = config(dev=missing, max_length=512)  # values only: the file is not read yet
    assert checked.dev == missing and checked.dev_pairs is None
    with pytest.raises((ValueError, FileNotFoundError)):
        checked.read_files()
    with caplog.at_level("DEBUG"):
        plan = resolve(config(max_length=512), raw, "cls", examples=64)
    assert plan.max_length == 64 and caplog.records == []
