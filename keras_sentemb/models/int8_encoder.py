"""int8 weights for a `SentenceEncoder`: what `encode(precision="int8")` and int8 exports run.

`prepare_int8(encoder)` measures each Transformer layer's activation ranges
on calibration sentences (`int8_transformer.calibration_ranges`) and binds
int8 weights (`Int8Weights`) to every layer; graphs declared int8
(`kernels.policy.declare_graph(int8=True)`) then compute each layer through
`int8_transformer.int8_call`, and every other graph as before. The int8
weights are built again when the encoder's weights or its calibration
sentences change. An encoder that does not compute in float32 (a bfloat16
copy) gets a float32 copy that holds them.

The calibration sentences are the encoder's `int8_calibration` (any text
like what will be encoded; a hundred or a few hundred sentences), else the
first `DEFAULT_CALIBRATION_SIZE` sentences of the bundled Wikipedia sample.
"""

from pathlib import Path
import functools

from keras_sentemb.kernels import int8_transformer
from keras_sentemb.models.weights_signature import follow_weights
from keras_sentemb.models.weights_signature import weights_signature

DEFAULT_CALIBRATION_SIZE = 128
CALIBRATION_BATCH_SIZE = 64
# The bundled Wikipedia sample (`keras_sentemb.data.resources.bundled_corpus`).
BUNDLED_SENTENCES = Path(__file__).resolve().parents[1] / "resources" / "wiki" / "wiki10k.txt"
# Where an encoder keeps the fingerprint its int8 weights were built for.
KEY_ATTRIBUTE = "_keras_sentemb_int8_key"
FLOAT32_COPY = "int8-float32"


@functools.lru_cache(maxsize=4)
def bundled_calibration_sentences(count=DEFAULT_CALIBRATION_SIZE):
    """The first `count` sentences of the bundled Wikipedia sample (read once)."""
    with open(BUNDLED_SENTENCES, encoding="utf-8") as f:
        return tuple(line.rstrip("\n") for _, line in zip(range(count), f))


def check_calibration(sentences):
    """`sentences` as a tuple of str (at least one non-empty), or a one-line error."""
    if isinstance(sentences, (str, bytes)) or not hasattr(sentences, "__iter__"):
        raise TypeError("int8 calibration sentences must be a list of str; received "
                        f"{type(sentences).__name__}.")
    sentences = tuple(sentences)
    if not all(isinstance(s, str) for s in sentences):
        raise TypeError("int8 calibration sentences must all be str.")
    if not any(s.strip() for s in sentences):
        raise ValueError("int8 calibration needs at least one non-empty sentence.")
    return sentences


def check_int8(encoder):
    """Raise a one-line error where `encoder` cannot compute in int8 here."""
    available, why = int8_transformer.int8_available()
    if not available:
        raise RuntimeError(why)
    layers = encoder.adapter.transformer_layers
    unsupported = [layer.name for layer in layers if not int8_transformer.supports_int8(layer)]
    if unsupported:
        raise ValueError(
            "int8 inference computes keras-hub BERT / RoBERTa Transformer layers with a GELU "
            f"feed-forward; these layers are not such: {', '.join(unsupported)}."
        )


def prepare_int8(encoder):
    """The encoder to compute `encoder`'s int8 forward pass with, its int8 weights current.

    `encoder` itself when it computes in float32, else a float32 copy of it
    (kept with it). See the module docstring.
    """
    sentences = encoder.int8_calibration or bundled_calibration_sentences()
    target = int8_target(encoder)
    key = (weights_signature(target), hash(tuple(sentences)))
    if target.__dict__.get(KEY_ATTRIBUTE) == key:
        return target
    check_int8(target)
    layers = target.adapter.transformer_layers
    for layer in layers:  # calibrated on the float32 layers
        int8_transformer.attach(layer, None)
    batches = [(ids, mask) for _, ids, mask in
               target.packed_batches(list(sentences), CALIBRATION_BATCH_SIZE, target.max_length)]
    ranges = int8_transformer.calibration_ranges(
        lambda token_ids: target.adapter.embed(token_ids, None, None), layers, batches)
    for index, (layer, layer_ranges) in enumerate(zip(layers, ranges)):
        weights = int8_transformer.Int8Weights(layer, layer_ranges, name=f"int8_layer_{index}")
        int8_transformer.attach(layer, weights)
    object.__setattr__(target, KEY_ATTRIBUTE, key)  # not tracked: a plain value
    # Graphs traced before hold the old weights, and oneDNN keeps what it derived from
    # them (the kernels are told the weights are constant).
    target._encode_fns.clear()
    target._warm_encode_fns.clear()
    return target


def int8_target(encoder):
    """The encoder that holds `encoder`'s int8 weights: itself when float32, else a float32 copy.

    The copy (kept with `encoder`) gets `encoder`'s weights again whenever they changed since
    it last did (`weights_signature.follow_weights`).
    """
    if encoder.backbone.dtype_policy.name == "float32":
        return encoder
    copy = encoder._precision_twins.get(FLOAT32_COPY)
    if copy is None:
        copy = encoder.clone(name=f"{encoder.name}_float32", dtype="float32")
        encoder._precision_twins[FLOAT32_COPY] = copy
    follow_weights(copy, encoder)
    return copy
