"""Every trainer is a registered Keras object whose config round-trips.

`get_config()` returns every constructor argument, the encoders serialized;
`from_config` rebuilds an equivalent trainer (same config, same loss on the
same batch once the weights are copied over).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.trainers.consert import ConSERT
from keras_sentemb.trainers.contrastive_tension import ContrastiveTension
from keras_sentemb.trainers.parallel import ParallelContrastive
from keras_sentemb.trainers.self_guided import SelfGuided
from keras_sentemb.trainers.simcse import SimCSE
from keras_sentemb.trainers.sts_regression import STSRegression
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
                      mlp="train", hard_negative_weight=0.5)

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

    return {"ct": ct, "simcse": simcse, "consert": consert, "sg": sg, "sts": sts,
            "parallel": parallel}


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_round_trip(name):
    trainer = CASES[name]()
    config = trainer.get_config()
    assert config["encoder"]["class_name"] == "SentenceEncoder"
    restored = type(trainer).from_config(config)
    assert restored.get_config() == config
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
        float(trainer.compute_contrastive_loss(batch, training=False)),
        float(restored.compute_contrastive_loss(batch, training=False)), rtol=1e-6)
