"""The contract and the gate of a LiteRT export: op codes, signature, parity with `encode()`.

`verify_litert` runs a `.tflite` file's bytes in the LiteRT interpreter on
probe sentences tokenized by the encoder and compares each vector with
`encoder.encode(max_length=L, precision="float32")` (relative error, see
`keras_sentemb.export.parity`); `operator_codes` and `subgraph_input_names`
read the file's flatbuffer with TensorFlow's generated TFLite schema.
"""

import warnings

import numpy as np

from keras_sentemb.export.parity import ExportVerificationError
from keras_sentemb.export.parity import compare
from keras_sentemb.export.parity import reference_vectors

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")
OUTPUT_NAME = "embedding"
SIGNATURE_KEY = "serving_default"
# Builtin operator code of custom ops (Flex ops included) in the TFLite schema.
CUSTOM_OPERATOR = 32
# Sentences the file is checked on besides the shared probes: ASCII text, the
# domain where MediaPipe's tokenizer equals the encoder's.
ASCII_PROBES = (
    "A man is playing a guitar.",
    "A woman is slicing an onion.",
    "Two dogs are running through a field of tall grass!",
    "What time does the train to Boston leave?",
)



def _interpreter(model_content):
    """TensorFlow's LiteRT interpreter (the same kernels as `ai_edge_litert`'s).

    The package needs no LiteRT wheel: the gate runs the file in the copy of
    the interpreter TensorFlow ships, falling back to `ai_edge_litert` where
    a TensorFlow build no longer has it. The tests run the stand-alone
    `ai_edge_litert` interpreter and MediaPipe in their own processes.
    """
    import tensorflow as tf

    interpreter = getattr(getattr(tf, "lite", None), "Interpreter", None)
    if interpreter is None:
        from ai_edge_litert.interpreter import Interpreter as interpreter
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tf.lite.Interpreter's notice that ai_edge_litert exists
        return interpreter(model_content=model_content, num_threads=1)


def operator_codes(model):
    """`(builtin codes, custom op names)` of a `.tflite` flatbuffer (bytes)."""
    from keras_sentemb import compat

    schema = compat.tflite_schema()
    root = schema.Model.GetRootAsModel(bytearray(model), 0)
    builtins, custom = set(), set()
    for i in range(root.OperatorCodesLength()):
        code = root.OperatorCodes(i)
        value = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        if value == CUSTOM_OPERATOR:
            custom.add((code.CustomCode() or b"").decode("utf-8", "replace"))
        else:
            builtins.add(value)
    return sorted(builtins), sorted(custom)


def subgraph_input_names(model):
    """The input names of the `serving_default` signature in subgraph input order."""
    from keras_sentemb import compat

    schema = compat.tflite_schema()
    root = schema.Model.GetRootAsModel(bytearray(model), 0)
    subgraph = root.Subgraphs(0)
    signature = root.SignatureDefs(0)
    by_tensor = {}
    for i in range(signature.InputsLength()):
        item = signature.Inputs(i)
        by_tensor[item.TensorIndex()] = item.Name().decode("utf-8")
    return [by_tensor[subgraph.Inputs(i)] for i in range(subgraph.InputsLength())]


# --------------------------------------------------------------- verify
def run_litert(model_content, token_ids, padding_mask):
    """Embeddings `[n, dim]` of packed rows `[n, L]` through the file's `serving_default`."""
    interpreter = _interpreter(model_content)
    runner = interpreter.get_signature_runner(SIGNATURE_KEY)
    rows = []
    for ids, mask in zip(token_ids, padding_mask):
        out = runner(input_word_ids=ids[None].astype(np.int32),
                     input_mask=mask[None].astype(np.int32),
                     input_type_ids=np.zeros_like(ids[None], np.int32))
        rows.append(np.asarray(out[OUTPUT_NAME], np.float32)[0])
    return np.stack(rows)


def pack_ids(encoder, sentences, length):
    """`(token_ids, padding_mask)` int32 `[n, length]`: the encoder's tokens, padded to `length`."""
    import tensorflow as tf

    from keras_sentemb.models.encoding_engine import to_text

    batch = tf.constant([to_text(s).encode("utf-8") for s in sentences])
    packed = encoder.preprocess(batch, length)
    ids, mask = packed["token_ids"].numpy(), packed["padding_mask"].numpy()
    pad = length - ids.shape[1]
    ids = np.pad(ids, [(0, 0), (0, pad)], constant_values=encoder.pad_token_id)
    mask = np.pad(mask.astype(np.int32), [(0, 0), (0, pad)])
    return ids.astype(np.int32), mask


def verify_litert(model_content, encoder, length, tolerance, truncate_dim=None, sentences=None):
    """Run the file in the LiteRT interpreter and compare it with `encoder.encode` row by row.

    Checks the contract (signature `serving_default`, three int32 `[1, L]`
    inputs, one float32 `[1, dim]` output `embedding`, builtin ops only),
    then the probe sentences' vectors (relative error, see
    `keras_sentemb.export.parity`).

    Returns:
        dict with `max_rel_diff`, `min_cosine`, `mean_cosine`, `max_abs_diff`,
        `tolerance` and `num_probes`.

    Raises:
        ExportVerificationError: the contract does not hold or a row is off.
    """
    from keras_sentemb.export.parity import relative_errors
    from keras_sentemb.export.saved_model import PROBE_SENTENCES

    _, custom = operator_codes(model_content)
    if custom:
        raise ExportVerificationError(f"The LiteRT file needs custom ops {custom}.")
    interpreter = _interpreter(model_content)
    signatures = interpreter.get_signature_list()
    dim = encoder.output_dim if truncate_dim is None else truncate_dim
    if list(signatures) != [SIGNATURE_KEY]:
        raise ExportVerificationError(f"The LiteRT file has signatures {sorted(signatures)}.")
    runner = interpreter.get_signature_runner(SIGNATURE_KEY)
    inputs, outputs = runner.get_input_details(), runner.get_output_details()
    got = {k: (tuple(v["shape"]), np.dtype(v["dtype"]).name) for k, v in inputs.items()}
    want = {k: ((1, length), "int32") for k in INPUT_NAMES}
    out = {k: (tuple(v["shape"]), np.dtype(v["dtype"]).name) for k, v in outputs.items()}
    if got != want or out != {OUTPUT_NAME: ((1, dim), "float32")}:
        raise ExportVerificationError(
            f"The LiteRT signature is {got} -> {out}; expected {want} -> "
            f"{{{OUTPUT_NAME!r}: ((1, {dim}), 'float32')}}."
        )
    probes = list(PROBE_SENTENCES) + list(ASCII_PROBES) + list(sentences or [])
    ids, mask = pack_ids(encoder, probes, length)
    vectors = run_litert(model_content, ids, mask)
    # Every LiteRT file computes float32 (float16 and int8 files store smaller
    # weights, dequantized in the graph), so the reference is float32 whatever
    # this process's `encode()` defaults to.
    ref = reference_vectors(encoder, probes, "float32", max_length=length,
                            truncate_dim=truncate_dim)
    report = compare(vectors, ref, tolerance, "The LiteRT file", probes)
    report["mean_cosine"] = float(relative_errors(vectors, ref)[1].mean())
    report["num_probes"] = len(probes)
    return report
