"""`encode` and `export` of a static folder (`keras-sentemb train static`'s output).

`keras-sentemb encode --model STATIC_DIR` never imports TensorFlow or Keras:
the folder is read and encoded in numpy with the Hugging Face tokenizer
(`keras_sentemb.models.static_runtime`), so the whole process takes about
as long as the encoding itself. `export` writes the static encoder's
formats (`keras_sentemb.export.static_formats`).
"""

import os
import sys

import numpy as np

from keras_sentemb.cli.common import UsageError
from keras_sentemb.cli.common import read_lines
from keras_sentemb.io_utils import save_npy
from keras_sentemb.io_utils import write_file_atomic
from keras_sentemb.models import static_runtime
from keras_sentemb.models.folder_inspection import UnsafeFolderError

# `encode` flags a static folder cannot honour, with why.
ENCODE_REFUSED = {
    "shard_size": "--shard-size is not supported for static models (encode the file in one go: "
                  "26,000 sentences take about a second)",
    "calibration": "--calibration applies to Transformer models (a static table has no int8 "
                   "calibration)",
    "num_layers": "--num-layers applies to Transformer models; a static model has no layers",
}


def is_static_model(model):
    """Whether MODEL names a static folder."""
    return isinstance(model, str) and static_runtime.is_static_folder(model)


def _check_encode_flags(args):
    for name, why in ENCODE_REFUSED.items():
        if getattr(args, name, None) is not None:
            raise UsageError(why)
    if args.pooling not in (None, "mean"):
        raise UsageError(f"--pooling {args.pooling}: a static model averages its token vectors "
                         "(mean)")
    if args.precision not in ("auto", "float32"):
        raise UsageError(f"--precision {args.precision} applies to Transformer models; a static "
                         "model computes in float32 from its stored table")


def encode(args):
    """`keras-sentemb encode --model STATIC_DIR --input FILE --output FILE.npy` in numpy."""
    _check_encode_flags(args)
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if os.path.isdir(args.output) or not os.path.isdir(out_dir):
        raise UsageError(f"--output {args.output}: give a .npy file path in an existing folder")
    sentences = read_lines(args.input)
    try:
        table = static_runtime.StaticTable.from_folder(args.model)
    except (static_runtime.StaticFolderError, UnsafeFolderError) as e:
        raise UsageError(str(e)) from None
    vectors = table.encode(sentences, batch_size=max(args.batch_size, 1024),
                           normalize=args.normalize, max_length=args.max_length)
    if args.truncate_dim is not None:
        if args.truncate_dim > table.dim:
            raise UsageError(f"--truncate-dim {args.truncate_dim} exceeds the model's "
                             f"{table.dim} dimensions")
        vectors = vectors[:, :args.truncate_dim]
        if table.normalize or args.normalize:
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.maximum(norms, 1e-12)
    write_file_atomic(args.output, lambda f: save_npy(f, np.ascontiguousarray(vectors,
                                                                              np.float32)))
    print(f"wrote {args.output}: {vectors.shape[0]} x {vectors.shape[1]} float32",
          file=sys.stderr)
    return 0


def run_encode(args):
    """`encode` of a static folder, with user errors as one line (exit status 2)."""
    from keras_sentemb.cli.common import report_error

    try:
        return encode(args)
    except UsageError as e:
        return report_error(str(e))
    except OSError as e:
        return report_error(f"cannot write {args.output}: {e.strerror or e}")


def export(args):
    """`keras-sentemb export --model STATIC_DIR --format F --output ...`."""
    from keras_sentemb.export.static_formats import export_static

    for flag, value in (("--precision", args.precision), ("--dtype", args.dtype),
                        ("--calibration", args.calibration), ("--num-layers", args.num_layers)):
        if value is not None:
            raise UsageError(f"{flag} applies to Transformer models, not to a static model")
    if args.truncate_dim is not None:
        raise UsageError("--truncate-dim is not supported for static exports; train with --dims "
                         "D (or --matryoshka-dims) and export the model at that size")
    if args.format != "saved-model" and args.version is not None:
        raise UsageError(f"--version applies to --format saved-model, not {args.format}")
    if args.format != "litert" and args.quantize is not None:
        raise UsageError(f"--quantize applies to --format litert, not {args.format}")
    if args.format == "keras-hub":
        raise UsageError("--format keras-hub writes a Transformer's TextEmbedder; a static model "
                         "exports as sentence-transformers, model2vec, saved-model or litert")
    if args.format == "transformers":
        raise UsageError("--format transformers exports a Transformer; a static model exports "
                         "as sentence-transformers, model2vec, saved-model or litert")
    options = {"overwrite": args.overwrite}
    if args.tolerance is not None:
        options["tolerance"] = args.tolerance
    if args.format == "litert":
        options.update(quantize=args.quantize or "float32", max_length=args.max_length)
    if args.format == "saved-model":
        options["version"] = args.version
    result = export_static(args.model, args.output, format=args.format, **options)
    print(result["path"])
    return 0
