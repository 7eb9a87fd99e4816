"""Apache Beam pipelines (optional extra: `pip install -e ".[beam]"` in the repository).

`keras_sentemb.beam.encode_pipeline` embeds text shards into embedding
shards on any Beam runner (DirectRunner locally; Dataflow, Flink or Spark
by flags). Importing this package does not import Apache Beam.
"""
