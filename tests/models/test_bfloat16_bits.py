"""bfloat16 <-> float32 conversions on the bits (`kernels/bfloat16_bits.py`): exactly `tf.cast`."""

import numpy as np
import tensorflow as tf

from keras_sentemb.kernels.bfloat16_bits import narrow, widen

narrow_xla = tf.function(lambda y: narrow(y, tf.bfloat16), jit_compile=True, autograph=False)
widen_xla = tf.function(widen, jit_compile=True, autograph=False)


def float32_patterns():
    """Random bit patterns plus the edges: zeros, infinities, NaNs, subnormals, ties."""
    rng = np.random.default_rng(0)
    edges = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
             0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x00000001,
             0x00007FFF, 0x00008000, 0x00018000, 0x3F808000, 0x3F818000, 0x3F80FFFF,
             0x807FFFFF, 0x00800000]
    bits = np.concatenate([rng.integers(0, 2**32, 500_000, dtype=np.uint64).astype(np.uint32),
                           np.array(edges, np.uint32)])
    return tf.constant(bits.view(np.float32))


def test_narrow_is_tf_cast_bit_for_bit():
    y = float32_patterns()
    got = tf.bitcast(narrow_xla(y), tf.uint16).numpy()
    want = tf.bitcast(tf.cast(y, tf.bfloat16), tf.uint16).numpy()
    np.testing.assert_array_equal(got, want)


def test_widen_is_tf_cast_for_every_bfloat16():
    x = tf.bitcast(tf.constant(np.arange(2**16, dtype=np.uint16)), tf.bfloat16)
    got = tf.bitcast(widen_xla(x), tf.uint32).numpy()
    want = tf.bitcast(tf.cast(x, tf.float32), tf.uint32).numpy()
    np.testing.assert_array_equal(got, want)


def test_other_dtypes_go_through_tf_cast():
    x = tf.constant([1.5, -2.25], tf.float16)
    assert widen(x).dtype == tf.float32
    assert narrow(tf.constant([1.5]), tf.float16).dtype == tf.float16
    assert narrow(tf.constant([1.5]), tf.float32).dtype == tf.float32
