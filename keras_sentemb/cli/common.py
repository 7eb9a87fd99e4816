"""What every `keras-sentemb` command shares: user errors, value types, model loading."""

import argparse
import os
import sys

from keras_sentemb import kernels
from keras_sentemb import methods
from keras_sentemb import models

# The built-in training methods (`train` also takes those registered elsewhere:
# `keras_sentemb.list_methods()`).
METHODS = tuple(methods.registry.BUILTIN_METHODS)
# Arguments of every `fit_*` that `train` takes as fixed flags of its own (the
# method's other options come from its registered definition).
FIXED_RUN_ARGUMENTS = ("model", "steps", "batch_size", "learning_rate", "max_length", "output",
                       "preset")


class UsageError(Exception):
    """A user mistake: reported as one line, exit status 2."""


def report_error(message):
    print(f"keras-sentemb: error: {message}", file=sys.stderr)
    return 2


def warn(message):
    print(f"keras-sentemb: warning: {message}", file=sys.stderr)


def read_lines(path):
    """Lines of a UTF-8 text file; invalid bytes are replaced (with a warning).

    Every line counts, empty ones included; a final newline does not start an
    extra line. `\\r\\n` line ends are accepted.
    """
    if not os.path.isfile(path):
        raise UsageError(f"input file not found: {path}")
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        return []
    raw_lines = data.split(b"\n")
    if raw_lines[-1] == b"":
        raw_lines.pop()
    lines, bad = [], []
    for number, raw in enumerate(raw_lines, start=1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            lines.append(raw.decode("utf-8", errors="replace"))
            bad.append(number)
    if bad:
        shown = ", ".join(map(str, bad[:10])) + (" ..." if len(bad) > 10 else "")
        warn(
            f"{path}: {len(bad)} line(s) are not valid UTF-8 (line {shown}); "
            "invalid bytes were replaced with U+FFFD."
        )
    return lines


def positive(cast, what, text):
    """`text` as a `cast` value > 0, or the argparse error naming `what` it expected."""
    try:
        value = cast(text)
    except ValueError:
        value = None
    if value is None or not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive {what}, got {text!r}")
    return value


def positive_int(text):
    return positive(int, "integer", text)


def positive_float(text):
    return positive(float, "number", text)


def verbosity(text):
    """Keras verbosity: "auto" or 0, 1, 2 (ints: Keras compares with ints)."""
    if text == "auto":
        return text
    if text in ("0", "1", "2"):
        return int(text)
    raise argparse.ArgumentTypeError(f"expected auto, 0, 1 or 2, got {text!r}")


def pooling_name(text):
    try:
        return models.pooling.parse_pooling(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


def load_encoder(model, pooling=None, max_length=None, num_layers=None, precision=None):
    """MODEL loaded for encoding in `precision` (`"auto"` resolved; None: as saved).

    Built in the precision's dtype once, not built in float32 and then copied;
    an int8 encoder is a float32 one that holds int8 weights too.
    """
    from keras_sentemb.models.static_runtime import is_static_folder

    if is_static_folder(model):  # a static folder: its own class, no precision
        from keras_sentemb.models.static_encoder import StaticEncoder

        if num_layers is not None:
            raise UsageError(f"--num-layers applies to Transformer models; {model} is a static "
                             "model (a table of token vectors, no layers)")
        if pooling not in (None, "mean"):
            raise UsageError(f"--pooling {pooling}: {model} is a static model, which averages "
                             "its token vectors (mean)")
        return StaticEncoder.from_preset(model, max_length=max_length)
    dtype = None
    if precision is not None:
        precision = kernels.precision.resolve_encode_precision(precision)
        dtype = kernels.precision.INFERENCE_POLICIES[precision]
    encoder = models.SentenceEncoder.from_preset(model, max_length=max_length,
                                                 num_layers=num_layers, dtype=dtype)
    if pooling is not None:
        # Validate layer:K against this model's depth.
        encoder.pooling = models.pooling.parse_pooling(pooling, encoder.num_layers)
    return encoder


def read_calibration(path):
    """The sentences of an int8 calibration file (one per line; empty lines skipped)."""
    sentences = [line for line in read_lines(path) if line.strip()]
    if not sentences:
        raise UsageError(f"--calibration {path} holds no sentence")
    return sentences


def model_args(p, pooling=True):
    """The flags of every command that loads MODEL."""
    p.add_argument("--model", required=True, help="'default', a keras-hub preset, or a model folder")
    if pooling:
        p.add_argument("--pooling", type=pooling_name, default=None,
                       help="cls|mean|max|mean_last2|first_last|layer:K|sbert_wk[:START[:WINDOW]] "
                            "(default: the model's)")
    p.add_argument("--max-length", type=positive_int, default=None)
    p.add_argument("--num-layers", type=positive_int, default=None,
                   help="keep only the first N Transformer layers of MODEL")
