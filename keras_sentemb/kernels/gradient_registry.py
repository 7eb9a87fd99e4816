"""The gradient functions `tf.custom_gradient` registers while graphs are traced, released after.

In a traced graph each call of a `tf.custom_gradient` function (the fused
GELU, layer norm and dropout kernels use them) registers its gradient
function in TensorFlow's process-wide gradient registry under a new name,
and nothing ever removes it. That function's closure holds tensors of the
graph being traced, so each traced training step, and each graph that
encoded with a fused kernel, stayed in memory for the life of the process,
its model long gone: a process that called `fit_*` again and again, or a
test process, grew by every graph it had traced.

A registered gradient is looked up once, when the graph that uses it is
differentiated, which for a training step happens while the step is traced.
`releasing_custom_gradients()` removes the names registered inside it when
it ends: `fit` wraps each run in it, so a finished run's graphs go with its
trainer.
"""

import contextlib

from keras_sentemb import compat

# How `tf.custom_gradient` names what it registers (tensorflow/python/ops/custom_gradient.py).
_PREFIX = "CustomGradient-"


def _registry():
    return compat.gradient_registry()


def custom_gradient_names():
    """The names `tf.custom_gradient` has registered and that are still held."""
    return {name for name in _registry() if name.startswith(_PREFIX)}


@contextlib.contextmanager
def releasing_custom_gradients():
    """Remove, on leaving, the custom gradients registered inside (also after an error)."""
    before = custom_gradient_names()
    try:
        yield
    finally:
        registry = _registry()
        for name in custom_gradient_names() - before:
            registry.pop(name, None)
