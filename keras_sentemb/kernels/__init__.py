"""The kernels an encoder runs on: which op runs how, in what precision, on how many threads.

Below `models` (the encoder and its layers), above nothing of the package's but
`compat`: the kernel policy and its report (`policy`, `report`), the fused ops
that replace a layer's call on the layer objects (`fused_gelu`,
`fused_layer_norm`, `fused_transformer`, `unpadded_transformer`,
`int8_transformer`, `embedding_gather`, `fast_dropout`, `bfloat16_bits`,
installed by `install` through `layer_calls`), the precisions (`precision`,
`native_bfloat16`), TensorFlow's oneDNN switch (`onednn_opts`), CPU threads
(`cpu_threads`) and deferred variable initialisation (`deferred_init`).
A kernel module takes the layers or callables it works on as arguments; it
never imports the encoder.
"""

from keras_sentemb.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "KernelPolicy": f"{__name__}.policy",
    "kernel_report": f"{__name__}.report",
})
