"""A trainer's defaults are its method's: no second value for a setting the config declares."""

import importlib
import inspect

import pytest

from keras_sentemb.methods import get_method
from keras_sentemb.methods.registry import BUILTIN_METHODS
from keras_sentemb.trainers.training_head import resolve_training_mlp
from keras_sentemb.trainers.base_trainer import BaseTrainer
from tests.conftest import make_tiny_encoder

# What a trainer takes resolved (the run resolves the method's value first), by argument.
RESOLVED = {
    "pooling": "the plan's pooling: the trainer defaults to the paper's",
    "seed": "the run's seed",
    "mlp": "the head resolved for the pooling",
}
# The same setting in another form: the config's text, parsed for the trainer.
PARSED = {("consert", "views"): ("shuffle", "feature_cutoff"),
          ("consert", "view_rates"): (None, None)}


def _trainers():
    for name, module in BUILTIN_METHODS.items():
        try:
            trainers = importlib.import_module(f"{module}.trainer")
        except ModuleNotFoundError:
            continue  # a method without a trainer (whitening)
        for cls in vars(trainers).values():
            if (isinstance(cls, type) and issubclass(cls, BaseTrainer)
                    and cls.__module__ == trainers.__name__):
                yield name, cls


@pytest.mark.parametrize("name, trainer", list(_trainers()),
                         ids=lambda x: x if isinstance(x, str) else x.__name__)
def test_every_trainer_default_is_its_methods(name, trainer):
    method = get_method(name)
    params = inspect.signature(trainer.__init__).parameters
    if trainer.config_class is not None:
        # The trainer takes its method's config: one declaration of each option.
        assert trainer.config_class is method.config_class, (name, trainer)
        assert params["config"].default is None
        own = {f.name for f in method.config_class.option_fields() if f.trainer}
        assert not own & set(params), (name, sorted(own & set(params)))
    defaults = {a.name: a.default for a in method.arguments()}
    for param in params.values():
        if param.default is inspect.Parameter.empty or param.name not in defaults:
            continue
        if param.name in RESOLVED:
            continue
        expected = PARSED.get((name, param.name), defaults[param.name])
        assert param.default == expected, (name, param.name, param.default, expected)


@pytest.mark.parametrize("name", ["simcse", "parallel"])
def test_a_trainers_head_and_pooling_are_the_papers_resolved(name):
    method = get_method(name)
    module = importlib.import_module(f"{BUILTIN_METHODS[name]}.trainer")
    trainer = next(cls for _, cls in _trainers() if cls.__module__ == module.__name__)
    params = inspect.signature(trainer.__init__).parameters
    assert params["pooling"].default == method.paper_pooling
    # The config's "auto" head, resolved by the trainer for its pooling.
    assert resolve_training_mlp(method.config_class().mlp, method.paper_pooling) == "train"
    encoder = make_tiny_encoder()
    made = trainer(encoder, encoder.clone("teacher")) if name == "parallel" else trainer(encoder)
    head = made.target_mlp if name == "parallel" else made.mlp
    assert head is not None
    plain = (trainer(encoder, encoder.clone("teacher"), pooling="mean") if name == "parallel"
             else trainer(encoder, pooling="mean"))
    assert (plain.target_mlp if name == "parallel" else plain.mlp) is None
