"""The losses that used to live in trainers, against closed forms."""

import math

import numpy as np
import tensorflow as tf

from keras_sentemb.losses import flow_nll_loss
from keras_sentemb.losses import masked_token_loss
from keras_sentemb.losses import weight_distance_regularizer


def test_masked_token_loss_is_the_mean_cross_entropy_of_real_positions():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5)).astype("float32")
    labels = np.array([[1, 4, 0], [2, 2, 3]])
    weights = np.array([[1, 1, 0], [1, 0, 0]], "float32")
    log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_softmax, labels[..., None], -1)[..., 0]
    expected = -(picked * weights).sum() / weights.sum()
    hits = (logits.argmax(-1) == labels) * weights
    loss, accuracy = masked_token_loss(logits, labels, weights)
    assert abs(float(loss) - expected) <= 1e-6 * abs(expected)
    assert float(accuracy) == hits.sum() / weights.sum()
    loss, accuracy = masked_token_loss(logits, labels, np.zeros_like(weights))
    assert (float(loss), float(accuracy)) == (0.0, 0.0)


def test_flow_nll_is_per_dimension_in_nats_and_bits():
    nll, bits = flow_nll_loss(tf.constant([-3.0, -5.0, -7.0]), input_dim=4)
    assert float(nll) == 1.25
    assert abs(float(bits) - 1.25 / math.log(2.0)) < 1e-6


def test_weight_distance_skips_frozen_tuned_weights():
    a = tf.Variable([[1.0, -2.0]])
    b = tf.Variable([3.0], trainable=False)
    frozen_a = tf.Variable([[0.5, 0.0]], trainable=False)
    frozen_b = tf.Variable([0.0], trainable=False)
    assert float(weight_distance_regularizer([(a, frozen_a), (b, frozen_b)])) == 0.25 + 4.0
    assert float(weight_distance_regularizer([(b, frozen_b)])) == 0.0
