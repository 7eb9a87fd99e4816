"""How a command's failure reaches the user: one line for what the user can fix, a bug report for the rest."""

from keras_sentemb import models
from keras_sentemb.cli.common import UsageError
from keras_sentemb.io_utils import disk_full_cause
from keras_sentemb.methods.registry import PluginError
from keras_sentemb.missing_dependency import MissingDependencyError


def _written_path(args, error):
    """What the command was writing when `error` happened, as the user named it."""
    if getattr(args, "output", None):
        return args.output
    if getattr(args, "update_card", False):
        return args.model
    while error is not None:
        if getattr(error, "filename", None):
            return error.filename
        error = error.__cause__ or error.__context__
    return "the output"


# A ValueError raised inside these packages' own code means a value reached them
# unchecked: the toolkit's bug (its checks raise ValueError with a message for
# the user before that), so it is reported as an internal error.
INTERNAL_ORIGINS = ("tensorflow", "keras", "keras_hub", "tensorflow_text", "tf_keras", "jax")


def raised_in(error):
    """The top-level package whose code raised `error` (its innermost traceback frame)."""
    tb = error.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    return (tb.tb_frame.f_globals.get("__name__") or "").split(".")[0] or None


def one_line_error(error, args):
    """The one-line message for `error`, or None when it must stay a traceback.

    A full disk (or a file-size limit or quota) is reported as "cannot write
    PATH: no space left on device" (or "file too large", "disk quota
    exceeded"), whichever library raised it; user mistakes (`UsageError`,
    unknown or broken models, missing files, bad values, training data that
    cannot be read or trained on), missing optional dependencies and a
    plugin that fails to load by their first line. Anything else is a bug: None; so is a
    ValueError that TensorFlow, Keras or keras-hub raised from their own code
    (a value the toolkit passed on unchecked), which the command line sees
    with traceback filtering off (`start_tensorflow`).

    Args:
        error: Exception. What the command raised.
        args: argparse.Namespace. The command's arguments (for the path).

    Returns:
        str or None.
    """
    cause = disk_full_cause(error)
    if cause is not None:
        return f"cannot write {_written_path(args, error)}: {cause}"
    if isinstance(error, ValueError) and not isinstance(error, UsageError) and (
            raised_in(error) in INTERNAL_ORIGINS):
        return None
    if isinstance(error, (UsageError, models.presets.ModelNotFoundError, FileNotFoundError,
                          FileExistsError, ValueError, MissingDependencyError, PluginError)):
        text = str(error).strip()
        return text.splitlines()[0] if text else type(error).__name__
    return None
