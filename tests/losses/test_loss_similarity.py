import numpy as np
import pytest
import tensorflow as tf

from tests.losses import loss_numpy_reference as ref
from keras_sentemb.losses import cosine_similarity_matrix
from keras_sentemb.losses import dot_similarity_matrix
from keras_sentemb.losses import l2_normalize

A = np.array([[1.0, 0.0, 2.0], [0.5, -1.0, 0.0]], np.float32)
B = np.array([[3.0, 1.0, 0.0], [0.0, 0.0, -2.0], [1.0, 1.0, 1.0]], np.float32)


def test_cosine_matches_closed_form():
    out = cosine_similarity_matrix(A, B).numpy()
    assert out.shape == (2, 3) and out.dtype == np.float32
    for i in range(2):
        for j in range(3):
            np.testing.assert_allclose(out[i, j], ref.cosine(A[i], B[j]), rtol=1e-6)


def test_dot_matches_closed_form():
    out = dot_similarity_matrix(A, B).numpy()
    for i in range(2):
        for j in range(3):
            np.testing.assert_allclose(out[i, j], ref.dot(A[i], B[j]), rtol=1e-6)


def test_float32_output_for_low_precision_inputs():
    for dtype in (tf.float16, tf.bfloat16):
        out = cosine_similarity_matrix(tf.cast(A, dtype), tf.cast(B, dtype))
        assert out.dtype == tf.float32


def test_zero_vector_is_safe():
    a = tf.Variable([[0.0, 0.0, 0.0], [1.0, 2.0, 2.0]])
    with tf.GradientTape() as tape:
        sims = cosine_similarity_matrix(a, B)
        total = tf.reduce_sum(sims)
    np.testing.assert_allclose(sims.numpy()[0], 0.0)
    assert np.all(np.isfinite(tape.gradient(total, a).numpy()))
    np.testing.assert_allclose(l2_normalize([[3.0, 4.0]]).numpy(), [[0.6, 0.8]], rtol=1e-6)


def test_dimension_mismatch_message():
    with pytest.raises(ValueError, match=r"same embedding dimension.*\(2, 3\).*\(3, 2\)"):
        cosine_similarity_matrix(A, B[:, :2])


def test_rank_and_dtype_errors():
    with pytest.raises(ValueError, match=r"2D tensor.*shape=\(3,\)"):
        dot_similarity_matrix(A[0], B)
    with pytest.raises(ValueError, match="floating point.*int32"):
        dot_similarity_matrix(np.ones([2, 3], np.int32), B)
