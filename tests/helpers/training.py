"""Trainers and callbacks the training tests share: a quadratic toy, GradCache cases, a step log."""

import keras
import numpy as np
import tensorflow as tf

from keras_sentemb.losses.loss_output import LossOutput
from keras_sentemb.trainers.base_trainer import BaseTrainer
from tests.conftest import make_tiny_encoder
from tests.trainers.grad_cache_reference import largest_gradient

# Rows of the global batches; batch 2 (rows 4-7) has a NaN in its last row only,
# so under two replicas only replica 1's shard is non-finite.
QUADRATIC_DATA = np.arange(48, dtype=np.float32).reshape(12, 4) / 10.0
QUADRATIC_DATA[7, 0] = np.nan


class Quadratic(BaseTrainer):
    """A linear 'encoder' with a per-replica (non-gathered) loss."""

    def __init__(self, dtype=None):
        super().__init__(
            keras.layers.Dense(3, kernel_initializer="ones", dtype=dtype, name="dense")
        )
        self.encoder.build((None, 4))

    def compute_loss_terms(self, data, training=True):
        return LossOutput(tf.reduce_mean(tf.square(tf.cast(self.encoder(data), tf.float32) - 1.0)))


class StepRecorder(keras.callbacks.Callback):
    """Records the optimizer's step count at the start of every batch, in `seen`."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def on_train_batch_begin(self, batch, logs=None):
        self.seen.append(int(self.model.optimizer.iterations))


GRAD_CACHE_SENTENCES = [
    "a man plays the guitar", "the cat sits on the mat", "hello world",
    "a dog runs in the park", "the woman plays piano", "a cat", "the man sits",
    "world", "a woman runs", "the dog sits on the mat",
]


def make_grad_cache_trainer(kind, size):
    """`(trainer, batch)`: a compiled trainer of `kind` with GradCache chunks of `size` rows."""
    from keras_sentemb.methods.consert.trainer import ConSERT
    from keras_sentemb.methods.contrastive_tension.trainer import ContrastiveTension
    from keras_sentemb.methods.parallel.trainer import ParallelContrastive
    from keras_sentemb.methods.simcse.trainer import SimCSE

    def packed(encoder, sentences):
        return encoder.preprocess(tf.constant(sentences))

    sentences = GRAD_CACHE_SENTENCES
    enc = make_tiny_encoder()
    if kind == "simcse_unsup":
        trainer = SimCSE(enc, pooling="cls", mlp="train", mini_batch_size=size)
        data = {"sentence": packed(enc, sentences[:8])}
    elif kind == "simcse_sup":
        trainer = SimCSE(enc, mode="sup", pooling="mean", mlp="none",
                         hard_negative_weight=0.5, mini_batch_size=size)
        data = {k: packed(enc, sentences[i:i + 8]) for i, k in
                enumerate(("sent0", "sent1", "hard_neg"))}
    elif kind == "consert":
        trainer = ConSERT(enc, views=("token_cutoff", "feature_cutoff"),
                          encoder_dropout=True, seed=3, mini_batch_size=size)
        data = {"sentence": packed(enc, sentences[:8])}
    elif kind == "ct_in_batch":
        trainer = ContrastiveTension(enc, negatives="in_batch", dropout=True,
                                     mini_batch_size=size)
        data = {"left": packed(enc, sentences[:8]), "right": packed(enc, sentences[:8])}
    elif kind == "parallel":
        student = make_tiny_encoder(num_layers=1)
        trainer = ParallelContrastive(student, enc, mode="dual", queue_size=6,
                                      mini_batch_size=size)
        trainer.queue.enqueue(tf.math.l2_normalize(tf.random.normal([4, 32], seed=1), -1))
        data = {"source": packed(enc, sentences[:8]), "target": packed(student, sentences[2:10])}
    else:
        raise ValueError(kind)
    trainer.compile(optimizer=keras.optimizers.SGD(0.1))
    return trainer, data


def assert_sgd_step(before, variables, grads, lr, rtol=1e-5):
    """Each weight moved by `-lr * grad`, within `rtol` of the largest step.

    The gradient's scale is the model's, not the test's; the weights' own
    rounding (a few float32 ulps of each weight) is allowed on top.
    """
    step_scale = lr * largest_gradient(grads)
    worst = 0.0
    for b, v, g in zip(before, variables, grads):
        expected = b if g is None else b - lr * tf.convert_to_tensor(g).numpy()
        rounding = 4 * np.finfo(np.float32).eps * np.abs(b)
        worst = max(worst, float(np.max((np.abs(np.asarray(v) - expected) - rounding))))
    assert worst <= rtol * step_scale, (worst, step_scale)
    return worst / step_scale
