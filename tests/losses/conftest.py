"""Loss tests compare float32 values at rtol 1e-5.

On Ampere+ GPUs TensorFlow runs float32 matmuls in TensorFloat-32 by default
(~1e-3 relative error), so exact-float32 checks disable it while these tests
run and restore the previous setting afterwards.
"""

import pytest
import tensorflow as tf


@pytest.fixture(autouse=True)
def _exact_float32_matmul():
    previous = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    yield
    tf.config.experimental.enable_tensor_float_32_execution(previous)
