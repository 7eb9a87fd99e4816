"""`keras-sentemb train METHOD`: any registered method, its flags read from its definition."""

import argparse
import contextlib
import logging
import os
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
from keras_sentemb.io_utils import looks_like_model
from keras_sentemb.pipelines.shared_arguments import SHARED_ARGUMENTS


def add_parser(sub):
    """`train`'s flags (a method's own options are parsed by `method_option_parser`)."""
    p = sub.add_parser("train", allow_abbrev=False, help="train an encoder with a contrastive method "
                                     "(`train METHOD --help` lists its options)")
    p.add_argument("method", choices=methods.list_methods())
    _train_args(p)
    return p


def _train_args(p):
    """The flags every `train METHOD` takes (the method's options come from its fit_*)."""
    doc = {a.name: a.doc for a in SHARED_ARGUMENTS}
    p.add_argument("--model", default="default", help=doc["model"])
    p.add_argument("--train-file", required=True, help="the training data (see the method's data); a glob of files "
                   "(quoted) is streamed and needs --steps")
    p.add_argument("--output", required=True, help=doc["output"])
    p.add_argument("--steps", type=positive_int, default=None,
                   help=doc["steps"] + " Defaults to the method's.")
    p.add_argument("--batch-size", type=positive_int, default=None,
                   help=doc["batch_size"] + " Defaults to the method's.")
    p.add_argument("--learning-rate", type=positive_float, default=None, help=doc["learning_rate"])
    p.add_argument("--max-length", type=positive_int, default=None,
                   help=doc["max_length"] + " Defaults to the method's.")
    p.add_argument("--num-layers", type=positive_int, default=None,
                   help="start from the first N Transformer layers of MODEL")
    p.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                   help="back up every eval_every steps to OUTPUT.backup and continue an "
                        "interrupted run from there (default: on)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a model already in --output")


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


def _flag_type(field):
    """The argparse `type` (and `action`) of an option, from its annotation."""
    base = field.base_type
    if field.name == "verbose":
        return {"type": verbosity}
    if base is bool:
        return {"action": argparse.BooleanOptionalAction}
    if base in _CASTS:
        cast, what = _CASTS[base]
        return {"type": _optional(cast, what) if field.optional else cast}
    if typing.get_origin(base) is tuple:
        cast, what = _CASTS.get(typing.get_args(base)[0], (str, "value"))
        parse = _comma_list(cast, what)
        return {"type": _optional(parse, f"comma-separated {what}s") if field.optional else parse}
    if base is str or (base is object and isinstance(field.default, str)):
        kwargs = {"type": str}  # e.g. --dev stsb | FILE | none, read by the method
        if field.spec.choices is not None:
            kwargs["choices"] = field.spec.choices
        return kwargs
    return {"type": _parse_value}


def method_option_parser(method, add_help=False):
    """An argparse parser of one method's options, built from its registered definition.

    Every shared run argument without a fixed `train` flag and every field of
    the method's config becomes a `--kebab-case` flag taking the same values,
    parsed by the field's type: bools get `--flag/--no-flag`, numbers their
    type (`none` too where None is allowed), tuples comma-separated lists,
    strings stay strings (with their choices). Options that take Python
    objects have no flag. Each flag's help is the option's doc line.

    Returns:
        `(parser, method)`: the parser (its `method_flags` lists the flags)
        and the `Method` class.
    """
    method = methods.get_method(method)
    parser = argparse.ArgumentParser(prog=f"keras-sentemb train {method.name}", add_help=add_help,
                                     allow_abbrev=False)
    group = parser.add_argument_group(f"{method.name} options")
    parser.method_flags = []
    shared, optional = method.run_arguments()
    fields = [a.as_option_field() for a in shared if a.name not in FIXED_RUN_ARGUMENTS]
    fields += list(method.config_class.option_fields())
    fields += [a.as_option_field() for a in optional]
    docs = {a.name: a.doc_line() for a in shared + optional}
    for field in fields:
        if field.spec.python_only:
            continue
        flag = "--" + field.name.replace("_", "-")
        parser.method_flags.append(flag)
        text = docs.get(field.name) or field.doc_line()
        group.add_argument(flag, dest=field.name, default=argparse.SUPPRESS,
                           help=text.replace("%", "%%"), **_flag_type(field))
    return parser, method


def train_help(method):
    """`keras-sentemb train METHOD --help`: the common flags, then the method's options."""
    common = argparse.ArgumentParser(add_help=False)
    _train_args(common)
    options, method = method_option_parser(method)
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
    from keras_sentemb.data.read_errors import reading  # imports TensorFlow
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
    resuming = args.resume and os.path.isdir(backup_dir)
    if looks_like_model(args.output) and not args.overwrite:
        raise UsageError(
            f"{args.output} already holds a trained model; pass --overwrite to train again "
            "into it, or choose another --output"
        )
    check_new_folder(args.output, overwrite=True, what="--output")
    common = {"model": args.model, "output": args.output}
    if args.num_layers is not None:
        common["model"] = load_encoder(args.model, num_layers=args.num_layers)
    for name in ("steps", "batch_size", "learning_rate", "max_length"):
        value = getattr(args, name)
        if value is not None:
            common[name] = value
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
            encoder = methods.fit(method.name, args.train_file, **common, callbacks=callbacks,
                                  **vars(options))
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
