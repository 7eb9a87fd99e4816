"""`keras-sentemb encode`: a text file to a `.npy`, or a corpus streamed to shards."""

import contextlib
import os
import sys

import numpy as np

from keras_sentemb import kernels
from keras_sentemb import models
from keras_sentemb.cli.common import UsageError
from keras_sentemb.cli.common import load_encoder
from keras_sentemb.cli.common import model_args
from keras_sentemb.cli.common import positive_int
from keras_sentemb.cli.common import read_calibration
from keras_sentemb.cli.common import read_lines
from keras_sentemb.io_utils import save_npy
from keras_sentemb.io_utils import write_file_atomic
from keras_sentemb.kernels.precision import ENCODE_PRECISIONS


def add_parser(sub):
    """`encode`'s flags."""
    p = sub.add_parser("encode", allow_abbrev=False, help="encode a text file (one sentence per line) to .npy")
    model_args(p)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--batch-size", type=positive_int, default=128)
    p.add_argument("--normalize", action="store_true")
    p.add_argument("--precision", choices=list(ENCODE_PRECISIONS),
                   default="auto",
                   help="auto (default): bfloat16 where the CPU computes it natively "
                        "(AVX512-BF16, AMX), else float32; int8: int8 matrix multiplies, "
                        "calibrated on --calibration (KERAS_SENTEMB_PRECISION pins auto)")
    p.add_argument("--calibration", default=None, metavar="FILE",
                   help="with --precision int8: sentences to calibrate on, one per line "
                        "(default: 128 bundled Wikipedia sentences)")
    p.add_argument("--shard-size", type=positive_int, default=None,
                   help="stream --input (a file or a glob) into shards of N lines in the "
                        "folder --output; resumable")
    p.add_argument("--shard-format", choices=["npy", "tfrecord"], default="npy")
    p.add_argument("--truncate-dim", type=positive_int, default=None,
                   help="keep the first K dimensions (renormalised when the model normalises)")
    return p


def cmd_encode_shards(args):
    """`encode --shard-size N`: stream FILE_OR_GLOB into shards in the folder --output."""
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise UsageError(f"--output {args.output} is a file; with --shard-size give a folder")
    if args.truncate_dim is not None:
        raise UsageError("--truncate-dim is not supported with --shard-size")
    try:
        models.sharded_encoding.match_inputs(args.input)
    except FileNotFoundError as e:
        raise UsageError(str(e)) from None
    encoder = load_precision_encoder(args)
    with contextlib.redirect_stdout(sys.stderr):
        manifest = encoder.encode_to_files(
            args.input, args.output, shard_size=args.shard_size, batch_size=args.batch_size,
            normalize=args.normalize, precision=args.precision,
            shard_format=args.shard_format, show_progress=True, model_name=args.model,
        )
    print(
        f"wrote {args.output}: {manifest['rows']} rows x {manifest['dim']} float32 in "
        f"{len(manifest['shards'])} shard(s) ({manifest['shards_skipped']} already there)",
        file=sys.stderr,
    )
    return 0


def cmd_encode(args):
    # This process only encodes: two batches side by side, each on its share
    # of the cores, beat one batch on all of them (keras_sentemb.kernels.cpu_threads).
    kernels.cpu_threads.configure_encode_threads()
    if args.shard_size is not None:
        return cmd_encode_shards(args)
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if os.path.isdir(args.output):
        raise UsageError(
            f"--output {args.output} is a folder; give a .npy file path, or --shard-size N "
            "to stream the input into shards in that folder"
        )
    if not os.path.isdir(out_dir):
        raise UsageError(f"output folder does not exist: {out_dir}")
    if not os.access(out_dir, os.W_OK):
        raise UsageError(f"output folder is not writable: {out_dir}")
    sentences = read_lines(args.input)
    encoder = load_precision_encoder(args)
    with contextlib.redirect_stdout(sys.stderr):  # the progress bar is not a result
        vectors = encoder.encode(
            sentences,
            batch_size=args.batch_size,
            normalize=args.normalize,
            show_progress=None if sys.stderr.isatty() else False,
            precision=args.precision,
            truncate_dim=args.truncate_dim,
        )
    # Never a half-written .npy: a temporary file, renamed when complete.
    write_file_atomic(args.output, lambda f: save_npy(f, vectors.astype(np.float32)))
    print(
        f"wrote {args.output}: {vectors.shape[0]} x {vectors.shape[1]} float32",
        file=sys.stderr,
    )
    return 0


def load_precision_encoder(args):
    """MODEL loaded for `--precision` (with `--calibration` for int8), after the checks."""
    calibration = None
    if args.calibration is not None:
        if args.precision != "int8":
            raise UsageError("--calibration applies to --precision int8")
        calibration = read_calibration(args.calibration)
    if args.precision == "int8":
        from keras_sentemb.kernels.int8_transformer import int8_available

        available, why = int8_available()
        if not available:
            raise UsageError(f"--precision int8: {why}")
    encoder = load_encoder(args.model, args.pooling, args.max_length, args.num_layers,
                           args.precision)
    if calibration is not None:
        encoder.int8_calibration = calibration
    show_kernels(args, encoder, args.precision)
    return encoder


def show_kernels(args, encoder, precision=None):
    """With `--verbose`: which kernel each op uses on this CPU and why (stderr)."""
    if getattr(args, "show_kernels", False):
        from keras_sentemb.kernels.report import kernel_report

        print(kernel_report(encoder, precision=precision), file=sys.stderr)


def run(args):
    return cmd_encode(args)
