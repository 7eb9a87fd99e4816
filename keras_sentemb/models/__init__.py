"""Sentence encoder, its layers (pooling, heads, logit scale, memory queue), model resolution."""

from keras_sentemb.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "BackboneAdapter": f"{__name__}.backbone_adapter",
    "GlowFlow": f"{__name__}.glow_flow",
    "LogitScale": f"{__name__}.logit_scale",
    "MemoryQueue": f"{__name__}.memory_queue",
    "PostProcessing": f"{__name__}.post_processing",
    "ProjectionMLP": f"{__name__}.projection_mlp",
    "SentenceEncoder": f"{__name__}.sentence_encoder",
    "SentencePooling": f"{__name__}.pooling",
    "Whitening": f"{__name__}.whitening",
    "parse_pooling": f"{__name__}.pooling",
})
