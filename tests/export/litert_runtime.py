"""Runs a `.tflite` file in the stand-alone LiteRT runtimes, in a process of their own.

`python tests/export/litert_runtime.py MODE MODEL INPUT.json OUTPUT.npy`:

- `litert`: `ai_edge_litert.interpreter.Interpreter`'s `serving_default`
  signature runner on token ids (`INPUT.json`: `{"ids": [[...]], "mask": [[...]]}`);
- `mediapipe`: `mediapipe.tasks.python.text.text_embedder.TextEmbedder` on
  raw sentences (`INPUT.json`: a list of str), which tokenizes with the
  vocabulary packed in the file's metadata; the file's metadata is also
  parsed with MediaPipe's own generated metadata schema and printed as JSON.
- `check`: prints which of the two runtimes import here.
"""

import importlib.util
import json
import os
import sys

import numpy as np


def run_litert(model, request):
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=model, num_threads=1).get_signature_runner("serving_default")
    rows = []
    for ids, mask in zip(request["ids"], request["mask"]):
        ids = np.asarray([ids], np.int32)
        out = runner(input_word_ids=ids, input_mask=np.asarray([mask], np.int32),
                     input_type_ids=np.zeros_like(ids))
        rows.append(out["embedding"][0])
    return np.stack(rows)


def parse_metadata(model):
    """The metadata, read with MediaPipe's generated code for metadata_schema.fbs."""
    import zipfile

    from mediapipe.tasks.metadata import metadata_schema_py_generated as md
    from mediapipe.tasks.metadata import schema_py_generated as schema

    data = open(model, "rb").read()
    root = schema.Model.GetRootAsModel(data, 0)
    buffer = next(root.Metadata(i).Buffer() for i in range(root.MetadataLength())
                  if root.Metadata(i).Name() == b"TFLITE_METADATA")
    raw = root.Buffers(buffer).DataAsNumpy().tobytes()
    assert md.ModelMetadata.ModelMetadataBufferHasIdentifier(raw, 0)
    meta = md.ModelMetadataT.InitFromObj(md.ModelMetadata.GetRootAsModelMetadata(raw, 0))
    subgraph = meta.subgraphMetadata[0]
    units = subgraph.inputProcessUnits or []
    return {
        "min_parser_version": meta.minParserVersion.decode(),
        "inputs": [t.name.decode() for t in subgraph.inputTensorMetadata],
        "outputs": [t.name.decode() for t in subgraph.outputTensorMetadata],
        "process_units": [u.optionsType for u in units],
        "vocab_files": [f.name.decode() for u in units for f in (u.options.vocabFile or [])],
        "zip": sorted(zipfile.ZipFile(model).namelist()),
    }


def run_mediapipe(model, sentences):
    from mediapipe.tasks.python.core.base_options import BaseOptions
    from mediapipe.tasks.python.text import text_embedder

    options = text_embedder.TextEmbedderOptions(base_options=BaseOptions(model_asset_path=model))
    with text_embedder.TextEmbedder.create_from_options(options) as embedder:
        return np.stack([np.asarray(embedder.embed(s).embeddings[0].embedding, np.float32)
                         for s in sentences])


def main(argv):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    mode = argv[0]
    if mode == "check":
        print(json.dumps({name: importlib.util.find_spec(name) is not None
                          for name in ("ai_edge_litert", "mediapipe")}))
        return 0
    model, request, output = argv[1:4]
    with open(request, encoding="utf-8") as f:
        request = json.load(f)
    if mode == "litert":
        vectors = run_litert(model, request)
    else:
        print(json.dumps(parse_metadata(model)))
        vectors = run_mediapipe(model, request)
    np.save(output, vectors)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
