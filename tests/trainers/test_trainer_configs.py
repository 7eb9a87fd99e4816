"""Every trainer is a registered Keras object whose config round-trips.

`get_config()` returns every constructor argument, the encoders (and BERT-flow's
flow) serialized; `from_config` rebuilds an equivalent trainer (same config,
same weights' shapes, same loss on the same batch once the weights are copied
over).
"""

import importlib
import json
import pkgutil

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_sentemb.trainers as package
from keras_sentemb.methods.bert_flow.trainer import BertFlow
from keras_sentemb.methods.masked_language_model.trainer import MaskedLanguageModel
from keras_sentemb.methods.registry import BUILTIN_METHODS
from keras_sentemb.methods.sts_regression.trainer import STSRegression
from keras_sentemb.trainers.base_trainer import BaseTrainer
from tests.conftest import make_tiny_encoder
from tests.helpers.methods import make_method_trainer
from tests.helpers.methods import method_trainers
from tests.helpers.methods import trainer_arguments

SENTS = ["a man plays the guitar", "the cat sits on the mat", "hello world", "a dog runs"]


def _packed(encoder):
    return encoder.preprocess(tf.constant(SENTS), 16)


# Every registered method with a trainer: its folder's `testing.py` builds one with options
# other than the defaults (`MethodTest.make_trainer`), else the defaults are used.
TRAINED = [name for name in BUILTIN_METHODS if method_trainers(name)]


def _make(name):
    return make_method_trainer(name, make_tiny_encoder())


def _trainer_classes(base=BaseTrainer):
    found = set()
    for sub in base.__subclasses__():
        if sub.__module__.startswith(("keras_sentemb.trainers.", "keras_sentemb.methods.")):
            found.add(sub)
        found |= _trainer_classes(sub)
    return found


def test_every_trainer_has_a_case():
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")
    for name in BUILTIN_METHODS:  # each method's trainer lives beside it
        method_trainers(name)
    made = {type(_make(name)) for name in TRAINED}
    assert _trainer_classes() <= made, _trainer_classes() - made


@pytest.mark.parametrize("name", TRAINED)
def test_config_round_trip(name):
    trainer = _make(name)
    config = trainer.get_config()
    arguments = trainer_arguments(trainer)  # every constructor argument, the base's included
    if trainer.config is None:
        arguments.discard("config")  # a trainer that takes no method options
    else:  # the options it keeps, from its method's config
        assert set(config["config"]) == set(type(trainer).config_class.trainer_options())
        json.dumps(config["config"])
    if isinstance(trainer, BertFlow):
        arguments.discard("encoder")  # BERT-flow trains the flow alone
        assert config["flow"]["class_name"] == "GlowFlow"
    else:
        assert config["encoder"]["class_name"] == "SentenceEncoder"
    assert arguments | {"name"} == set(config)
    restored = type(trainer).from_config(config)
    assert restored.get_config() == config
    assert [v.shape for v in restored.weights] == [v.shape for v in trainer.weights]
    serialized = keras.saving.serialize_keras_object(trainer)
    assert serialized["registered_name"].startswith("keras_sentemb>")
    again = keras.saving.deserialize_keras_object(serialized)
    assert type(again) is type(trainer) and again.get_config() == config


def test_restored_trainer_computes_the_same_loss():
    trainer = STSRegression(make_tiny_encoder(), pooling="mean_last2")
    restored = STSRegression.from_config(trainer.get_config())
    # The tokenizer's vocabulary is an asset (not part of the config); share it.
    restored.encoder.tokenizer = trainer.encoder.tokenizer
    restored.set_weights(trainer.get_weights())
    batch = {"sentence1": _packed(trainer.encoder),
             "sentence2": trainer.encoder.preprocess(tf.constant(SENTS[::-1]), 16),
             "label": tf.constant([0.1, 0.5, 0.9, 0.3])}
    np.testing.assert_allclose(
        float(trainer.compute_loss_terms(batch, training=False).loss),
        float(restored.compute_loss_terms(batch, training=False).loss), rtol=1e-6)


def test_masked_language_model_reloads_from_a_keras_archive(tmp_path):
    # The [MASK] / special ids come from the tokenizer, whose vocabulary the
    # archive restores after `from_config` built the trainer.
    trainer = MaskedLanguageModel(make_tiny_encoder(), mask_rate=0.3, seed=5)
    trainer.compile(optimizer="adam")
    trainer.save(tmp_path / "mlm.keras")
    loaded = keras.saving.load_model(tmp_path / "mlm.keras")
    assert type(loaded) is MaskedLanguageModel and loaded.get_config() == trainer.get_config()
    assert loaded.mask_token_id == trainer.mask_token_id == 4
    assert loaded.special_ids == trainer.special_ids == [0, 2, 3]
    loaded.compile(optimizer="adam")
    batch = {"sentence": _packed(trainer.encoder)}
    np.testing.assert_allclose(
        float(loaded.compute_loss_terms(batch, training=False).loss),
        float(trainer.compute_loss_terms(batch, training=False).loss), rtol=1e-6)


def test_restored_flow_trainer_computes_the_same_loss():
    trainer = make_method_trainer("flow", make_tiny_encoder())
    restored = BertFlow.from_config(trainer.get_config())
    restored.set_weights(trainer.get_weights())
    vectors = {"vector": tf.random.stateless_normal((8, 32), seed=[1, 2])}
    np.testing.assert_allclose(float(restored.compute_loss_terms(vectors).loss),
                               float(trainer.compute_loss_terms(vectors).loss), rtol=1e-6)
