"""`keras-sentemb export`: a SavedModel for TF Serving, a Hugging Face or keras-hub folder, or a LiteRT file."""

from keras_sentemb import export
from keras_sentemb.io_utils import reading_folder
from keras_sentemb.cli import static
from keras_sentemb.cli.common import UsageError
from keras_sentemb.cli.common import load_encoder
from keras_sentemb.cli.common import model_args
from keras_sentemb.cli.common import positive_float
from keras_sentemb.cli.common import positive_int
from keras_sentemb.cli.common import read_calibration


def add_parser(sub):
    """`export`'s flags."""
    p = sub.add_parser("export", allow_abbrev=False, help="export a SavedModel for TF Serving, a Hugging Face or keras-hub folder, or a LiteRT file")
    model_args(p)
    p.add_argument("--output", required=True, help="saved_models/NAME (a SavedModel), FILE.tflite (litert), else the folder")
    p.add_argument("--version", type=positive_int, default=None)
    p.add_argument("--format", choices=["saved-model", "sentence-transformers", "transformers", "litert",
                                        "model2vec", "keras-hub"],
                   default="saved-model")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing export (SavedModel version or folder), atomically")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default=None,
                   help="weights of a Hugging Face folder (default float32)")
    p.add_argument("--tolerance", type=positive_float, default=None,
                   help="largest relative error of the export against encode() (default 1e-4)")
    p.add_argument("--truncate-dim", type=positive_int, default=None,
                   help="the SavedModel returns the first K dimensions (renormalised when "
                        "the model normalises)")
    p.add_argument("--precision", choices=["float32", "bfloat16", "int8"], default=None,
                   help="what the SavedModel's serving graph computes in (default float32); "
                        "int8 runs on TensorFlow's oneDNN kernels")
    p.add_argument("--calibration", default=None, metavar="FILE",
                   help="with --precision int8: sentences to calibrate on, one per line "
                        "(default: 128 bundled Wikipedia sentences)")
    p.add_argument("--quantize", choices=["float32", "float16", "int8"], default=None,
                   help="weights of a LiteRT file: float32 (default), float16, or int8 "
                        "(dynamic range; float input and output)")
    return p


def _export_litert(args):
    from keras_sentemb.export.litert import export_litert

    if args.version is not None:
        raise UsageError("--version applies to --format saved-model, not litert")
    if args.dtype is not None:
        raise UsageError("--dtype applies to the Hugging Face formats; use --quantize for litert")
    encoder = load_encoder(args.model, args.pooling, args.max_length, args.num_layers)
    result = export_litert(
        encoder, args.output, quantize=args.quantize or "float32", max_length=args.max_length,
        tolerance=args.tolerance, truncate_dim=args.truncate_dim, overwrite=args.overwrite,
    )
    print(result["path"])
    return 0


def _precision_options(args, saved_model):
    """`export_saved_model`'s precision and calibration from the flags, after the checks."""
    if args.precision is not None and not saved_model:
        raise UsageError(f"--precision applies to --format saved-model, not {args.format}")
    if args.calibration is not None and args.precision != "int8":
        raise UsageError("--calibration applies to --precision int8")
    options = {}
    if args.precision is not None:
        options["precision"] = args.precision
    if args.calibration is not None:
        options["calibration"] = read_calibration(args.calibration)
    return options


def cmd_export(args):
    if static.is_static_model(args.model):
        return static.export(args)
    if args.format == "model2vec":
        raise UsageError("--format model2vec exports a static model (keras-sentemb train static)")
    if args.format == "litert":
        if args.precision is not None:
            raise UsageError("--precision applies to --format saved-model; use --quantize "
                             "for litert")
        return _export_litert(args)
    if args.quantize is not None:
        raise UsageError(f"--quantize applies to --format litert, not {args.format}")
    saved_model = args.format == "saved-model"
    if saved_model and args.dtype is not None:
        raise UsageError("--dtype applies to the Hugging Face formats; a SavedModel takes "
                         "--precision")
    if not saved_model and args.version is not None:
        raise UsageError(f"--version applies to --format saved-model, not {args.format}")
    if not saved_model and args.truncate_dim is not None:
        raise UsageError(f"--truncate-dim applies to --format saved-model, not {args.format}")
    if args.format == "keras-hub" and args.dtype not in (None, "float32"):
        raise UsageError("--dtype applies to the Hugging Face formats; a keras-hub preset holds "
                         "float32 weights")
    precision = _precision_options(args, saved_model)
    encoder = load_encoder(args.model, args.pooling, args.max_length, args.num_layers)
    tolerance = {} if args.tolerance is None else {"tolerance": args.tolerance}
    if saved_model:
        path = export.saved_model.export_saved_model(
            encoder, args.output, version=args.version, overwrite=args.overwrite,
            truncate_dim=args.truncate_dim, **tolerance, **precision,
        )
    elif args.format == "keras-hub":
        path = export.keras_hub_preset.export_keras_hub(
            encoder, args.output, overwrite=args.overwrite, **tolerance,
        )
    else:
        path = export.huggingface.export_huggingface(
            encoder, args.output, format=args.format, overwrite=args.overwrite,
            dtype=args.dtype or "float32", **tolerance,
        )
    print(path)
    return 0


def run(args):
    # A model folder that another process is writing (a training run into it) is refused
    # in one line; while this export reads it, no other process replaces it.
    with reading_folder(args.model):
        return cmd_export(args)
