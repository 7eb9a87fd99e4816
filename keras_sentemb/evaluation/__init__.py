"""Evaluation: STS (SentEval conventions) and the dataset readers it uses.

Modules here stay free of TensorFlow imports where they can (STS is pure
numpy / scipy), so evaluating precomputed embeddings or any callable encoder
is fast; the package loads each module on first use.
"""

from keras_sentemb.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "read_sick": f"{__name__}.readers",
    "read_sts_folder": f"{__name__}.readers",
    "read_stsb": f"{__name__}.readers",
    "STS_TASKS": f"{__name__}.sts",
    "cosine_scores": f"{__name__}.sts",
    "evaluate_sts": f"{__name__}.sts",
    "load_sts_pairs": f"{__name__}.sts",
    "layer_survey": f"{__name__}.layer_survey",
    "plot_layer_survey": f"{__name__}.layer_survey",
    "plot_sts_spread": f"{__name__}.sts_spread",
    "spread_statistics": f"{__name__}.sts_spread",
    "sts_spread": f"{__name__}.sts_spread",
    "load_training_report": f"{__name__}.training_curves",
    "plot_training_curves": f"{__name__}.training_curves",
})
