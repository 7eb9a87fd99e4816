"""Every use of a private Keras, keras-hub or TensorFlow internal, in one place.

Each function names the internal it relies on; `tests/test_compat.py` checks
that each still exists with the expected shape, so a Keras or TensorFlow
upgrade that moves one fails there, loudly, instead of deep inside training.
Every internal here was checked against the versions `CHECKED_VERSIONS` bounds,
which `setup.py` requires (a test holds the two equal). No other module of the
package imports `tensorflow.python`, `keras.src` or `keras_hub.src`, reads a
private attribute of a Keras / TensorFlow object or overrides a private Keras
method (`tests/test_compat.py` fails when one does).
"""

import collections
import contextlib
import json
import os
import sys

import keras
import tensorflow as tf
from keras_hub.src.tokenizers import word_piece_tokenizer as wp
from keras_hub.src.utils.keras_utils import gelu_approximate
from tensorflow.core.protobuf import saved_model_pb2

# The releases the internals below are known to hold in: `setup.py` requires these
# ranges (tests/test_compat.py holds the two equal and checks every internal on the
# installed releases); raise an upper bound after that test passes on a newer release.
CHECKED_VERSIONS = {
    "keras": ">=3.10,<3.16",
    "tensorflow": ">=2.18,<2.22",
    "keras-hub": ">=0.21,<0.33",
    "tensorflow-text": ">=2.18,<2.22",
}


def require_tensorflow_backend():
    """Raise a clear error unless Keras runs on its TensorFlow backend.

    keras_sentemb builds on TensorFlow (tf.data, tf.distribute, SavedModel);
    it does not change `KERAS_BACKEND` in the host program, so a Keras
    configured for JAX or PyTorch is reported here instead of failing later.
    """
    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise ImportError(
            f"keras_sentemb needs Keras' TensorFlow backend; Keras is using {backend!r}. "
            "Set KERAS_BACKEND=tensorflow before importing Keras (or in ~/.keras/keras.json)."
        )

# Keras' BackupAndRestore writes its step bookkeeping to this file in its
# backup folder (keras/src/callbacks/backup_and_restore.py).
BACKUP_METADATA_FILE = "training_metadata.json"


def set_initial_epoch(model, epoch):
    """Make `model.fit` start at `epoch`, as Keras' `BackupAndRestore` does.

    `keras.Model._initial_epoch` (keras/src/trainers/trainer.py), read by
    `fit` after the callbacks' `on_train_begin`.
    """
    model._initial_epoch = int(epoch)


def strategy_supports_no_merge_call():
    """Whether the current strategy can update variables without `merge_call`.

    `tf.__internal__.distribute.strategy_supports_no_merge_call` (used the
    same way by Keras' `LossScaleOptimizer`).
    """
    return tf.__internal__.distribute.strategy_supports_no_merge_call()


def in_multi_worker_mode(strategy):
    """Whether `strategy` is a collective strategy spanning several workers.

    `MultiWorkerMirroredStrategy.extended._in_multi_worker_mode()`.
    """
    return isinstance(
        strategy, tf.distribute.MultiWorkerMirroredStrategy
    ) and strategy.extended._in_multi_worker_mode()


def backup_start_epoch(callback):
    """The epoch a `keras.callbacks.BackupAndRestore` will resume at (0: fresh).

    Keras restores `model._initial_epoch` from the `epoch` field of
    `training_metadata.json` in the callback's `backup_dir`.
    """
    path = os.path.join(os.fspath(callback.backup_dir), BACKUP_METADATA_FILE)
    if not os.path.isfile(path):
        return 0
    with open(path, encoding="utf-8") as f:
        return int(json.load(f).get("epoch", 0))


def symbolic_build_method_name():
    """The `keras.Model` method Keras 3 calls to trace a model before `fit`.

    `Trainer._maybe_symbolic_build(iterator=None, data_batch=None)`
    (keras/src/trainers/trainer.py); `replace_symbolic_build` overrides it.
    """
    return "_maybe_symbolic_build"


def has_symbolic_build():
    """Whether `keras.Model` still has the method `replace_symbolic_build` overrides."""
    return hasattr(keras.Model, symbolic_build_method_name())


def replace_symbolic_build(cls):
    """Class decorator: `fit` calls `model.build_before_fit()` instead of Keras' symbolic build.

    Before training, Keras 3 calls `_maybe_symbolic_build` (see
    `symbolic_build_method_name`), which under a strategy takes the first
    distributed batch, reduces it across replicas and traces the model on it.
    A model whose weights and optimizer are built already needs none of
    that; `cls` must define `build_before_fit(self)`, which runs instead.

    Args:
        cls: a `keras.Model` subclass with a `build_before_fit` method.

    Returns:
        `cls`.
    """
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        self.build_before_fit()

    setattr(cls, symbolic_build_method_name(), _maybe_symbolic_build)
    return cls


def wordpiece_words(tokenizer, text):
    """The words a keras-hub `WordPieceTokenizer` hands to WordPiece.

    Mirrors `WordPieceTokenizer._tokenize_tf` up to the WordPiece lookup:
    keras-hub's `pretokenize` (keras_hub/src/tokenizers/word_piece_tokenizer.py)
    with the tokenizer's lowercasing, accent stripping, splitting, CJK
    splitting (every CJK ideograph its own word) and special-token pattern.

    Args:
        tokenizer: a keras-hub `WordPieceTokenizer` (e.g. `BertTokenizer`).
        text: string tensor `[N]`.

    Returns:
        Ragged string tensor `[N, None]` of words.
    """
    pattern = wp.get_special_tokens_pattern(tokenizer._special_tokens_for_splitting())
    return wp.pretokenize(
        text, tokenizer.lowercase, tokenizer.strip_accents, tokenizer.split,
        tokenizer.split_on_cjk, pattern,
    )


# Keras' `SeedGenerator` keeps `[seed, counter]` in a variable of this name
# (keras/src/random/seed_generator.py); `Model.variables` lists it, but
# `save_weights` does not save it.
SEED_STATE_NAME = "seed_generator_state"


def seed_generator_states(model):
    """The `[seed, counter]` state variables of every Keras random op in `model`."""
    return [v for v in model.variables if v.path.split("/")[-1] == SEED_STATE_NAME]


def no_autocast():
    """A context in which Keras variables read as stored (no cast to a compute dtype).

    `keras.src.backend.AutocastScope(None)`: what `Layer.__call__` enters for
    a layer with `autocast=False` inside another layer's autocast scope.
    """
    from keras.src.backend import AutocastScope

    return AutocastScope(None)


def keras_hub_gelu_approximate():
    """keras-hub's tanh-approximate GELU, the activation its BERT configs name.

    `keras_hub.src.utils.keras_utils.gelu_approximate`: `FusedGelu` recognises
    a backbone's activation by identity with it.
    """
    return gelu_approximate


def preset_json(handle, name):
    """A keras-hub preset's JSON file `name` (a folder or a handle), or None when it has none.

    `keras_hub.src.utils.preset_utils.check_file_exists` / `load_json`:
    keras-hub's own reader of preset files (a local folder, or one file
    fetched from Kaggle / Hugging Face), so a handle's `task.json` is read
    without loading its weights.
    """
    from keras_hub.src.utils import preset_utils

    if not preset_utils.check_file_exists(handle, name):
        return None
    return preset_utils.load_json(handle, name)


def saved_model_proto(path):
    """The parsed `saved_model.pb` of a SavedModel folder.

    `tensorflow.core.protobuf.saved_model_pb2.SavedModel`, the protocol
    buffer TensorFlow writes (not exported under `tf.*`).
    """
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(os.fspath(path), "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    return proto


def run_saved_model_cli(argv):
    """Run TensorFlow's `saved_model_cli` with the arguments `argv`.

    `tensorflow.python.tools.saved_model_cli.main` (the module behind the
    `saved_model_cli` console script, which reads `sys.argv`).
    """
    # TensorFlow's command-line module (absl flags): loaded for this tool only.
    from tensorflow.python.tools import saved_model_cli

    sys.argv = ["saved_model_cli", *argv]
    saved_model_cli.main()


# ---------------------------------------------------------------- optimizers
# Keras 3's optimizer base class (keras/src/optimizers/base_optimizer.py) keeps
# each variable's slots in lists indexed by `_get_variable_index`, decides which
# variables decay in `_use_weight_decay` (keyed by `_var_key`) and applies the
# decoupled weight decay in `_apply_weight_decay`, before the updates.


def optimizer_variable_index(optimizer, variable):
    """The index of `variable` in the optimizer's slot lists (`_get_variable_index`)."""
    return optimizer._get_variable_index(variable)


def optimizer_variable_key(optimizer, variable):
    """The key Keras files `variable` under in an optimizer (`_var_key`)."""
    return optimizer._var_key(variable)


def optimizer_decays(optimizer, variable):
    """Whether Keras' weight decay applies to `variable` (`_use_weight_decay`)."""
    return optimizer._use_weight_decay(variable)


def optimizer_slots(optimizer, variable, *names):
    """The slot variables `names` (e.g. `"momentums"`, `"velocities"`) of `variable`.

    Keras' Adam and RMSprop keep them in `_momentums` / `_velocities`.
    """
    index = optimizer._get_variable_index(variable)
    return [getattr(optimizer, f"_{name}")[index] for name in names]


def install_weight_decay_hook(cls, hook):
    """Run `hook(optimizer, variables)` where Keras applies the weight decay.

    Overrides `_apply_weight_decay` on `cls`, which Keras calls once per step
    with every trainable variable before the per-variable updates.
    """
    cls._apply_weight_decay = hook


def keras_weight_decay(cls, optimizer, variables):
    """Keras' own weight decay, as applied by the class after `cls` in the MRO."""
    return super(cls, optimizer)._apply_weight_decay(variables)



# ------------------------------------------------- keras-hub's Transformer layer
# keras-hub's `TransformerEncoder` (keras_hub/src/layers/modeling/transformer_encoder.py)
# keeps its sublayers in private attributes, set in `build`; the fused kernels
# (`fused_transformer`, `unpadded_transformer`, `fused_gelu`) and the Hugging Face
# export read them here.
TRANSFORMER_PARTS = {
    "attention": "_self_attention_layer",
    "attention_norm": "_self_attention_layer_norm",
    "attention_dropout": "_self_attention_dropout",
    "intermediate": "_feedforward_intermediate_dense",
    "output": "_feedforward_output_dense",
    "output_dropout": "_feedforward_dropout",
    "output_norm": "_feedforward_layer_norm",
}

TransformerParts = collections.namedtuple("TransformerParts", list(TRANSFORMER_PARTS))


def transformer_parts(layer):
    """The sublayers of a built keras-hub `TransformerEncoder`, by role.

    `attention` (Keras `MultiHeadAttention`), `attention_norm`,
    `attention_dropout` (after the attention output), `intermediate` (the
    feed-forward Dense with the activation), `output` (the feed-forward output
    Dense), `output_dropout` and `output_norm`: the private attributes `TRANSFORMER_PARTS`
    names. A layer without one (not built, or keras-hub renamed it) raises an
    AttributeError naming it.
    """
    parts = {}
    for role, name in TRANSFORMER_PARTS.items():
        if name not in vars(layer):
            raise AttributeError(
                f"{type(layer).__name__} has no `{name}` (keras-hub's Transformer layer "
                "renamed it, or the layer is not built)."
            )
        parts[role] = vars(layer)[name]
    return TransformerParts(**parts)


def masked_lm_head_transform(head, x):
    """keras-hub `MaskedLMHead`'s output for every position of `x` (`[B, K, H]`), no gather.

    The head's own `call` first gathers `x` at `mask_positions` with
    `keras.ops.take_along_axis`, which casts the positions to int64 and
    transposes them; on CPUs oneDNN then prints an "E0000 ... DT_INT64" line.
    This applies the rest of that `call` (its private `_intermediate_dense`,
    `_intermediate_layer_norm`, `_kernel` without a tied embedding, and
    `_bias`) to states the caller gathered, with the same operations (the
    bias read in the compute dtype, as the head's call reads it).
    """
    x = vars(head)["_intermediate_layer_norm"](vars(head)["_intermediate_dense"](x))
    if head.token_embedding is not None:
        outputs = head.token_embedding(x, reverse=True)
    else:
        outputs = keras.ops.matmul(x, vars(head)["_kernel"])
    outputs = keras.ops.cast(outputs, head.compute_dtype)
    outputs = outputs + keras.ops.cast(vars(head)["_bias"], head.compute_dtype)
    return outputs if head.activation is None else head.activation(outputs)


def feedforward_intermediate(layer):
    """The feed-forward intermediate Dense of a keras-hub Transformer layer, or None."""
    return vars(layer).get(TRANSFORMER_PARTS["intermediate"])


# Keras' `MultiHeadAttention` (keras/src/layers/attention/multi_head_attention.py):
# options without a public property. A Keras without one of them lacks the feature
# (the default here), which is what a layer that does not use it computes.
ATTENTION_OPTIONS = {"use_gate": ("_use_gate", False), "sliding_window": ("_sliding_window", None),
                     "output_shape": ("_output_shape", None)}


def attention_options(attention):
    """`{"use_gate", "sliding_window", "output_shape"}` of a Keras `MultiHeadAttention`."""
    return {role: getattr(attention, name, default)
            for role, (name, default) in ATTENTION_OPTIONS.items()}


def in_xla_compiled_graph():
    """Whether the graph being traced is compiled by XLA as a whole.

    A `tf.function(jit_compile=True)` (Keras' `compile(jit_compile=True)`), a TPU
    computation, or a function nested in one: TensorFlow marks them with its XLA
    control-flow context (`control_flow_util.GraphOrParentsInXlaContext`). Every shape
    in such a graph must be known when it is compiled. False under eager execution.
    """
    import tensorflow as tf
    from tensorflow.python.ops import control_flow_util

    if tf.executing_eagerly():
        return False
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def attention_probability_dropout(attention):
    """The Dropout a Keras `MultiHeadAttention` applies to its attention probabilities, or None.

    `_dropout_layer` (set when the layer is built), used by `_compute_attention` when
    the layer's rate (`dropout`) is above zero; None when the rate is zero (the layer
    then applies none).
    """
    if not attention.dropout:
        return None
    return attention._dropout_layer


def all_layers(model):
    """Every layer inside `model`, itself included (`Layer._flatten_layers`, recursive)."""
    return model._flatten_layers(include_self=True, recursive=True)


# Keras' TensorFlow `Variable` gets its first value through
# `_initialize_with_initializer(initializer)` (`_initialize(value)` inside) and
# every later write through `_direct_assign(value)`.
_VARIABLE_INIT_HOOKS = ("_initialize_with_initializer", "_direct_assign", "_initialize")


def has_variable_init_hooks():
    """Whether `keras.Variable` has the private methods `patch_variable_init` replaces."""
    cls = getattr(keras, "Variable", None)
    return cls is not None and all(hasattr(cls, name) for name in _VARIABLE_INIT_HOOKS)


def patch_variable_init(on_initialize, on_assign):
    """Route `keras.Variable`'s first value and later writes through two hooks.

    `on_initialize(variable, initializer, initialize, set_value)` replaces the
    initialisation (`initialize()` runs Keras' own; `set_value(tensor)` sets a
    first value); `on_assign(variable)` is told of each write before Keras
    makes it. Returns the function that restores Keras' methods.
    """
    cls = keras.Variable
    init_original = cls._initialize_with_initializer
    assign_original = cls._direct_assign

    def _initialize_with_initializer(self, initializer):
        return on_initialize(self, initializer, lambda: init_original(self, initializer),
                             lambda value: self._initialize(value))

    def _direct_assign(self, value):
        on_assign(self)
        return assign_original(self, value)

    cls._initialize_with_initializer = _initialize_with_initializer
    cls._direct_assign = _direct_assign

    def restore():
        cls._initialize_with_initializer = init_original
        cls._direct_assign = assign_original

    return restore


def optimizer_strategy(optimizer):
    """The `tf.distribute` strategy a Keras optimizer captured when it was made.

    Keras' TensorFlow optimizer keeps `tf.distribute.get_strategy()` of its
    construction in `_distribution_strategy` and creates its slots under it.
    None for an optimizer without one (another backend, another version).
    """
    return getattr(optimizer, "_distribution_strategy", None)


# TensorFlow marks a function that XLA must compile (`tf.function(jit_compile=True)`)
# with this attribute, on its `FunctionDef` and on the nodes that call it
# (tensorflow/compiler/jit/defs.cc, `kXlaMustCompileAttr`).
XLA_MUST_COMPILE_ATTR = "_XlaMustCompile"


def calls_xla_compiled_function(concrete_function):
    """Whether the graph of a traced `tf.function` calls a function that XLA must compile.

    Reads `XLA_MUST_COMPILE_ATTR` on the functions of the graph's library and
    on every node of the graph and of those functions.
    """
    graph_def = concrete_function.graph.as_graph_def()
    functions = graph_def.library.function
    nodes = [graph_def.node] + [function.node_def for function in functions]
    return (any(function.attr[XLA_MUST_COMPILE_ATTR].b for function in functions)
            or any(node.attr[XLA_MUST_COMPILE_ATTR].b for group in nodes for node in group))


def onednn_enabled():
    """Whether TensorFlow runs its oneDNN CPU kernels in this process.

    `tensorflow.python.util._pywrap_util_port.IsMklEnabled`: true when
    TensorFlow was built with oneDNN and `TF_ENABLE_ONEDNN_OPTS` (or the
    CPU's default) turned it on at import.
    """
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


# oneDNN's quantized matrix multiply with fused post-ops, the op Intel's Neural
# Compressor writes into quantized TensorFlow graphs (tensorflow/core/ops/mkl_nn_ops.cc,
# kernel in tensorflow/core/kernels/mkl/mkl_matmul_op_fused.cc). Registered in every
# oneDNN build of TensorFlow (the Linux x86 wheels, TF Serving's model server); its
# kernel runs only while oneDNN is on. Not exported under `tf.raw_ops` (its name starts
# with an underscore), so the node is added to the graph being traced directly.
QUANTIZED_MATMUL_OP = "_QuantizedMatMul"
# The fusions the kernel implements, in its own words (`fused_ops` attribute).
QUANTIZED_MATMUL_FUSIONS = (
    ("BiasAdd", "Dequantize"),
    ("BiasAdd", "Add", "Dequantize"),
    ("BiasAdd", "Relu", "Dequantize"), ("BiasAdd", "Relu", "Requantize"),
    ("BiasAdd", "GeluExact", "Dequantize"), ("BiasAdd", "GeluExact", "Requantize"),
    ("BiasAdd", "GeluApproximate", "Dequantize"), ("BiasAdd", "GeluApproximate", "Requantize"),
)


def _attr(value):
    from tensorflow.core.framework import attr_value_pb2

    if isinstance(value, tf.DType):
        return attr_value_pb2.AttrValue(type=value.as_datatype_enum)
    if isinstance(value, bool):
        return attr_value_pb2.AttrValue(b=value)
    if isinstance(value, str):
        return attr_value_pb2.AttrValue(s=value.encode())
    values = list(value)
    if values and isinstance(values[0], str):
        return attr_value_pb2.AttrValue(
            list=attr_value_pb2.AttrValue.ListValue(s=[v.encode() for v in values]))
    return attr_value_pb2.AttrValue(
        list=attr_value_pb2.AttrValue.ListValue(type=[v.as_datatype_enum for v in values]))


def quantized_matmul(a, b, bias, a_range, b_range, fused_ops, addend=None, out_range=None,
                     name="QuantizedMatMul"):
    """oneDNN's int8 matrix multiply `a @ b + bias` with fused post-ops (`_QuantizedMatMul`).

    Only inside a graph being traced (a `tf.function`); `QUANTIZED_MATMUL_FUSIONS`
    lists the `fused_ops` it takes.

    Args:
        a: quint8 tensor `[n, k]`, quantized in `MIN_FIRST` mode over `a_range`.
        b: qint8 tensor `[k, m]`, quantized symmetrically per output column.
        bias: float32 tensor `[m]`.
        a_range: `(min, max)` float32 scalars of `a`'s quantization.
        b_range: `(min, max)` float32 tensors `[m]`: each column's range (`-c, c`).
        fused_ops: tuple of str, one of `QUANTIZED_MATMUL_FUSIONS`.
        addend: float32 tensor `[n, m]` for an `"Add"` fusion (added after the bias).
        out_range: `(min, max)` float32 scalars for a `"Requantize"` fusion: the
            quint8 output's `MIN_FIRST` range.
        name: str. The node's name.

    Returns:
        float32 `[n, m]` for a `"Dequantize"` fusion; `(quint8 [n, m], min, max)`
        for `"Requantize"`.
    """
    fused_ops = tuple(fused_ops)
    if fused_ops not in QUANTIZED_MATMUL_FUSIONS:
        raise ValueError(f"Unsupported fusion {fused_ops}; the kernel implements "
                         f"{QUANTIZED_MATMUL_FUSIONS}.")
    inputs = [a, b, bias] + ([addend] if addend is not None else [])
    inputs += [a_range[0], a_range[1], b_range[0], b_range[1]]
    requantize = fused_ops[-1] == "Requantize"
    if requantize:
        inputs += [out_range[0], out_range[1]]
    inputs = [tf.convert_to_tensor(x) for x in inputs]
    outputs = [tf.quint8, tf.float32, tf.float32] if requantize else [tf.float32]
    attrs = {
        "T1": a.dtype, "T2": b.dtype, "Tbias": tf.float32, "U": tf.float32,
        "Tout": outputs[0], "Tdevice_inputs": [x.dtype for x in inputs], "Thost_inputs": [],
        "Tdevice_outputs": outputs, "Thost_outputs": [], "fused_ops": fused_ops,
        "input_quant_mode": "MIN_FIRST", "output_quant_mode": "MIN_FIRST",
        "is_weight_const": True, "is_bias_const": True, "transpose_a": False,
        "transpose_b": False,
    }
    graph = tf.compat.v1.get_default_graph()
    op = graph._create_op_internal(QUANTIZED_MATMUL_OP, inputs, dtypes=outputs,
                                   attrs={k: _attr(v) for k, v in attrs.items()}, name=name)
    return tuple(op.outputs) if requantize else op.outputs[0]


# oneDNN's layer normalisation (tensorflow/core/kernels/mkl/mkl_layer_norm_op.cc), which
# TensorFlow's graph optimizer substitutes for a few layer-norm patterns that Keras 3's
# layer does not produce. Registered in every oneDNN build; its kernel runs while
# oneDNN is on. Not under `tf.raw_ops`.
LAYER_NORM_OP = "_MklLayerNorm"


def onednn_layer_norm(x, gamma, beta, epsilon, name="LayerNorm"):
    """oneDNN's layer normalisation of `x` (2-D or 3-D) over its last axis, in `x`'s dtype.

    Statistics in float32 (also for bfloat16 `x`). Only inside a graph being
    traced; `gamma` and `beta` are cast to `x`'s dtype.
    """
    from tensorflow.core.framework import attr_value_pb2

    inputs = [x, tf.cast(gamma, x.dtype), tf.cast(beta, x.dtype)]
    attrs = {"T": attr_value_pb2.AttrValue(type=x.dtype.as_datatype_enum),
             "epsilon": attr_value_pb2.AttrValue(f=float(epsilon))}
    graph = tf.compat.v1.get_default_graph()
    op = graph._create_op_internal(LAYER_NORM_OP, inputs, dtypes=[x.dtype], attrs=attrs,
                                   name=name)
    return op.outputs[0]


def tflite_schema():
    """TensorFlow's Python classes of the TFLite flatbuffer schema (`Model`, `ModelT`, ...).

    `tensorflow.lite.python.schema_py_generated`, generated from
    tensorflow/compiler/mlir/lite/schema/schema.fbs (not exported under `tf.lite`).
    """
    from tensorflow.lite.python import schema_py_generated

    return schema_py_generated


def frozen_function(concrete_function):
    """`concrete_function` with its variables turned into constants (for the LiteRT converter).

    `tensorflow.python.framework.convert_to_constants.convert_variables_to_constants_v2`.
    """
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    return convert_variables_to_constants_v2(concrete_function)


def gradient_registry():
    """TensorFlow's process-wide gradient registry: op type name -> gradient function.

    `tf.custom_gradient` adds a `CustomGradient-N` entry per call in a traced
    graph (`keras_sentemb.kernels.gradient_registry` removes a finished
    run's).
    """
    from tensorflow.python.framework import ops

    return ops._gradient_registry._registry


@contextlib.contextmanager
def functions_kept_out_of_the_global_graph():
    """Removes the functions the block adds to TensorFlow's global graph, while executing eagerly.

    Some tf.data datasets add their traced function to the default graph even
    while executing eagerly: `Dataset.scan`, and `Dataset.counter`, made with
    a scan (`tensorflow/python/data/ops/scan_op.py`,
    `add_to_graph(ops.get_default_graph())`). Eagerly, that graph is the
    process's global one, which keeps the function, its graph and its
    registration in the eager context for as long as the process lives: one
    more for every such dataset, so for every training run of a long-lived
    process. The functions the block added are removed from the global graph
    when it ends (`Graph._functions`, `Graph._remove_function`); each dataset
    keeps its own reference to its function, so it runs as before and lets
    the function go when it goes. Nothing happens in graph mode, where the
    graph is the caller's.
    """
    if not tf.executing_eagerly():
        yield
        return
    graph = tf.compat.v1.get_default_graph()
    before = set(graph._functions)
    try:
        yield
    finally:
        for name in set(graph._functions) - before:
            graph._remove_function(name)
