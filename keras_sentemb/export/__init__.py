"""Export: one string-in SavedModel for TF Serving, verified against `encode`.

`export_saved_model(encoder, "saved_models/NAME")` writes the TF Serving
layout `saved_models/NAME/<version>/`. The `serving_default` signature takes
`sentences` (tf.string, [None]) and returns `embeddings` (float32,
[None, dim]); tokenization, truncation, pooling and normalisation run inside
the graph. The graph needs TensorFlow and the tensorflow-text ops only.

`export_huggingface(encoder, "NAME")` writes a sentence-transformers folder
(or, with `format="transformers"`, a bare `BertModel` / `RobertaModel`
folder) that the Hugging Face libraries load directly.

`export_keras_hub(encoder, "NAME")` writes a keras-hub `TextEmbedder` preset
folder (`keras_hub.models.TextEmbedder.from_preset` loads it,
`keras_hub.upload_preset` publishes it).

`export_litert(encoder, "NAME.tflite")` writes an on-device LiteRT file of
builtin ops (int32 token ids in, one embedding out) with the BERT tokenizer in
its metadata, which MediaPipe's TextEmbedder runs on raw text.

Names are loaded lazily so that `python -m keras_sentemb.export.saved_model_cli`
does not import Keras.
"""

from keras_sentemb.lazy_exports import lazy_exports

_PUBLIC = {
    "export_saved_model": "keras_sentemb.export.saved_model",
    "verify_saved_model": "keras_sentemb.export.saved_model",
    "build_export_archive": "keras_sentemb.export.saved_model",
    "next_version": "keras_sentemb.export.saved_model",
    "required_custom_ops": "keras_sentemb.export.saved_model",
    "ExportVerificationError": "keras_sentemb.export.saved_model",
    "VersionExistsError": "keras_sentemb.export.saved_model",
    "PROBE_SENTENCES": "keras_sentemb.export.saved_model",
    "SERVING_SIGNATURE": "keras_sentemb.export.saved_model",
    "TOKEN_SIGNATURE": "keras_sentemb.export.saved_model",
    "INPUT_KEY": "keras_sentemb.export.saved_model",
    "OUTPUT_KEY": "keras_sentemb.export.saved_model",
    "run_standalone": "keras_sentemb.export.standalone",
    "export_huggingface": "keras_sentemb.export.huggingface",
    "verify_huggingface": "keras_sentemb.export.huggingface",
    "check_exportable": "keras_sentemb.export.huggingface",
    "NotExportableError": "keras_sentemb.export.huggingface",
    "export_keras_hub": "keras_sentemb.export.keras_hub_preset",
    "verify_keras_hub": "keras_sentemb.export.keras_hub_preset",
    "to_text_embedder": "keras_sentemb.export.keras_hub_preset",
    "export_litert": "keras_sentemb.export.litert",
    "verify_litert": "keras_sentemb.export.litert_check",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _PUBLIC)
