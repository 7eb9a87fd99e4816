"""Forward-only graphs: the scope that gradient-free op patterns read while a graph is traced.

Some layers have a faster form that TensorFlow cannot differentiate well or
that only pays off without a backward pass (oneDNN's fused matmul + GELU, the
fused Transformer layer). `SentenceEncoder.encode` traces its forward pass
inside `forward_only()`; training graphs never enter it, so they keep the
forms whose gradients are tuned (the fused XLA GELU kernels, keras-hub's
layers). The scope lives in `kernels`, with the kernel policy it feeds.

Examples:

```python
with forward_only():
    states = encoder.hidden_states(inputs, training=False)
```
"""

from keras_sentemb.models.kernels import forward_only
from keras_sentemb.models.kernels import is_forward_only

__all__ = ["forward_only", "is_forward_only"]
