"""Which kind of model a `model` argument names, and one line when a command cannot take it.

A `model` argument names a Transformer encoder (`"default"`, a keras-hub
preset, a Hugging Face / sentence-transformers folder, a folder written by
`train` or `SentenceEncoder.save`, or a `SentenceEncoder`), a static model
(a folder written by `train static` / `StaticEncoder.save`, or a
`StaticEncoder`), or something made for serving that loads back nowhere (an
exported SavedModel, a LiteRT file). Every training method starts from a
Transformer (the static method distils one), and so does every teacher and
student: `require_transformer` turns the wrong kind into one line, from the
marker files alone, before any data is read or any model is loaded
(light: no TensorFlow).
"""

import os
import sys
from pathlib import Path

STATIC = "static"
TRANSFORMER = "transformer"
SAVED_MODEL = "saved_model"
LITERT = "litert"
KERAS_ARCHIVE = "keras_archive"

TRANSFORMER_CHOICES = ("'default', a keras-hub preset, a Hugging Face / sentence-transformers "
                       "folder or a folder written by train")


def _is_saved_model(path):
    """Whether `path` is a SavedModel export (`saved_model.pb`, or a `VERSION/` folder with one)."""
    if (path / "saved_model.pb").is_file():
        return True
    try:
        return any(child.name.isdigit() and (child / "saved_model.pb").is_file()
                   for child in path.iterdir())
    except OSError:
        return False


def model_kind(model):
    """The kind of model `model` names (`STATIC`, `SAVED_MODEL`, `LITERT`, ... or `TRANSFORMER`).

    Only marker files are read (nothing is loaded); whatever is not one of
    the other kinds is taken for a Transformer, whose loader reports what is
    wrong with it.

    Args:
        model: str, path, or a model object.

    Returns:
        str.
    """
    encoders = sys.modules.get("keras_sentemb.models.static_encoder")
    if encoders is not None and isinstance(model, encoders.StaticEncoder):
        return STATIC
    if not isinstance(model, (str, os.PathLike)):
        return TRANSFORMER
    path = Path(os.fspath(model)).expanduser()
    try:
        if path.is_dir():
            if (path / "sentemb_static.json").is_file():
                return STATIC
            if _is_saved_model(path):
                return SAVED_MODEL
        elif path.is_file():
            if path.suffix == ".tflite":
                return LITERT
            if path.suffix == ".keras":
                return KERAS_ARCHIVE
    except OSError:
        pass
    return TRANSFORMER


def describe(model, name="model"):
    """What `model` is, for a refusal ("`model` X is a static model ..."), or None."""
    kind = model_kind(model)
    shown = model if isinstance(model, (str, os.PathLike)) else f"a {type(model).__name__}"
    if kind == STATIC:
        return f"`{name}` {shown} is a static model (a table of token vectors, no Transformer)"
    if kind == SAVED_MODEL:
        return (f"`{name}` {shown} is an exported SavedModel (for serving; it does not load "
                "back as a model)")
    if kind == LITERT:
        return f"`{name}` {shown} is a LiteRT file (for serving; it does not load back as a model)"
    if kind == KERAS_ARCHIVE:
        return (f"`{name}` {shown} is a .keras archive (load it with "
                "keras.saving.load_model)")
    return None


def require_transformer(model, name="model", purpose="training starts from a Transformer"):
    """Raise `ValueError` (one line) unless `model` names a Transformer encoder.

    Args:
        model: str, path, or a model object. The argument's value (None passes).
        name: str. The argument's name, for the message.
        purpose: str. Why a Transformer is needed.

    Raises:
        ValueError: `model` is a static model, a SavedModel or LiteRT export,
            or a `.keras` archive.

    Examples:

    ```python
    require_transformer("static_minilm")
    # ValueError: `model` static_minilm is a static model (a table of token vectors, no
    # Transformer); training starts from a Transformer: pass 'default', a keras-hub preset, ...
    ```
    """
    if model is None:
        return
    what = describe(model, name)
    if what is not None:
        raise ValueError(f"{what}; {purpose}: pass {TRANSFORMER_CHOICES}.")


def transformer_check(name, purpose="every training method starts from a Transformer (the "
                      "static method distils one)"):
    """A `check` for an `Argument` / `option` naming a Transformer (see `require_transformer`)."""
    def check(value):
        require_transformer(value, name, purpose)

    check.__name__ = f"require_transformer_{name}"
    return check
