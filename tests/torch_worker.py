"""The PyTorch side of the interoperability tests, in its own interpreter.

Run as `python tests/torch_worker.py`: reads one JSON request per line on
stdin, answers one JSON line on stdout, and writes arrays to the `.npz` file
each request names. It never imports TensorFlow (the guard refuses it), so it
loads an exported folder exactly as a user's PyTorch service would.

Requests (`{"op": ..., "out": "FILE.npz", ...}`):

- `st_encode`: `folder`, `sentences`, `batch_size` -> `vectors`
  (`SentenceTransformer(folder, device="cpu").encode(...)`).
- `hf_hidden_states`: `folder`, `sentences` -> `last_hidden_state`,
  `input_ids`, `attention_mask` (`AutoModel` / `AutoTokenizer`), and
  `model_class` in the answer.
- `hf_token_ids`: `folder`, `sentences` -> one `ids_I` array per sentence
  (`AutoTokenizer(sentence)["input_ids"]`, no padding).
- `st_quantize`: `inputs` (an `.npz` with `embeddings` and optionally
  `calibration_embeddings` or `ranges`), `precision` ->
  `quantized` (`sentence_transformers.quantization.quantize_embeddings`).
- `call`: `path` (a Python file), `function` and any fields -> what
  `function(request)` writes to `out` and returns: a method folder's PyTorch
  side of its reference check (`MethodTest.reference`), loaded from its file
  so that the package is never imported here.

Answers: `{"ok": true, ...}` or `{"ok": false, "error": "traceback"}`.
"""

import json
import os
import sys
import traceback

os.environ.setdefault("USE_TF", "0")  # transformers: never reach for TensorFlow
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import process_guard  # noqa: E402

process_guard.install()

import numpy as np  # noqa: E402


def st_encode(request):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(request["folder"], device="cpu")
    vectors = model.encode(request["sentences"], convert_to_numpy=True,
                           batch_size=request.get("batch_size", 8))
    np.savez(request["out"], vectors=vectors)
    return {}


def hf_hidden_states(request):
    import torch
    import transformers

    model = transformers.AutoModel.from_pretrained(request["folder"])
    tokenizer = transformers.AutoTokenizer.from_pretrained(request["folder"])
    batch = tokenizer(request["sentences"], padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state.numpy()
    np.savez(request["out"], last_hidden_state=hidden, input_ids=batch["input_ids"].numpy(),
             attention_mask=batch["attention_mask"].numpy())
    return {"model_class": type(model).__name__}


def hf_token_ids(request):
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(request["folder"])
    ids = {f"ids_{i}": np.asarray(tokenizer(s)["input_ids"], np.int64)
           for i, s in enumerate(request["sentences"])}
    np.savez(request["out"], **ids)
    return {}


def st_quantize(request):
    from sentence_transformers.quantization import quantize_embeddings

    inputs = np.load(request["inputs"])
    kwargs = {}
    if "calibration_embeddings" in inputs:
        kwargs["calibration_embeddings"] = inputs["calibration_embeddings"]
    if "ranges" in inputs:
        kwargs["ranges"] = inputs["ranges"]
    quantized = quantize_embeddings(inputs["embeddings"], request["precision"], **kwargs)
    np.savez(request["out"], quantized=quantized)
    return {}


def call(request):
    import importlib.util

    spec = importlib.util.spec_from_file_location("method_reference", request["path"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    answer = getattr(module, request["function"])(request) or {}
    if not os.path.exists(request["out"]):
        np.savez(request["out"])  # a function that answers with numbers only
    return answer


OPS = {f.__name__: f for f in (st_encode, hf_hidden_states, hf_token_ids, st_quantize, call)}


def main():
    # Answers go to the original stdout; anything the libraries print goes to stderr.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            answer = {"ok": True, **OPS[request["op"]](request)}
        except Exception:  # the test process shows the worker's traceback
            answer = {"ok": False, "error": traceback.format_exc()}
        answer["tensorflow_loaded"] = "tensorflow" in sys.modules
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
