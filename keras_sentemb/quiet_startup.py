"""A quiet start for the command line: TensorFlow's C++ start-up notices are dropped.

Importing TensorFlow and finding its devices prints a handful of C++ log lines
on a machine without a GPU: absl's "All log messages before
absl::InitializeLog() is called are written to STDERR", the oneDNN notice,
"Could not find cuda drivers on your machine" (each twice, one per shared
library that carries its own absl), and `E0000 ... failed call to cuInit`.
They read like a failure, and `TF_CPP_MIN_LOG_LEVEL` cannot silence most of
them: the first ones are written before absl's logging is initialised, so
they ignore the minimum level, and the cuInit line is an ERROR, which only
level 3 would hide, together with every real C++ error.

`quiet_tensorflow_startup` therefore filters file descriptor 2 itself while
TensorFlow is imported and its devices are listed: the stream goes through a
pipe, lines that match the known start-up notices are dropped and everything
else (argparse's usage errors, Python warnings, any other C++ error) is
passed on unchanged, line by line. After that window stderr is the process'
own again, and `TF_CPP_MIN_LOG_LEVEL=2` keeps TensorFlow's later INFO and
WARNING lines away. `TF_ENABLE_ONEDNN_OPTS` is not a logging matter: the
command line and the recipes set it before this runs, where it measured
faster (`kernels.onednn_opts`).

Nothing is filtered when the user asked for the logs (`--verbose`) or chose a
level themselves (`TF_CPP_MIN_LOG_LEVEL` set in the environment).

The recipes (`recipes/*.py`, the README's main job among them) start the
same way through `run_quietly`, and take the same `--verbose`
(`add_verbose_flag`).
"""

import contextlib
import logging
import os
import re
import sys
import threading

# The command line's default level: hides TensorFlow's C++ INFO and WARNING
# lines once absl's logging is initialised; real errors (level 2) still show.
DEFAULT_LEVEL = "2"

# Lines TensorFlow prints at start-up that say nothing is wrong. INFO and
# WARNING lines in absl's format (`I0000 00:00:1795618167.346535   19868
# port.cc:153] ...`) are what level 2 hides after initialisation; of the
# ERROR lines only the "no CUDA here" and duplicate-plugin ones are dropped.
NOISE = re.compile(
    r"^(?:"
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|[IW]\d{4} [\d:.]+\s+\d+ [\w.\-]+:\d+\] .*"
    r"|E\d{4} [\d:.]+\s+\d+ [\w.\-]+:\d+\] (?:"
    r"failed call to cuInit.*"
    r"|Unable to register cu(?:DNN|FFT|BLAS) factory.*"
    r"|.*could not find cuda drivers.*"
    r"|.*no NVIDIA GPU device is present.*"
    r")"
    r")\r?$",
    re.IGNORECASE,
)

_OWN_LEVEL_MARK = "_KERAS_SENTEMB_SET_TF_LOG_LEVEL"


def take_verbose_flag(argv):
    """Removes the global `--verbose` flag from `argv`.

    `--verbose` may stand anywhere on the command line. The one exception is
    `train METHOD --verbose LEVEL` (LEVEL one of auto, 0, 1, 2): that is the
    fit function's Keras verbosity and stays in place.

    Args:
        argv: list of str. The arguments after the program name.

    Returns:
        A tuple `(argv, verbose)`: the arguments without the flag, and
        whether it was given.

    Examples:

    >>> take_verbose_flag(["encode", "--model", "default", "--verbose"])
    (['encode', '--model', 'default'], True)
    >>> take_verbose_flag(["train", "ct", "--verbose", "2"])
    (['train', 'ct', '--verbose', '2'], False)
    """
    out, verbose = [], False
    for i, token in enumerate(argv):
        if token == "--verbose":
            following = argv[i + 1] if i + 1 < len(argv) else None
            if "train" in argv[:i] and following in ("auto", "0", "1", "2"):
                out.append(token)
                continue
            verbose = True
            continue
        out.append(token)
    return out, verbose


def user_chose_log_level():
    """Whether `TF_CPP_MIN_LOG_LEVEL` was set by the user rather than by this module."""
    level = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    return level is not None and os.environ.get(_OWN_LEVEL_MARK) != level


def _pump(read_fd, write_fd):
    """Copies `read_fd` to `write_fd` line by line, dropping `NOISE` lines."""
    pending = b""
    while True:
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        kept = [line + b"\n" for line in lines
                if not NOISE.match(line.decode("utf-8", "replace"))]
        if kept:
            os.write(write_fd, b"".join(kept))
    if pending and not NOISE.match(pending.decode("utf-8", "replace")):
        os.write(write_fd, pending)


@contextlib.contextmanager
def quiet_tensorflow_startup(verbose=False):
    """Drops TensorFlow's C++ start-up notices from stderr inside the block.

    Sets `TF_CPP_MIN_LOG_LEVEL=2` unless the user set a level, and while the
    block runs sends file descriptor 2 through a filter that drops the lines
    matched by `NOISE` and passes every other line on. Import TensorFlow and
    list its devices inside the block (`start_tensorflow`); the notices come
    from there. With `verbose=True`, or when the user set
    `TF_CPP_MIN_LOG_LEVEL` themselves, nothing is changed or filtered.

    Args:
        verbose: bool. Show TensorFlow's logs as TensorFlow prints them.
            Defaults to `False`.

    Examples:

    ```python
    with quiet_tensorflow_startup():
        start_tensorflow()
    ```
    """
    if verbose or user_chose_log_level():
        yield
        return
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = DEFAULT_LEVEL
    os.environ[_OWN_LEVEL_MARK] = DEFAULT_LEVEL
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to filter
        yield
        return
    read_fd, write_fd = os.pipe()
    sys.stderr.flush()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    pump = threading.Thread(target=_pump, args=(read_fd, saved), daemon=True)
    pump.start()
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(saved, 2)  # closes the pipe's last write end: the pump drains and ends
        pump.join()
        os.close(read_fd)
        os.close(saved)


@contextlib.contextmanager
def quiet_tensorflow_info():
    """Holds TensorFlow's Python logger at WARNING inside the block.

    TensorFlow reports some of its steps through the Python logger named
    `tensorflow` at INFO level: writing a SavedModel logs "Assets written
    to: FOLDER/assets", once through TensorFlow's own handler and once more
    through the root logger's when the program configured logging at INFO
    (as the command line and the recipes do). The folder named is the
    export's temporary one, renamed when the export is verified, so the
    line says nothing useful. Inside the block such INFO records are
    dropped; warnings and errors pass, and the logger's level is restored
    afterwards.

    Examples:

    ```python
    with quiet_tensorflow_info():
        tf.saved_model.save(module, folder)
    ```
    """
    tf_logger = logging.getLogger("tensorflow")
    level = tf_logger.level
    if tf_logger.getEffectiveLevel() < logging.WARNING:
        tf_logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        tf_logger.setLevel(level)


def start_tensorflow():
    """Imports TensorFlow and lists its devices, where its start-up notices come from."""
    import tensorflow as tf

    tf.config.list_physical_devices()


VERBOSE_HELP = "show TensorFlow's C++ start-up logs (hidden by default)"


def add_verbose_flag(parser):
    """Add `--verbose` (TensorFlow's start-up logs, see `run_quietly`) to a program's parser.

    Args:
        parser: argparse.ArgumentParser. The program's parser.

    Returns:
        The parser.

    Examples:

    >>> import argparse
    >>> add_verbose_flag(argparse.ArgumentParser()).parse_args(["--verbose"]).verbose
    True
    """
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    return parser


def run_quietly(main, argv=None):
    """Start TensorFlow quietly, then run a program's `main(argv)`; its entry point.

    TensorFlow is imported and its devices listed inside
    `quiet_tensorflow_startup`, so that its C++ start-up notices are dropped,
    unless `argv` holds `--verbose` (the program's parser takes it, see
    `add_verbose_flag`) or the user set `TF_CPP_MIN_LOG_LEVEL`. With `-h` /
    `--help` TensorFlow is not started: the help comes at once.

    Args:
        main: callable. The program's `main(argv)`.
        argv: list of str or None. The arguments after the program name;
            None reads `sys.argv`.

    Returns:
        What `main` returns (the exit status).

    Examples:

    ```python
    if __name__ == "__main__":
        sys.exit(run_quietly(main))
    ```
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if "-h" not in argv and "--help" not in argv:
        with quiet_tensorflow_startup(verbose="--verbose" in argv):
            start_tensorflow()
    return main(argv)
