"""Every trainer is a registered Keras object whose config round-trips.

`get_config()` returns every constructor argument, the encoders (and BERT-flow's
flow) serialized; `from_config` rebuilds an equivalent trainer (same config,
same weights' shapes, same loss on the same batch once the weights are copied
over).
"""

import importlib
import inspect
import pkgutil

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_sentemb.trainers as package
from keras_sentemb.methods.registry import BUILTIN_METHODS
from keras_sentemb.models.glow_flow import GlowFlow
from keras_sentemb.trainers.base_trainer import BaseTrainer
from keras_sentemb.methods.bert_flow.trainer import BertFlow
from keras_sentemb.methods.consert.trainer import ConSERT
from keras_sentemb.methods.contrastive_tension.trainer import ContrastiveTension
from keras_sentemb.methods.masked_language_model.trainer import MaskedLanguageModel
from keras_sentemb.methods.multitask.trainer import MultitaskModel
from keras_sentemb.methods.parallel.trainer import ParallelContrastive
from keras_sentemb.methods.self_guided.trainer import SelfGuided
from keras_sentemb.methods.simcse.trainer import SimCSE
from keras_sentemb.methods.sts_regression.trainer import STSRegression
from tests.conftest import make_tiny_encoder

SENTS = ["a man plays the guitar", "the cat sits on the mat", "hello world", "a dog runs"]


def _packed(encoder):
    return encoder.preprocess(tf.constant(SENTS), 16)


def _cases():
    def ct():
        return ContrastiveTension(make_tiny_encoder(), negatives="in_batch", logit_scale=10.0,
                                  dropout=True, pooling="max")

    def simcse():
        return SimCSE(make_tiny_encoder(), mode="sup", temperature=0.1, pooling="cls",
                      mlp="train", hard_negative_weight=0.5, mini_batch_size=2)

    def consert():
        return ConSERT(make_tiny_encoder(), views=("token_cutoff", "dropout"),
                       view_rates=(0.1, 0.3), temperature=0.2, mode="joint", alpha=0.3,
                       num_labels=2, seed=4)

    def sg():
        return SelfGuided(make_tiny_encoder(), loss="opt2", temperature=0.05,
                          view_pooling="mean", min_layer=1, projection_dim=8, seed=2,
                          pooling="mean")

    def sts():
        return STSRegression(make_tiny_encoder(), pooling="mean_last2")

    def parallel():
        student = make_tiny_encoder()
        return ParallelContrastive(student, student.clone("teacher"), queue_size=6,
                                   temperature=0.05, pooling="mean", mlp="none")

    def mlm():
        return MaskedLanguageModel(make_tiny_encoder(), mask_rate=0.3, seed=5)

    def multitask():
        return MultitaskModel(make_tiny_encoder(num_layers=1), head_sharing="none",
                              hidden_dim=8, dropout=0.2, num_classes=3, pooling="mean",
                              pcgrad=True, pcgrad_shuffle=False, fusion=True,
                              fusion_temperature=0.1, seed=3, name="mt")

    def flow():
        glow = GlowFlow(32, levels=2, depth=1, coupling_width=8, coupling="additive",
                        permutation="reverse", pooling="mean", seed=1)
        return BertFlow(glow, name="flow_trainer")

    return {"ct": ct, "simcse": simcse, "consert": consert, "sg": sg, "sts": sts,
            "parallel": parallel, "mlm": mlm, "multitask": multitask, "flow": flow}


CASES = _cases()


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
    for module in BUILTIN_METHODS.values():  # each method's trainer lives beside it
        try:
            importlib.import_module(f"{module}.trainer")
        except ModuleNotFoundError:
            pass  # a method without a trainer (whitening)
    made = {type(make()) for make in CASES.values()}
    assert _trainer_classes() <= made, _trainer_classes() - made


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_round_trip(name):
    trainer = CASES[name]()
    config = trainer.get_config()
    # Every constructor argument, the base trainer's included.
    arguments = {p for cls in type(trainer).__mro__ if issubclass(cls, BaseTrainer)
                 for p in inspect.signature(cls.__init__).parameters} - {"self", "kwargs"}
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
    trainer = CASES["sts"]()
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
    trainer = CASES["mlm"]()
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
    trainer = CASES["flow"]()
    restored = BertFlow.from_config(trainer.get_config())
    restored.set_weights(trainer.get_weights())
    vectors = {"vector": tf.random.stateless_normal((8, 32), seed=[1, 2])}
    np.testing.assert_allclose(float(restored.compute_loss_terms(vectors).loss),
                               float(trainer.compute_loss_terms(vectors).loss), rtol=1e-6)
