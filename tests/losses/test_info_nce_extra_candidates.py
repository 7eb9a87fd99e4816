"""`info_nce_loss` with a memory queue (`extra_candidates`) and pre-gathered positives (`label_offset`)."""

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.losses import info_nce_loss

RNG = np.random.default_rng(3)
ANCHORS = RNG.normal(size=(4, 6)).astype("float32")
POSITIVES = (ANCHORS + 0.5 * RNG.normal(size=(4, 6))).astype("float32")
QUEUE = RNG.normal(size=(5, 6)).astype("float32")


def _unit(x):
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def numpy_info_nce(anchors, candidates, labels, temperature):
    """Per-anchor -log softmax(cos(a_i, c) / T)[labels_i], float64."""
    logits = _unit(anchors) @ _unit(candidates).T / temperature
    m = logits.max(axis=1, keepdims=True)
    log_z = m[:, 0] + np.log(np.exp(logits - m).sum(axis=1))
    return log_z - logits[np.arange(len(anchors)), labels]


@pytest.mark.parametrize("temperature", [0.05, 0.5])
def test_extra_candidates_are_negatives_of_every_anchor(temperature):
    got = info_nce_loss(ANCHORS, POSITIVES, temperature=temperature,
                        extra_candidates=QUEUE, reduction="none").numpy()
    want = numpy_info_nce(ANCHORS, np.concatenate([POSITIVES, QUEUE]), np.arange(4), temperature)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    without = numpy_info_nce(ANCHORS, POSITIVES, np.arange(4), temperature)
    assert np.all(got > without)  # more negatives, larger loss for every anchor


def test_extra_candidates_come_after_the_hard_negatives():
    hard = RNG.normal(size=(4, 6)).astype("float32")
    got = info_nce_loss(ANCHORS, POSITIVES, hard_negatives=hard, temperature=0.1,
                        hard_negative_weight=0.4, extra_candidates=QUEUE, reduction="none")
    candidates = np.concatenate([POSITIVES, hard, QUEUE])
    logits = _unit(ANCHORS) @ _unit(candidates).T / 0.1
    logits[np.arange(4), 4 + np.arange(4)] += 0.4  # own hard negative only, not the queue
    want = np.log(np.exp(logits).sum(1)) - logits[np.arange(4), np.arange(4)]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_label_offset_picks_the_positive_row_of_pre_gathered_positives():
    # Two "replicas" of 2 anchors each; positives already gathered: [4, d].
    queue = QUEUE[:3]
    for replica in (0, 1):
        local = ANCHORS[2 * replica: 2 * replica + 2]
        got = info_nce_loss(local, POSITIVES, temperature=0.1, gather=False,
                            label_offset=tf.constant(2 * replica), extra_candidates=queue,
                            reduction="none").numpy()
        want = numpy_info_nce(local, np.concatenate([POSITIVES, queue]),
                              2 * replica + np.arange(2), 0.1)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # The mean of the replicas' means is the one-device loss on the global batch.
    per_replica = [
        float(info_nce_loss(ANCHORS[2 * r: 2 * r + 2], POSITIVES, temperature=0.1,
                            gather=False, label_offset=2 * r, extra_candidates=queue))
        for r in (0, 1)
    ]
    one_device = float(info_nce_loss(ANCHORS, POSITIVES, temperature=0.1, extra_candidates=queue))
    np.testing.assert_allclose(np.mean(per_replica), one_device, rtol=1e-5)


def test_label_offset_zero_and_empty_queue_are_the_plain_loss():
    plain = float(info_nce_loss(ANCHORS, POSITIVES, temperature=0.2))
    np.testing.assert_allclose(
        float(info_nce_loss(ANCHORS, POSITIVES, temperature=0.2, gather=False, label_offset=0)),
        plain, rtol=1e-6)
    empty = np.zeros((0, 6), "float32")  # a memory queue before its first enqueue
    np.testing.assert_allclose(
        float(info_nce_loss(ANCHORS, POSITIVES, temperature=0.2, extra_candidates=empty)),
        plain, rtol=1e-6)


def test_label_offset_in_tf_function_with_unknown_shapes():
    spec = tf.TensorSpec([None, None], tf.float32)

    @tf.function(input_signature=[spec, spec, spec, tf.TensorSpec([], tf.int32)])
    def fn(a, p, q, offset):
        return info_nce_loss(a, p, temperature=0.1, gather=False, label_offset=offset,
                             extra_candidates=q, reduction="none")

    got = fn(ANCHORS[2:], POSITIVES, QUEUE, tf.constant(2)).numpy()
    want = numpy_info_nce(ANCHORS[2:], np.concatenate([POSITIVES, QUEUE]), [2, 3], 0.1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_label_offset_needs_gather_false_and_no_hard_negatives():
    with pytest.raises(ValueError, match="label_offset"):
        info_nce_loss(ANCHORS[:2], POSITIVES, label_offset=2)  # gather=True
    with pytest.raises(ValueError, match="label_offset"):
        info_nce_loss(ANCHORS, POSITIVES, hard_negatives=POSITIVES, gather=False, label_offset=0)
    with pytest.raises(ValueError, match="label_offset"):
        info_nce_loss(ANCHORS, POSITIVES, symmetric=True, gather=False, label_offset=0)
    with pytest.raises(ValueError, match="extra_candidates.*2D"):
        info_nce_loss(ANCHORS, POSITIVES, extra_candidates=QUEUE[0])
