import numpy as np
import pytest
import tensorflow as tf

from tests.losses import loss_numpy_reference as ref
from keras_sentemb.losses import info_nce_loss

# Small hand-made embeddings: b = 3, d = 4.
ANCHORS = np.array(
    [[1.0, 0.0, 0.5, 0.0], [0.0, 1.0, 0.0, -0.5], [0.3, 0.3, 1.0, 0.2]], np.float32
)
POSITIVES = np.array(
    [[0.9, 0.1, 0.4, 0.0], [0.1, 0.8, -0.2, -0.4], [0.2, 0.5, 0.9, 0.0]], np.float32
)
NEGATIVES = np.array(
    [[0.8, -0.3, 0.6, 0.1], [-0.2, 0.9, 0.3, 0.0], [0.0, -1.0, 0.2, 0.7]], np.float32
)


def _random(shape, seed):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


@pytest.mark.parametrize("temperature", [0.05, 0.5, 1.0])
@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_matches_closed_form(temperature, similarity):
    got = info_nce_loss(
        ANCHORS, POSITIVES, temperature=temperature, similarity=similarity
    )
    want = ref.info_nce(
        ANCHORS, POSITIVES, temperature=temperature, similarity=similarity
    )
    assert got.dtype == tf.float32 and got.shape == ()
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("symmetric", [False, True])
def test_hard_negatives_closed_form(symmetric):
    got = info_nce_loss(
        ANCHORS, POSITIVES, NEGATIVES, temperature=0.1, symmetric=symmetric
    )
    want = ref.info_nce(
        ANCHORS, POSITIVES, NEGATIVES, temperature=0.1, symmetric=symmetric
    )
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_symmetric_closed_form_random():
    a, p = _random([5, 7], 0), _random([5, 7], 1)
    got = info_nce_loss(a, p, temperature=0.2, symmetric=True, reduction="none")
    want = ref.info_nce_per_example(a, p, temperature=0.2, symmetric=True)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("weight", [0.0, 0.7, -1.5])
def test_hard_negative_weight_only_on_own_hard_negative(weight):
    got = info_nce_loss(
        ANCHORS,
        POSITIVES,
        NEGATIVES,
        temperature=0.1,
        hard_negative_weight=weight,
        reduction="none",
    ).numpy()
    want = ref.info_nce_per_example(
        ANCHORS, POSITIVES, NEGATIVES, temperature=0.1, hard_negative_weight=weight
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if weight != 0.0:
        # Adding the weight to the whole hard-negative block would differ.
        b = len(ANCHORS)
        wrong = []
        for i in range(b):
            logits = [ref.cosine(ANCHORS[i], c) / 0.1 for c in POSITIVES]
            logits += [ref.cosine(ANCHORS[i], c) / 0.1 + weight for c in NEGATIVES]
            wrong.append(ref.logsumexp(logits) - logits[i])
        assert not np.allclose(got, wrong, rtol=1e-4)


def test_hard_negative_weight_gradient_touches_only_the_diagonal():
    # d loss / d logits = softmax - onehot; the weight is a logit offset, so its
    # gradient is the softmax mass on the diagonal of the hard-negative block.
    w = tf.Variable(0.3)
    with tf.GradientTape() as tape:
        loss = info_nce_loss(
            ANCHORS, POSITIVES, NEGATIVES, temperature=0.1,
            hard_negative_weight=w, reduction="sum",
        )
    grad = tape.gradient(loss, w).numpy()
    b = len(ANCHORS)
    want = 0.0
    for i in range(b):
        logits = [ref.cosine(ANCHORS[i], c) / 0.1 for c in list(POSITIVES) + list(NEGATIVES)]
        logits[b + i] += 0.3
        want += np.exp(logits[b + i] - ref.logsumexp(logits))
    np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-6)


def test_reductions():
    per = info_nce_loss(ANCHORS, POSITIVES, reduction="none")
    assert per.shape == (3,)
    np.testing.assert_allclose(
        info_nce_loss(ANCHORS, POSITIVES, reduction="sum").numpy(), per.numpy().sum(), rtol=1e-6
    )
    np.testing.assert_allclose(
        info_nce_loss(ANCHORS, POSITIVES).numpy(), per.numpy().mean(), rtol=1e-6
    )


def test_batch_of_one():
    # A single candidate: the loss is exactly 0.
    np.testing.assert_allclose(info_nce_loss(ANCHORS[:1], POSITIVES[:1]).numpy(), 0.0, atol=1e-7)
    got = info_nce_loss(ANCHORS[:1], POSITIVES[:1], NEGATIVES[:1], hard_negative_weight=0.2)
    want = ref.info_nce(ANCHORS[:1], POSITIVES[:1], NEGATIVES[:1], hard_negative_weight=0.2)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_low_precision_inputs_give_float32_loss():
    got = info_nce_loss(tf.cast(ANCHORS, tf.bfloat16), tf.cast(POSITIVES, tf.float16))
    assert got.dtype == tf.float32


def test_unknown_batch_size_in_tf_function():
    spec = tf.TensorSpec([None, None], tf.float32)

    @tf.function(input_signature=[spec, spec, spec])
    def fn(a, p, n):
        return info_nce_loss(a, p, n, temperature=0.1, hard_negative_weight=0.5, symmetric=True)

    want = ref.info_nce(
        ANCHORS, POSITIVES, NEGATIVES, temperature=0.1, hard_negative_weight=0.5, symmetric=True
    )
    np.testing.assert_allclose(fn(ANCHORS, POSITIVES, NEGATIVES).numpy(), want, rtol=1e-5, atol=1e-6)


def test_learnable_temperature():
    t = tf.Variable(0.1)
    with tf.GradientTape() as tape:
        loss = info_nce_loss(ANCHORS, POSITIVES, temperature=t)
    np.testing.assert_allclose(loss.numpy(), ref.info_nce(ANCHORS, POSITIVES, temperature=0.1), rtol=1e-5, atol=1e-6)
    assert np.isfinite(tape.gradient(loss, t).numpy())


@pytest.mark.parametrize("temperature", [0.0, -0.05, float("inf"), float("nan"), True])
def test_temperature_validation(temperature):
    with pytest.raises(ValueError, match="temperature"):
        info_nce_loss(ANCHORS, POSITIVES, temperature=temperature)


def test_shape_mismatch_errors():
    with pytest.raises(ValueError, match=r"positives.*same shape.*\(3, 4\).*\(2, 4\)"):
        info_nce_loss(ANCHORS, POSITIVES[:2])
    with pytest.raises(ValueError, match=r"hard_negatives.*same shape.*\(3, 4\).*\(3, 2\)"):
        info_nce_loss(ANCHORS, POSITIVES, NEGATIVES[:, :2])
    with pytest.raises(ValueError, match=r"anchors.*2D.*\(4,\)"):
        info_nce_loss(ANCHORS[0], POSITIVES[0])


def test_argument_errors():
    with pytest.raises(ValueError, match="similarity.*'euclidean'"):
        info_nce_loss(ANCHORS, POSITIVES, similarity="euclidean")
    with pytest.raises(ValueError, match="reduction.*'avg'"):
        info_nce_loss(ANCHORS, POSITIVES, reduction="avg")
    with pytest.raises(ValueError, match="hard_negatives` is None.*0.5"):
        info_nce_loss(ANCHORS, POSITIVES, hard_negative_weight=0.5)
