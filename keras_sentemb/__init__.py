"""keras_sentemb: contrastive sentence embeddings on keras-hub backbones.

The public API is loaded lazily so that light modules (for example the STS
readers) can be imported without starting TensorFlow. Importing the package
changes nothing in the host program's environment; Keras must run on its
TensorFlow backend (the default), which the models check when they load.
"""

from keras_sentemb.lazy_exports import lazy_exports
from keras_sentemb.methods.registry import BUILTIN_FIT_FUNCTIONS

from keras_sentemb.version import __version__  # noqa: F401

_PUBLIC = {
    "SentenceEncoder": "keras_sentemb.models.sentence_encoder",
    "SentencePooling": "keras_sentemb.models.pooling",
    "KernelPolicy": "keras_sentemb.kernels.policy",
    "kernel_report": "keras_sentemb.kernels.report",
    "evaluate_sts": "keras_sentemb.evaluation.sts",
    "evaluate_transfer": "keras_sentemb.evaluation.transfer",
    "evaluate_retrieval": "keras_sentemb.evaluation.beir",
    "load_beir": "keras_sentemb.evaluation.beir",
    "evaluate_mteb": "keras_sentemb.evaluation.mteb_evaluation",
    "mteb_model": "keras_sentemb.evaluation.mteb_runner",
    "quantize_embeddings": "keras_sentemb.quantization",
    "quantized_search": "keras_sentemb.quantization",
    "QuantizationCalibration": "keras_sentemb.quantization",
    "mine_hard_negatives": "keras_sentemb.hard_negatives",
    "export_saved_model": "keras_sentemb.export.saved_model",
    "export_huggingface": "keras_sentemb.export.huggingface",
    "export_litert": "keras_sentemb.export.litert",
    "export_keras_hub": "keras_sentemb.export.keras_hub_preset",
    "to_text_embedder": "keras_sentemb.export.keras_hub_preset",
    "fit": "keras_sentemb.methods.runner",
    "streamed": "keras_sentemb.data.stream_batches",
    "Mixture": "keras_sentemb.data.stream_batches",
    "TextFiles": "keras_sentemb.data.streams",
    "list_methods": "keras_sentemb.methods.registry",
    "register_method": "keras_sentemb.methods.registry",
    "Whitening": "keras_sentemb.models.whitening",
    "GlowFlow": "keras_sentemb.models.glow_flow",
    "TrainingReport": "keras_sentemb.pipelines.scaffold",
    "extend_vocabulary": "keras_sentemb.models.vocabulary",
    "StaticEncoder": "keras_sentemb.models.static_encoder",
    "distill_static": "keras_sentemb.methods.static.distill",
    "export_static": "keras_sentemb.export.static_formats",
    # fit_ct, fit_simcse, ...: each built-in method's own module declares its fit_* function.
    **BUILTIN_FIT_FUNCTIONS,
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _PUBLIC)
