"""Masked multitask head losses: closed forms, parity with the unmasked losses."""

import math

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.losses.classification import binary_classification_loss
from keras_sentemb.losses.classification import softmax_classification_loss
from keras_sentemb.losses.multitask import masked_mean
from keras_sentemb.losses.multitask import paraphrase_classification_loss
from keras_sentemb.losses.multitask import sentiment_classification_loss
from keras_sentemb.losses.multitask import similarity_regression_loss
from keras_sentemb.losses.regression import cosine_mse_loss


def test_masked_mean_closed_form_and_empty():
    assert float(masked_mean([1.0, 2.0, 6.0], [1.0, 0.0, 1.0])) == 3.5
    assert float(masked_mean([1.0, 2.0, 6.0])) == 3.0
    # Masked-out NaN / inf rows cannot leak; nothing counted -> 0, not NaN.
    assert float(masked_mean([np.nan, 4.0], [0.0, 1.0])) == 4.0
    assert float(masked_mean([np.inf, np.nan], [0.0, 0.0])) == 0.0
    assert float(masked_mean(tf.zeros([0]), tf.zeros([0]))) == 0.0
    assert float(masked_mean(tf.zeros([0]))) == 0.0


def test_masked_mean_gradient_ignores_masked_rows():
    x = tf.Variable([1.0, 2.0, 3.0, 4.0])
    with tf.GradientTape() as tape:
        loss = masked_mean(tf.square(x), [1.0, 0.0, 1.0, 0.0])
    # d/dx_i (x_1^2 + x_3^2) / 2 = x_i on counted rows, 0 elsewhere
    np.testing.assert_allclose(tape.gradient(loss, x).numpy(), [1.0, 0.0, 3.0, 0.0])
    with tf.GradientTape() as tape:
        loss = masked_mean(tf.square(x), tf.zeros([4]))
    np.testing.assert_array_equal(tape.gradient(loss, x).numpy(), np.zeros(4))


def test_sentiment_loss_closed_form():
    logits = [[0.0, 0.0], [2.0, 0.0], [9.0, 0.0]]
    loss, acc = sentiment_classification_loss(logits, [0, 1, 1], mask=[1, 1, 0])
    expected = (math.log(2) + 2 + math.log(1 + math.exp(-2))) / 2
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    # row 0: a tie, argmax picks class 0 = its label (hit); row 1 predicts 0 != 1
    assert float(acc) == 0.5
    loss, acc = sentiment_classification_loss(logits[:2], [0, 1])
    ref_loss, ref_acc = softmax_classification_loss(logits[:2], [0, 1])
    assert float(loss) == pytest.approx(float(ref_loss), rel=1e-6)
    assert float(acc) == float(ref_acc)
    loss, acc = sentiment_classification_loss(logits, [0, 1, 1], mask=[0, 0, 0])
    assert float(loss) == 0.0 and float(acc) == 0.0


def test_paraphrase_loss_closed_form():
    value = paraphrase_classification_loss([0.0, 3.0, 5.0], [1, 1, 0], [1, 1, 0])
    assert float(value) == pytest.approx((math.log(2) + math.log(1 + math.exp(-3))) / 2, rel=1e-6)
    ref = binary_classification_loss([0.0, 3.0, -1.0], [1.0, 1.0, 0.0])
    assert float(paraphrase_classification_loss([0.0, 3.0, -1.0], [1, 1, 0])) == pytest.approx(
        float(ref), rel=1e-6)


def test_similarity_loss_closed_form():
    u = tf.constant([[1.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    v = tf.constant([[0.0, 2.0], [2.0, 2.0], [1.0, 0.0]])
    # cos = 0, 1, 1; targets 0.5, 1, 0 -> ((0 - .5)^2 + 0) / 2, third row masked
    assert float(similarity_regression_loss(u, v, [2.5, 5.0, 0.0], [1, 1, 0])) == pytest.approx(0.125)
    # unmasked: + (1 - 0)^2 -> 1.25 / 3
    assert float(similarity_regression_loss(u, v, [2.5, 5.0, 0.0])) == pytest.approx(1.25 / 3)
    ref = cosine_mse_loss(u, v, [0.5, 1.0, 0.0])
    assert float(similarity_regression_loss(u, v, [2.5, 5.0, 0.0])) == pytest.approx(float(ref))
    assert float(similarity_regression_loss(u, v, [1.0, 2.0, 0.0], max_score=2.0)) == pytest.approx(
        (0.25 + 0.0 + 1.0) / 3)
    with pytest.raises(ValueError, match="max_score"):
        similarity_regression_loss(u, v, [1.0, 1.0, 1.0], max_score=0)
