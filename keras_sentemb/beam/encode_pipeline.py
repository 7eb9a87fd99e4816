"""Embed text shards into embedding shards with Apache Beam's RunInference.

    python -m keras_sentemb.beam.encode_pipeline --model default \\
        --input 'corpus/*.txt' --output corpus_embeddings --shard-size 100000

Any other flag is a Beam pipeline option, so the same pipeline runs on many
machines by flags alone, e.g. Dataflow:

    python -m keras_sentemb.beam.encode_pipeline --model gs://bucket/my_encoder \\
        --input 'gs://bucket/text/*.txt' --output gs://bucket/embeddings \\
        --runner DataflowRunner --project P --region us-central1 \\
        --temp_location gs://bucket/tmp --setup_file ./setup.py

Flink (`--runner FlinkRunner --flink_master HOST:8081 --environment_type
DOCKER`) and Spark (`--runner SparkRunner --spark_master_url spark://HOST:7077`)
work the same way; the workers need keras_sentemb installed (`--setup_file`
or a custom container).

The output folder has exactly the layout of
`SentenceEncoder.encode_to_files` (see
`keras_sentemb.models.sharded_encoding`): one shard per `shard_size` lines
of each input file, `(file_index, line)` ids, a `manifest.json` marked
complete at the end; read it with `read_embedding_shards`.

The pipeline: the sorted input files are numbered; each is read line by
line into `((file, line), text)`; `RunInference` with
`SentenceEncoderModelHandler` (one encoder per worker process, batches of
`batch_size` sentences) embeds them; rows are grouped by `(file,
line // shard_size)` and each group is written as one shard.
"""

import argparse
import contextlib
import os
import sys

from keras_sentemb.missing_dependency import is_missing
from keras_sentemb.missing_dependency import missing_dependency


@contextlib.contextmanager
def _without_torch():
    """Imports inside see PyTorch as absent (unless this process already loaded it).

    `apache_beam.ml.inference.base` tries `import torch` for its GPU model
    manager, which this pipeline does not use, and falls back when the import
    fails. TensorFlow and PyTorch must not share a process (their LLVM copies
    clash), so the Beam import takes the fallback. Afterwards `import torch`
    works again for any code that asks for it.
    """
    hidden = "torch" not in sys.modules
    if hidden:
        sys.modules["torch"] = None  # makes `import torch` raise ImportError
    try:
        yield
    finally:
        if hidden and sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]


try:
    with _without_torch():
        import apache_beam as beam
        from apache_beam.ml.inference.base import KeyedModelHandler
        from apache_beam.ml.inference.base import ModelHandler
        from apache_beam.ml.inference.base import PredictionResult
        from apache_beam.ml.inference.base import RunInference
        from apache_beam.options.pipeline_options import PipelineOptions
except ImportError as e:
    if not is_missing(e, "apache_beam"):
        raise
    _missing = missing_dependency("apache_beam", "The Beam pipeline", "beam")
    if __name__ == "__main__":  # run as a program: one line, no traceback
        sys.exit(f"keras_sentemb.beam.encode_pipeline: error: {_missing}")
    raise _missing from None
import numpy as np
import tensorflow as tf

from keras_sentemb import validation
from keras_sentemb.models import SentenceEncoder
from keras_sentemb.models import sharded_encoding


class SentenceEncoderModelHandler(ModelHandler):
    """A Beam `ModelHandler` that embeds strings with a `SentenceEncoder`.

    Args:
        model: str. What `SentenceEncoder.from_preset` loads (`"default"`, a
            folder saved by keras_sentemb, a Hugging Face folder; `gs://`
            folders work where TensorFlow reads them).
        batch_size: int. Sentences per `RunInference` batch. Defaults to
            `128`.
        max_length: int or None. Defaults to the encoder's.
        pooling: str or None. Defaults to the encoder's.
        normalize: bool. Defaults to `False`.
        precision: str. `"float32"` or `"bfloat16"`. Defaults to
            `"float32"`, not `encode()`'s `"auto"`: a pipeline's workers
            may run on different CPUs, and `"auto"` would give bfloat16
            rows on some and float32 rows on others in one output.

    Examples:

    ```python
    handler = KeyedModelHandler(SentenceEncoderModelHandler(model="default"))
    vectors = keyed_sentences | RunInference(handler)
    ```
    """
    def __init__(self, model, batch_size=128, max_length=None, pooling=None,
                 normalize=False, precision="float32"):
        super().__init__(min_batch_size=1, max_batch_size=batch_size)
        self.model = model
        self.batch_size = batch_size
        self.max_length = max_length
        self.pooling = pooling
        self.normalize = normalize
        self.precision = precision

    def load_model(self):
        return SentenceEncoder.from_preset(self.model)

    def run_inference(self, batch, model, inference_args=None):
        vectors = model.encode(
            list(batch), batch_size=self.batch_size,
            max_length=self.max_length, pooling=self.pooling, normalize=self.normalize,
            show_progress=False, precision=self.precision,
        )
        return [PredictionResult(example, vector) for example, vector in zip(batch, vectors)]

    def share_model_across_processes(self):
        return False


def read_numbered_lines(element):
    """`(file_index, path)` -> `((file_index, line), text)` for every line."""
    file_index, path = element
    for line, text in enumerate(sharded_encoding.iter_lines(path)):
        yield (file_index, line), text


class WriteShard(beam.DoFn):
    """`((file, shard), [(line, vector), ...])` -> one shard on disk; yields its rows."""

    def __init__(self, output_dir, shard_format):
        self.output_dir = output_dir
        self.shard_format = shard_format

    def process(self, element):
        (file_index, shard_index), rows = element
        rows = sorted(rows, key=lambda r: r[0])
        ids = np.array([[file_index, line] for line, _ in rows], dtype=np.int64)
        vectors = np.stack([np.asarray(v, dtype=np.float32) for _, v in rows])
        name = sharded_encoding.shard_name(file_index, shard_index)
        sharded_encoding.write_shard(self.output_dir, name, ids, vectors, self.shard_format)
        yield {"name": name, "file": int(file_index),
               "first_line": int(ids[0, 1]), "rows": int(len(rows))}


def build_pipeline(pipeline, input_glob, output_dir, model="default", shard_size=100_000,
                   batch_size=128, max_length=None, pooling=None, normalize=False,
                   precision="float32", shard_format="npy"):
    """Add the encode steps to `pipeline`; returns the PCollection of shard records.

    Writes `manifest.json` (settings, then `"complete": true` with the rows
    and shards once every shard is written).

    Args:
        pipeline: `beam.Pipeline`.
        input_glob: str. Text files (a path or glob, local or `gs://`).
        output_dir: str. The shard folder (created).
        model, batch_size, max_length, pooling, normalize, precision: see
            `SentenceEncoderModelHandler`.
        shard_size: int. Lines per shard. Defaults to `100_000`.
        shard_format: str. `"npy"` or `"tfrecord"`. Defaults to `"npy"`.
    """
    shard_size = validation.positive_int(shard_size, "shard_size")
    validation.choice(shard_format, "shard_format", sharded_encoding.FORMATS)
    files = sharded_encoding.match_inputs(input_glob)
    tf.io.gfile.makedirs(output_dir)
    manifest = {
        "inputs": [f if "://" in f else os.path.abspath(f) for f in files],
        "model": model,
        "pooling": pooling,
        "normalize": bool(normalize),
        "max_length": max_length,
        "precision": precision,
        "shard_size": shard_size,
        "format": shard_format,
        "runner": "beam",
    }
    sharded_encoding.write_manifest(output_dir, manifest)
    handler = KeyedModelHandler(SentenceEncoderModelHandler(
        model, batch_size=batch_size, max_length=max_length, pooling=pooling,
        normalize=normalize, precision=precision,
    ))

    def by_shard(result):
        (file_index, line), prediction = result
        return (file_index, line // shard_size), (line, prediction.inference)

    def finish(records):
        records = sorted(records, key=lambda r: r["name"])
        done = dict(manifest, complete=True, rows=sum(r["rows"] for r in records),
                    shards=records)
        sharded_encoding.write_manifest(output_dir, done)
        return done

    shards = (
        pipeline
        | "Files" >> beam.Create(list(enumerate(files)))
        | "ReadLines" >> beam.FlatMap(read_numbered_lines)
        | "Reshuffle" >> beam.Reshuffle()
        | "Embed" >> RunInference(handler)
        | "ByShard" >> beam.Map(by_shard)
        | "GroupShards" >> beam.GroupByKey()
        | "WriteShards" >> beam.ParDo(WriteShard(output_dir, shard_format))
    )
    _ = shards | "AllShards" >> beam.combiners.ToList() | "Manifest" >> beam.Map(finish)
    return shards


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m keras_sentemb.beam.encode_pipeline",
        description="Embed text shards into embedding shards on any Beam runner; "
                    "other flags are Beam pipeline options (--runner, --project, ...).",
    )
    parser.add_argument("--model", default="default")
    parser.add_argument("--input", required=True, help="text file(s): a path or a glob")
    parser.add_argument("--output", required=True, help="the shard folder")
    parser.add_argument("--shard-size", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--max-length", type=int, default=None)
    parser.add_argument("--pooling", default=None)
    parser.add_argument("--normalize", action="store_true")
    parser.add_argument("--precision", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--shard-format", choices=["npy", "tfrecord"], default="npy")
    args, beam_args = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    options = PipelineOptions(beam_args)
    with beam.Pipeline(options=options) as pipeline:
        build_pipeline(
            pipeline, args.input, args.output, model=args.model, shard_size=args.shard_size,
            batch_size=args.batch_size, max_length=args.max_length, pooling=args.pooling,
            normalize=args.normalize, precision=args.precision, shard_format=args.shard_format,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
