"""GradCache (`mini_batch_size`): the same loss and gradients as one full-batch tape.

Dropout is ON in every equality check: GradCache must replay each chunk's
masks in its second pass. The reference (`grad_cache_reference.py`) runs the
same chunks under one tape; a reference with other masks must differ (the
check can fail), and with dropout off GradCache equals the plain, unchunked
`train_step` computation exactly.
"""

import dataclasses
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf

from keras_sentemb.methods.consert.trainer import ConSERT
from keras_sentemb.methods.self_guided.trainer import SelfGuided
from keras_sentemb.methods.simcse.trainer import SimCSE
from tests.conftest import REPO, make_tiny_encoder
from tests.helpers.training import assert_sgd_step, make_grad_cache_trainer
from tests.trainers.grad_cache_reference import largest_gradient
from tests.trainers.grad_cache_reference import max_gradient_difference
from tests.trainers.grad_cache_reference import reference_loss_and_gradients


KINDS = ["simcse_unsup", "simcse_sup", "consert", "ct_in_batch", "parallel"]


@pytest.mark.parametrize("size", [2, 3])
@pytest.mark.parametrize("kind", KINDS)
def test_loss_and_gradients_equal_one_tape_over_the_batch(kind, size):
    trainer, data = make_grad_cache_trainer(kind, size)
    ref_loss, ref_grads = reference_loss_and_gradients(trainer, data, size)
    trainer._reseed()
    out, grads = trainer.grad_cache_gradients(data)
    assert float(out.loss) == pytest.approx(float(ref_loss), rel=1e-5)
    scale = largest_gradient(ref_grads)
    assert scale > 0
    assert max_gradient_difference(grads, ref_grads) <= 1e-5 * max(1.0, scale)
    # Every weight the reference moves, GradCache moves (and no other).
    assert [g is None for g in grads] == [g is None for g in ref_grads]


def test_other_masks_give_other_gradients():
    # The check above can fail: the same reference with the chunks' draws
    # shifted (masks not replayed) is far from GradCache's gradients.
    trainer, data = make_grad_cache_trainer("simcse_unsup", 2)
    _, shifted = reference_loss_and_gradients(trainer, data, 2, chunk_ids=[1, 2, 3, 4])
    trainer._reseed()
    _, grads = trainer.grad_cache_gradients(data)
    assert max_gradient_difference(grads, shifted) > 1e-2 * largest_gradient(shifted)


def test_without_dropout_grad_cache_equals_the_plain_step():
    # No random draws: chunking changes nothing, so GradCache equals the
    # unchunked computation of the plain train_step.
    trainer, data = make_grad_cache_trainer("ct_in_batch", 3)
    trainer.config = dataclasses.replace(trainer.config, dropout=False)
    trainer._reseed()
    with tf.GradientTape() as tape:
        plain = trainer.compute_loss_terms(data, training=True).loss
    plain_grads = tape.gradient(plain, trainer.trainable_variables)
    trainer._reseed()
    out, grads = trainer.grad_cache_gradients(data)
    assert float(out.loss) == pytest.approx(float(plain), rel=1e-5)
    assert max_gradient_difference(grads, plain_grads) <= 1e-5 * largest_gradient(plain_grads)


def test_fit_with_grad_cache_traces_and_equals_the_reference_update():
    # Inside Keras fit (a tf.function, the while loops compiled): one SGD step
    # moves every weight by -lr * the reference gradient.
    trainer, data = make_grad_cache_trainer("simcse_unsup", 3)
    _, ref_grads = reference_loss_and_gradients(trainer, data, 3)
    before = [v.numpy() for v in trainer.trainable_variables]
    ds = tf.data.Dataset.from_tensors(data).repeat()
    history = trainer.fit(ds, steps_per_epoch=1, epochs=1, verbose=0)
    assert history.history["nonfinite"] == [0.0]
    assert_sgd_step(before, trainer.trainable_variables, ref_grads, 0.1)


def test_queue_and_metrics_follow_the_grad_cache_step():
    trainer, data = make_grad_cache_trainer("parallel", 3)
    trainer.fit(tf.data.Dataset.from_tensors(data).repeat(), steps_per_epoch=2, epochs=1, verbose=0)
    assert int(trainer.queue.count.numpy()) == 6  # 4 + 8 + 8 rows, capped at 6


def test_config_round_trip_and_unsupported_trainers():
    trainer, _ = make_grad_cache_trainer("ct_in_batch", 4)
    config = trainer.get_config()
    assert config["mini_batch_size"] == 4
    assert type(trainer).from_config(config).mini_batch_size == 4
    with pytest.raises(ValueError, match="mini_batch_size"):
        SimCSE(make_tiny_encoder(), mini_batch_size=0)
    sup = ConSERT(make_tiny_encoder(), mode="sup", views=("none", "none"), mini_batch_size=2)
    with pytest.raises(ValueError, match="ConSERT mode='sup'"):
        sup.compile(optimizer="sgd")
    sg = SelfGuided(make_tiny_encoder(), projection_dim=8, mini_batch_size=2)
    with pytest.raises(ValueError, match="SelfGuided does not split its loss"):
        sg.compile(optimizer="sgd")


MIRRORED = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {repo!r})
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import numpy as np, keras
    from tests.helpers.training import assert_sgd_step, make_grad_cache_trainer
    from tests.trainers.grad_cache_reference import reference_loss_and_gradients
    kind = sys.argv[1]
    # Single-device reference: the same weights and seeds; each replica
    # numbers its chunks from 0, so the global batch's chunks are seeded
    # [0, 1, 0, 1] (4 local rows per replica, chunks of 2).
    ref, data = make_grad_cache_trainer(kind, 2)
    ref_loss, ref_grads = reference_loss_and_gradients(ref, data, 2, chunk_ids=[0, 1, 0, 1])
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        trainer, _ = make_grad_cache_trainer(kind, 2)
        trainer.compile(optimizer=keras.optimizers.SGD(1.0))
    for a, b in zip(trainer.variables, ref.variables):
        a.assign(b)
    before = [v.numpy() for v in trainer.trainable_variables]
    ds = tf.data.Dataset.from_tensors(data).repeat()
    h = trainer.fit(ds, steps_per_epoch=1, epochs=1, verbose=0)
    loss = h.history["loss"][0]
    # SGD(1.0): each step is the all-reduced gradient.
    worst = assert_sgd_step(before, trainer.trainable_variables, ref_grads, 1.0)
    print(kind, loss, float(ref_loss), worst)
    assert abs(loss - float(ref_loss)) < 1e-5 * max(1, abs(float(ref_loss))), (loss, float(ref_loss))
    print("OK")
    """
)


@pytest.mark.parametrize("kind", ["simcse_unsup", "ct_in_batch", "parallel"])
def test_mirrored_strategy_grad_cache_equals_single_device_reference(tmp_path, kind):
    script = tmp_path / "mirrored_grad_cache.py"
    script.write_text(MIRRORED.format(repo=str(REPO)))
    result = subprocess.run(
        [sys.executable, str(script), kind], capture_output=True, text=True, timeout=600,
        cwd=str(REPO),
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "OK" in result.stdout
