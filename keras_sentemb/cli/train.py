"""`keras-sentemb train METHOD`: any registered method, its flags read from its definition."""

import argparse
import contextlib
import logging
import os
import re
import sys
import typing

from keras_sentemb import kernels
from keras_sentemb import methods
from keras_sentemb import pipelines
from keras_sentemb.cli.common import FIXED_RUN_ARGUMENTS
from keras_sentemb.cli.common import UsageError
from keras_sentemb.cli.common import load_encoder
from keras_sentemb.cli.common import positive_float
from keras_sentemb.cli.common import positive_int
from keras_sentemb.cli.common import verbosity
from keras_sentemb.cli.common import warn
from keras_sentemb.io_utils import check_new_folder
from keras_sentemb.io_utils import folder_lock
from keras_sentemb.io_utils import looks_like_model
from keras_sentemb.pipelines.arguments import SHARED_ARGUMENTS


def add_parser(sub):
    """`train`'s flags (a method's own options are parsed by `method_option_parser`)."""
    p = sub.add_parser("train", allow_abbrev=False, help="train an encoder with a contrastive method "
                                     "(`train METHOD --help` lists its options)")
    p.add_argument("method", choices=methods.list_methods())
    _train_args(p)
    return p


def cli_value(value):
    """A default as the command line writes it: `none`, `on` / `off`, `64`, `3e-5`, `a,b`."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, (tuple, list)):
        return ",".join(cli_value(v) for v in value)
    if isinstance(value, float):
        return repr(value).replace("e-0", "e-")
    return str(value)


def cli_text(doc):
    """An argument's doc as command-line help: no Python quoting (`"auto"` is auto, None is none)."""
    text = re.sub(r'`"([^"`]*)"`', r"\1", doc)
    text = re.sub(r"`([^`]*)`", r"\1", text)
    return re.sub(r"\bNone\b", "none", text)


def cli_help(argument, choices_shown=False):
    """The help of an argument's flag: its doc, its choices and its default, as typed."""
    text = cli_text(argument.doc)
    if argument.choices is not None and not choices_shown and "`" not in argument.doc:
        text += " One of: " + ", ".join(cli_value(c) for c in argument.choices) + "."
    if argument.source:
        text += f" The paper's: {argument.source}."
    if "Defaults to" not in argument.doc:
        text += f" (default: {cli_value(argument.default)})"
    return text.replace("%", "%%")


def _train_args(p, method=None):
    """The flags every `train METHOD` takes; with `method`, their help gives its defaults."""
    shared = {a.name: a for a in (SHARED_ARGUMENTS if method is None else method.run_arguments()[0])}

    def helped(name, prefix=""):
        argument = shared[name]
        if method is None:  # `train --help`: the method is not known yet
            return f"{prefix}{cli_text(argument.doc)} (default: the method's)".replace("%", "%%")
        return prefix + cli_help(argument)

    p.add_argument("--model", default=None, metavar="MODEL",
                   help="default (the bundled all-MiniLM-L6-v2), a keras-hub preset name, a "
                        "Hugging Face / sentence-transformers folder or a folder saved by "
                        "keras-sentemb (default: default, or the preset's)")
    p.add_argument("--train-file", required=True, metavar="FILE",
                   help="required. The training data (see the method's data); a glob of files "
                        "(quoted) is streamed and needs --steps")
    p.add_argument("--output", required=True, metavar="DIR",
                   help="required. Folder to save the kept encoder to")
    p.add_argument("--steps", type=positive_int, default=None, metavar="N", help=helped("steps"))
    p.add_argument("--batch-size", type=positive_int, default=None, metavar="N",
                   help=helped("batch_size"))
    p.add_argument("--learning-rate", type=positive_float, default=None, metavar="LR",
                   help=helped("learning_rate"))
    p.add_argument("--max-length", type=positive_int, default=None, metavar="N",
                   help=helped("max_length"))
    p.add_argument("--num-layers", type=positive_int, default=None, metavar="N",
                   help="start from the first N Transformer layers of MODEL (default: all)")
    _preset_flag(p, method)
    p.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                   help="back up every eval_every steps to OUTPUT.backup and continue an "
                        "interrupted run from there (default: on)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a model already in --output (default: off)")


def _preset_flag(p, method):
    """`--preset NAME`: a paper's settings of the method, listed with their one lines."""
    if method is None:
        text = "a paper's settings, named (train METHOD --help lists them); flags given " \
               "override them (default: none)"
        p.add_argument("--preset", default=None, metavar="NAME", help=text)
        return
    if not method.presets:
        text = "the method has no presets"
    else:
        listed = "; ".join(f"{name}: {cli_text(preset.doc).rstrip('.')}"
                           for name, preset in method.presets.items())
        text = f"a paper's settings ({listed}); flags given override them (default: none)"
    p.add_argument("--preset", default=None, metavar="NAME", help=text.replace("%", "%%"),
                   choices=list(method.presets) or None)


def _parse_value(text):
    """A value that may take several forms (`--dev`): none, a bool, a number or a string."""
    lowered = text.lower()
    if lowered in ("none", "null"):
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _optional(cast, what):
    """A parser of `cast` values that also takes `none` / `null` (for None)."""
    def parse(text):
        if text.lower() in ("none", "null"):
            return None
        try:
            return cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what} or none, got {text!r}") from None
    parse.__name__ = f"optional_{getattr(cast, '__name__', 'value')}"  # argparse's messages
    return parse


def _comma_list(cast, what):
    """`32,16,8` -> `(32, 16, 8)` (each item parsed by `cast`)."""
    def parse(text):
        try:
            return tuple(cast(item) for item in text.split(",") if item.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated {what}s, got {text!r}") from None
    parse.__name__ = f"list_of_{getattr(cast, '__name__', 'value')}"
    return parse


_optional_float = _optional(float, "a number")
_CASTS = {int: (int, "an integer"), float: (float, "a number")}


def _flag_type(argument):
    """The argparse `type` (and `action`) of an argument, from its annotation."""
    base = argument.base_type
    if argument.name == "verbose":
        return {"type": verbosity}
    if base is bool:
        return {"action": argparse.BooleanOptionalAction}
    if base in _CASTS:
        cast, what = _CASTS[base]
        return {"type": _optional(cast, what) if argument.optional else cast}
    if typing.get_origin(base) is tuple:
        cast, what = _CASTS.get(typing.get_args(base)[0], (str, "value"))
        parse = _comma_list(cast, what)
        return {"type": _optional(parse, f"comma-separated {what}s") if argument.optional else parse}
    members = typing.get_args(base)
    numeric = int in members or float in members  # e.g. temperature: a number or "learnable"
    if base is str or (str in members and not numeric) or (
            base is object and isinstance(argument.default, str)):
        kwargs = {"type": str}  # e.g. --dev stsb | FILE | none, read by the method
        if argument.choices is not None:
            kwargs["choices"] = argument.choices
        return kwargs
    return {"type": _parse_value}


def method_option_parser(method, add_help=False):
    """An argparse parser of one method's options, built from its registered definition.

    Every shared run argument without a fixed `train` flag and every field of
    the method's config becomes a `--kebab-case` flag taking the same values,
    parsed by the argument's type: bools get `--flag/--no-flag`, numbers their
    type (`none` too where None is allowed), tuples comma-separated lists,
    strings stay strings (with their choices). Options that take Python
    objects have no flag. Each flag's help is the argument's doc, its choices
    and the method's default, as the command line writes them.

    Returns:
        `(parser, method)`: the parser (its `method_flags` lists the flags)
        and the `Method` class.
    """
    method = methods.get_method(method)
    parser = argparse.ArgumentParser(prog=f"keras-sentemb train {method.name}", add_help=add_help,
                                     allow_abbrev=False)
    group = parser.add_argument_group(f"{method.name} options")
    parser.method_flags = []
    for argument in method.arguments():
        if argument.python_only or argument.name in FIXED_RUN_ARGUMENTS:
            continue
        flag = "--" + argument.name.replace("_", "-")
        parser.method_flags.append(flag)
        kwargs = _flag_type(argument)
        group.add_argument(flag, dest=argument.name, default=argparse.SUPPRESS,
                           metavar=_metavar(argument, kwargs),
                           help=cli_help(argument, choices_shown="choices" in kwargs), **kwargs)
    return parser, method


def _metavar(argument, kwargs):
    """What the flag's value is called in the help: `{a,b}` for choices, else its kind."""
    if "choices" in kwargs or kwargs.get("action") is argparse.BooleanOptionalAction:
        return None
    base = argument.base_type
    if typing.get_origin(base) is tuple:
        return "A,B,..."
    if os.PathLike in typing.get_args(base):
        return "PATH"
    return {int: "N", float: "X"}.get(base, "VALUE")


def train_help(method):
    """`keras-sentemb train METHOD --help`: the common flags, then the method's options."""
    options, method = method_option_parser(method)
    common = argparse.ArgumentParser(add_help=False)
    _train_args(common, method)
    parser = argparse.ArgumentParser(
        prog=f"keras-sentemb train {method.name}", parents=[common, options],
        description=method.summary(),
    )
    return parser.format_help()


def cmd_train(args, extra):
    parser, method = method_option_parser(args.method)
    if method.parallel_passes:
        # Their steps run two independent encoder passes: one per share of the
        # cores beats every op split over all of them (kernels.cpu_threads).
        kernels.cpu_threads.configure_train_threads()
    # Dev-set evaluations and the kept checkpoint are reported through logging.
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stderr)
    options, unknown = parser.parse_known_args(extra)
    if unknown:
        valid = sorted(parser.method_flags)
        raise UsageError(
            f"unknown option(s) for 'train {args.method}': {' '.join(unknown)}; "
            f"valid method options: {' '.join(valid) or '(none)'}"
        )
    from keras_sentemb.data.streams import expand_files
    from keras_sentemb.data.streams import is_glob

    if is_glob(args.train_file) or "://" in args.train_file:
        try:  # a glob or a remote path (streamed): listed before the model loads
            expand_files(args.train_file)
        except ValueError as e:
            raise UsageError(str(e)) from None
    elif not os.path.exists(args.train_file):
        raise UsageError(f"train file not found: {args.train_file}")
    backup_dir = f"{os.path.abspath(args.output)}.backup"
    if looks_like_model(args.output) and not args.overwrite:
        raise UsageError(
            f"{args.output} already holds a trained model; pass --overwrite to train again "
            "into it, or choose another --output"
        )
    check_new_folder(args.output, overwrite=True, what="--output")
    common = {"output": args.output}
    if args.model is not None:
        common["model"] = args.model
    if args.num_layers is not None:
        model = args.model or method.preset_values(args.preset).get("model", "default")
        common["model"] = load_encoder(model, num_layers=args.num_layers)
    for name in ("steps", "batch_size", "learning_rate", "max_length"):
        value = getattr(args, name)
        if value is not None:
            common[name] = value
    # The folder's lock before its backup is looked at: a second command (a resume, say)
    # never reads, or clears, the backup of a run that is still writing it.
    with folder_lock(args.output, "training run", nested_training=True):
        return _train(args, method, common, options, backup_dir)


def _train(args, method, common, options, backup_dir):
    """The run of `cmd_train` once its output folder is held: backup, fit, the last line."""
    from keras_sentemb.data.read_errors import reading  # imports TensorFlow
    resuming = args.resume and os.path.isdir(backup_dir)
    callbacks = []
    if args.resume:
        backup = pipelines.backup.TrainingBackup(backup_dir)
        callbacks.append(backup)
        if resuming:
            print(f"resuming the interrupted run from its backup in {backup_dir}", file=sys.stderr)
    elif os.path.isdir(backup_dir):
        warn(f"--no-resume: ignoring the backup of an earlier run in {backup_dir}")
    try:
        # Keras prints progress bars on stdout; stdout is for results. An error of
        # reading the training data that no method named is one line naming it.
        with contextlib.redirect_stdout(sys.stderr), reading(args.train_file):
            encoder = methods.fit(method.name, args.train_file, preset=args.preset, **common,
                                  callbacks=callbacks, **vars(options))
    except KeyboardInterrupt:
        if args.resume and backup.start_epoch > 0:
            hint = f"run the same command again to resume from the backup in {backup_dir}"
        else:
            hint = "no backup was written yet; the same command starts over"
        raise UsageError(f"interrupted; {hint}") from None
    report = getattr(encoder, "training_report", None)
    detail = f" (pooling {report.pooling}: {report.pooling_reason})" if report else ""
    print(f"saved the {args.method} encoder to {args.output}{detail}", file=sys.stderr)
    return 0


def run(args, extra):
    return cmd_train(args, extra)
