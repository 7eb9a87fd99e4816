"""Forward-only graphs: a flag that gradient-free op patterns read while a graph is traced.

Some layers have a faster form that TensorFlow cannot differentiate well or
that only pays off without a backward pass (oneDNN's fused matmul + GELU, the
fused Transformer layer). `SentenceEncoder.encode` traces its forward pass
inside `forward_only()`; training graphs never enter it, so they keep the
forms whose gradients are tuned (the fused XLA GELU kernels, keras-hub's
layers).
"""

import contextlib
import threading

_state = threading.local()


@contextlib.contextmanager
def forward_only():
    """Marks the graph traced inside the block as one that never runs backward.

    Examples:

    ```python
    with forward_only():
        states = encoder.hidden_states(inputs, training=False)
    ```
    """
    previous = getattr(_state, "on", False)
    _state.on = True
    try:
        yield
    finally:
        _state.on = previous


def is_forward_only():
    """Whether the caller runs inside `forward_only()` (in this thread)."""
    return getattr(_state, "on", False)
