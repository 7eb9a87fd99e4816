"""How a command's failure reaches the user: one line for what the user can fix, a bug report for the rest."""

from keras_sentemb import models
from keras_sentemb.cli.common import UsageError
from keras_sentemb.io_utils import disk_full_cause
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


def one_line_error(error, args):
    """The one-line message for `error`, or None when it must stay a traceback.

    A full disk (or a file-size limit or quota) is reported as "cannot write
    PATH: no space left on device" (or "file too large", "disk quota
    exceeded"), whichever library raised it; user mistakes (`UsageError`,
    unknown or broken models, missing files, bad values) and missing optional
    dependencies by their first line. Anything else is a bug: None.

    Args:
        error: Exception. What the command raised.
        args: argparse.Namespace. The command's arguments (for the path).

    Returns:
        str or None.
    """
    cause = disk_full_cause(error)
    if cause is not None:
        return f"cannot write {_written_path(args, error)}: {cause}"
    if isinstance(error, (UsageError, models.presets.ModelNotFoundError, FileNotFoundError,
                          FileExistsError, ValueError, MissingDependencyError)):
        text = str(error).strip()
        return text.splitlines()[0] if text else type(error).__name__
    return None
