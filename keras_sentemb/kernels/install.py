"""`install_kernels`: the one place that fits an encoder's backbone with its kernel policy.

Each fused kernel replaces the `call` of the layer objects it applies to
(`layer_calls`: their class and config stay keras-hub's / Keras', so saving,
loading and cloning see the stock layers) and binds the `KernelPolicy` to
them; while a graph is traced, each layer asks `kernel_policy.decide` whether
to take its fused form, so an op the policy makes "plain" runs the layer's own
call.
"""

from keras_sentemb.kernels import policy as kernel_policy
from keras_sentemb.kernels.embedding_gather import install_embedding_gather
from keras_sentemb.kernels.fast_dropout import install_fast_dropout
from keras_sentemb.kernels.fused_gelu import fuse_gelu
from keras_sentemb.kernels.fused_layer_norm import install_fused_layer_norm
from keras_sentemb.kernels.fused_transformer import install_fused_transformer


def install_kernels(backbone, transformer_layers, policy=None):
    """Install the kernels `policy` may choose on `backbone`; returns op -> layers fitted.

    Args:
        backbone: the keras-hub backbone (every Dropout and LayerNormalization
            inside it).
        transformer_layers: its Transformer layers (GELU, fused layer).
        policy: a `kernel_policy.KernelPolicy` or what `KernelPolicy.of` takes.
            Defaults to "auto".

    Idempotent; calling it again with another policy rebinds that policy.
    """
    policy = kernel_policy.KernelPolicy.of(policy)
    return {
        # One fused XLA kernel per GELU forward / backward (fused_gelu).
        "gelu": fuse_gelu(transformer_layers, policy),
        # Fewer, larger ops per Transformer layer in encoding (fused_transformer).
        "transformer": install_fused_transformer(transformer_layers, policy),
        # Dropout masks from 16-bit random integers (fast_dropout).
        "dropout": install_fast_dropout(backbone, policy),
        # Layer norms in training as one fused kernel each way (fused_layer_norm).
        "layer_norm": install_fused_layer_norm(backbone, policy),
        # Embedding rows gathered from the float32 table, then cast (embedding_gather):
        # a mixed-precision fix, not a kernel choice; always on.
        "embedding_gather": install_embedding_gather(backbone),
    }
