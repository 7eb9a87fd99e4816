"""The `keras-sentemb` entry point: the parser of every command, start-up, dispatch and exit status."""

import argparse
import atexit
import os
import sys
import threading
import traceback

from keras_sentemb import methods
from keras_sentemb.cli import analyze
from keras_sentemb.cli import encode
from keras_sentemb.cli import evaluate
from keras_sentemb.cli import export
from keras_sentemb.cli import static
from keras_sentemb.cli import train
from keras_sentemb.cli.common import report_error
from keras_sentemb.cli.errors import one_line_error
from keras_sentemb.kernels.onednn_opts import enable_onednn_opts
from keras_sentemb.quiet_startup import quiet_tensorflow_startup
from keras_sentemb.quiet_startup import start_tensorflow
from keras_sentemb.quiet_startup import take_verbose_flag


# Commands after which the process skips Python's own teardown (`exit_quickly`):
# everything they write is written (atomically) and closed when `main` returns.
QUICK_EXIT_COMMANDS = ("encode",)

# Exit statuses: 0 done, 2 a user error (bad arguments, missing files or
# models, bad values, a full disk, a missing optional dependency), 70 an
# internal error (a bug: EX_SOFTWARE of sysexits.h).
EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 70


def build_parser():
    """The parser of `keras-sentemb` and its five commands (each module adds its own)."""
    parser = argparse.ArgumentParser(
        prog="keras-sentemb",
        description="Contrastive sentence embeddings on keras-hub backbones.",
        allow_abbrev=False,  # `train simcse --mode` must not read as `--model`
    )
    # Taken out of argv before parsing (anywhere on the line), listed here for --help.
    parser.add_argument("--verbose", action="store_true",
                        help="show TensorFlow's C++ start-up logs (hidden by default) and, "
                             "for encode and train, which kernel each op uses on this CPU")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (encode, evaluate, train, analyze, export):
        command.add_parser(sub)
    return parser


def attach_negative_numbers(argv):
    """`--flag -1e-5` -> `--flag=-1e-5`, so argparse reads a negative number as a value.

    argparse only recognises plain negative numbers (`-1`, `-0.5`) as values;
    `-1e-5` would otherwise be taken for an option, and the user would see
    "expected one argument" instead of what is wrong with the value.
    """
    out = []
    for token in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and token.startswith("-"):
            try:
                float(token)
            except ValueError:
                pass
            else:
                out[-1] = f"{out[-1]}={token}"
                continue
        out.append(token)
    return out


# Optional packages that Keras and keras-hub (through kagglehub) import when
# they are imported, only for features `encode` and `export` never use
# (scikit-learn wrappers, notebook detection, image-gallery plots, OpenCV for
# drawing bounding boxes): about a second of a cold start.
KERAS_IMPORT_TIME_EXTRAS = ("sklearn", "IPython", "matplotlib", "cv2")
# What keras-hub imports only to download presets (kagglehub, with its Kaggle
# client and HTTP stack): hidden as well when the model is a local folder.
DOWNLOAD_EXTRAS = ("kagglehub",)


def is_local_model(model):
    """Whether MODEL names a folder on this machine (`default` is one), so no download is needed."""
    return model == "default" or (isinstance(model, str) and os.path.isdir(os.path.expanduser(model)))


def import_keras_without_extras(local_model=False):
    """Import Keras and keras-hub with `KERAS_IMPORT_TIME_EXTRAS` hidden, then unhide them.

    They import each in a `try: import ... except ImportError`, so while
    its name maps to `None` in `sys.modules` Keras records it as missing.
    Afterwards the packages import normally for any code that asks for them.
    With `local_model`, `DOWNLOAD_EXTRAS` are hidden too: keras-hub then
    cannot download presets in this process, which loads a local folder.
    """
    names = KERAS_IMPORT_TIME_EXTRAS + (DOWNLOAD_EXTRAS if local_model else ())
    hidden = [name for name in names if name not in sys.modules]
    if "keras" in sys.modules or not hidden:
        return
    for name in hidden:
        sys.modules[name] = None
    try:
        import keras  # noqa: F401
        import keras_hub  # noqa: F401
    finally:
        for name in hidden:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


def main(argv=None):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    # Before anything imports TensorFlow (encode and export import Keras first).
    enable_onednn_opts()
    argv = attach_negative_numbers(sys.argv[1:] if argv is None else list(argv))
    argv, verbose = take_verbose_flag(argv)
    # This is a program of its own: TensorFlow's C++ start-up notices are
    # dropped unless --verbose or the user's TF_CPP_MIN_LOG_LEVEL (see quiet_startup).
    with quiet_tensorflow_startup(verbose):
        if len(argv) >= 2 and argv[0] == "train" and argv[1] in methods.list_methods() and (
            "-h" in argv or "--help" in argv
        ):
            try:
                print(train.train_help(argv[1]))
            except methods.registry.PluginError as error:
                return report_error(str(error))
            return 0
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra and args.command != "train":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        if args.command == "encode" and static.is_static_model(args.model):
            return static.run_encode(args)  # numpy only: TensorFlow is never imported
        if args.command in ("encode", "export"):
            import_keras_without_extras(local_model=is_local_model(args.model))
        start_tensorflow()
    keep_whole_tracebacks()
    args.show_kernels = verbose
    if verbose and args.command == "train":
        # The models train with the default kernel policy ("auto"; encode reports its model's).
        from keras_sentemb.kernels.report import kernel_report

        print(kernel_report(), file=sys.stderr)
    commands = {"encode": encode, "evaluate": evaluate, "analyze": analyze, "export": export}
    try:
        if args.command == "train":
            return train.run(args, extra)
        return commands[args.command].run(args)
    except KeyboardInterrupt:
        return report_error("interrupted")
    except Exception as e:
        message = one_line_error(e, args)
        if message is not None:
            return report_error(message)
        return internal_error(e, verbose)


def keep_whole_tracebacks():
    """TensorFlow's and Keras' traceback filtering off for this process.

    A command's error then keeps the frame that raised it: an error raised
    inside TensorFlow or Keras is told apart from the toolkit's own checks
    (`keras_sentemb.cli.errors.one_line_error`), and `--verbose` shows the
    whole traceback of an internal error.
    """
    import keras
    import tensorflow as tf

    tf.debugging.disable_traceback_filtering()
    keras.config.disable_traceback_filtering()


def internal_error(error, verbose):
    """A bug, not the user's mistake: its traceback with `--verbose`, exit status 70."""
    if verbose:
        traceback.print_exception(error)
    summary = f"{type(error).__name__}: {error}".splitlines()[0]
    hint = "" if verbose else " (run again with --verbose for the traceback)"
    print(f"keras-sentemb: internal error: {summary}{hint}; please report it", file=sys.stderr)
    return EXIT_INTERNAL_ERROR


def run():
    """The program: `keras-sentemb` and `python -m keras_sentemb` (`main` on `sys.argv`, then exit).

    After `encode` the process ends with `exit_quickly`; after every other
    command, and when `main` itself exits (`--help`, argparse's usage
    errors), Python ends as usual.
    """
    argv = sys.argv[1:]
    try:
        code = main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        code = reader_gone()
    command = next((a for a in take_verbose_flag(argv)[0] if not a.startswith("-")), None)
    if command in QUICK_EXIT_COMMANDS:
        exit_quickly(code)
    sys.exit(code)


def reader_gone():
    """The reader of stdout closed it early (`keras-sentemb train ct --help | head`): end quietly.

    What was read was what the reader wanted; the rest of the output goes to
    `os.devnull`, so Python's last flush at exit raises nothing either.

    Returns:
        0.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 0


def exit_quickly(code):
    """End the process with status `code`, skipping the interpreter's teardown.

    After a cold `encode` of 100 sentences, Python's finalisation (garbage
    collecting every TensorFlow and Keras object, then each module) takes
    about a second of CPU time, and nothing it does matters to the result:
    the output was written atomically and closed. So: stdout and stderr are
    flushed, the `atexit` handlers run (logging's shutdown among them), and
    `os._exit` ends the process. Where that is not known to be safe (another
    non-daemon thread still running, a stream that cannot be flushed, a
    Python without `atexit._run_exitfuncs`) it exits as usual.
    """
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    others = [t for t in threading.enumerate()
              if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if run_exitfuncs is None or others:
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # e.g. a closed pipe: let Python's own exit report it
        sys.exit(code)
    run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(0 if code is None else code if isinstance(code, int) else 1)  # as sys.exit reads it
