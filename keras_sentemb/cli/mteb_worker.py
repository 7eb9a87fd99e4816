"""The TensorFlow side that `keras_sentemb.mteb_model` starts: loads MODEL, answers encode requests.

Run by `mteb_model` as `python -m keras_sentemb.cli.mteb_worker`; it
writes one line `{"name", "dim", "max_length", "precision"}` when the model
is loaded, then serves (`mteb_wire.serve`) until the MTEB side closes the
pipe. A model that cannot be loaded: one line on stderr, status 2.
"""

import argparse
import os
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m keras_sentemb.cli.mteb_worker")
    parser.add_argument("--model", required=True)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--pooling", default=None)
    parser.add_argument("--max-length", type=int, default=None)
    parser.add_argument("--num-layers", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--requests-fd", type=int, required=True)
    parser.add_argument("--replies-fd", type=int, required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import json

    from keras_sentemb.cli.common import load_encoder
    from keras_sentemb.evaluation.mteb_wire import serve
    from keras_sentemb.quiet_startup import quiet_tensorflow_startup

    replies = os.fdopen(args.replies_fd, "wb")
    requests = os.fdopen(args.requests_fd, "rb")
    try:
        with quiet_tensorflow_startup():
            encoder = load_encoder(args.model, args.pooling, args.max_length, args.num_layers)
    except (OSError, ValueError) as e:
        print(f"error: cannot load {args.model}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    hello = {"name": os.path.basename(os.path.normpath(args.model)), "dim": int(encoder.output_dim),
             "max_length": getattr(encoder, "max_length", None), "precision": args.precision}
    replies.write((json.dumps(hello) + "\n").encode("utf-8"))
    replies.flush()

    def encode(texts):
        return encoder.encode(texts, batch_size=args.batch_size, precision=args.precision,
                              show_progress=False)

    try:
        serve(encode, requests, replies, args.workdir)
    except BrokenPipeError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
