"""sentence-transformers `Dense` modules read as a projection head and a whitening.

A sentence-transformers folder runs Transformer -> Pooling -> [Dense] ->
[Normalize] -> [Dense]. The encoder runs pooling -> projection head -> L2
normalisation -> post-processing, so:

- a `Dense` before `Normalize` (or the first one in a folder without it)
  is the projection head (`projection_dim`, its activation);
- a `Dense` after `Normalize`, or one in a folder named `*_Whitening` (how
  `export_huggingface` writes a whitening), with an identity activation,
  is a `Whitening` post-processing layer: `x @ W^T + b` is `(x - mean) @ K`
  with `K = W^T` and a `mean` that solves `mean @ K = -b`.

Any other arrangement (two heads, an activation after `Normalize`) is
refused with an error naming the module. Weights are read from the
module's `model.safetensors`; a module with only PyTorch weights
(`pytorch_model.bin`, no safetensors) cannot be read without torch and is
skipped with a warning, as before.
"""

import logging
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from keras_sentemb.models import presets
from keras_sentemb.models.whitening import Whitening

logger = logging.getLogger(__name__)

# Torch activation of a `Dense` module -> the Keras activation of the head.
KERAS_ACTIVATIONS = {
    "torch.nn.modules.linear.Identity": None,
    "torch.nn.modules.activation.Tanh": "tanh",
    "torch.nn.modules.activation.ReLU": "relu",
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
    "torch.nn.modules.activation.GELU": "gelu",
}
WHITENING_SUFFIX = "_Whitening"


def _read_dense(folder, module):
    """`(kernel [in, out], bias [out], activation)` of a Dense module, or None."""
    path = folder / module["path"]
    config = presets.read_json(path / "config.json")
    weights = path / "model.safetensors"
    if not weights.is_file():
        logger.warning(
            "%s has a sentence-transformers Dense module (%s) without safetensors "
            "weights; it is not loaded, the encoder outputs the vector before it.",
            folder, module["path"],
        )
        return None
    name = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    if name not in KERAS_ACTIVATIONS:
        raise ValueError(
            f"{path}: the Dense activation {name!r} is not supported (supported: "
            f"{', '.join(KERAS_ACTIVATIONS)})."
        )
    if config.get("use_residual"):
        raise ValueError(f"{path}: a Dense module with a residual connection is not supported.")
    tensors = load_file(str(weights))
    kernel = np.asarray(tensors["linear.weight"], np.float64).T
    bias = np.asarray(tensors.get("linear.bias", np.zeros(kernel.shape[1])), np.float64)
    return kernel, bias, KERAS_ACTIVATIONS[name]


def _whitening(kernel, bias, pooling, where):
    # Least squares (minimum norm): exact when K has full column rank.
    mean = np.linalg.lstsq(kernel.T, -bias, rcond=None)[0]
    if not np.allclose(mean @ kernel, -bias, rtol=1e-6, atol=1e-6 * (np.abs(bias).max() + 1)):
        raise ValueError(f"{where}: this Dense module cannot be read as a whitening (rank-deficient).")
    layer = Whitening(kernel.shape[0], dim=kernel.shape[1], pooling=pooling)
    layer.build()
    layer.set_weights([mean.astype("float32"), kernel.astype("float32")])
    return layer


def read_dense_modules(folder, pooling=None):
    """The projection head and whitening of a sentence-transformers folder.

    Args:
        folder: str or path. A sentence-transformers folder.
        pooling: str or None. The folder's pooling (recorded on the whitening).

    Returns:
        dict with `projection` (`(kernel, bias, activation)` or None) and
        `postprocess` (a `Whitening` or None).
    """
    folder = Path(folder)
    out = {"projection": None, "postprocess": None}
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        return out
    modules = presets.read_json(modules_file)
    normalized = False
    for module in modules:
        kind = module.get("type", "")
        if kind.endswith("Normalize"):
            normalized = True
            continue
        if not kind.endswith("Dense"):
            continue
        dense = _read_dense(folder, module)
        if dense is None:
            continue
        kernel, bias, activation = dense
        where = folder / module["path"]
        as_whitening = normalized or module["path"].endswith(WHITENING_SUFFIX) or (
            out["projection"] is not None
        )
        if not as_whitening:
            out["projection"] = dense
        elif activation is None and out["postprocess"] is None:
            out["postprocess"] = _whitening(kernel, bias, pooling, where)
        else:
            raise ValueError(
                f"{where}: this arrangement of sentence-transformers Dense modules is not "
                "supported (at most one Dense before Normalize and one linear Dense after it)."
            )
    return out
