"""The private Keras / TensorFlow internals keras_sentemb relies on still exist.

Each check fails loudly with the name of the internal when an upgrade moves
it, instead of letting training break deep inside a step function.
"""

import json
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb import compat


def test_merge_call_is_needed_exactly_under_a_cpu_mirrored_strategy():
    # No strategy: updates run in pure replica context. A MirroredStrategy on
    # CPU (merge_call is skipped only under XLA on all-GPU devices) needs
    # merge_call, both in its scope and inside `strategy.run`, where the
    # trainers apply their updates.
    assert compat.strategy_supports_no_merge_call() is True
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        assert compat.strategy_supports_no_merge_call() is False

    @tf.function
    def in_replica():
        return strategy.run(lambda: tf.constant(compat.strategy_supports_no_merge_call()))

    assert bool(in_replica()) is False
    assert compat.strategy_supports_no_merge_call() is True  # the scope is left


def test_multi_worker_mode_is_a_collective_strategy_spanning_workers():
    assert compat.in_multi_worker_mode(tf.distribute.get_strategy()) is False
    assert compat.in_multi_worker_mode(tf.distribute.MirroredStrategy(["/cpu:0"])) is False
    # Without a cluster (no TF_CONFIG) the collective strategy is one worker.
    local = tf.distribute.MultiWorkerMirroredStrategy()
    assert compat.in_multi_worker_mode(local) is False
    # What decides is the strategy's own probe (a real cluster: test_multi_worker).
    local.extended._in_multi_worker_mode = lambda: True
    assert compat.in_multi_worker_mode(local) is True


def test_symbolic_build_hook_exists():
    # BaseTrainer overrides it; a rename would silently re-enable the build.
    assert compat.has_symbolic_build(), compat.symbolic_build_method_name()


def test_backup_metadata_file_and_fields(tmp_path):
    class Model(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def call(self, x):
            return self.dense(x)

    model = Model()
    model.build((None, 2))
    model.compile(optimizer="sgd", loss="mse")
    backup = keras.callbacks.BackupAndRestore(str(tmp_path / "b"), delete_checkpoint=False)
    x = tf.ones((4, 2))
    model.fit(x, x[:, :1], epochs=2, batch_size=2, verbose=0, callbacks=[backup])
    path = tmp_path / "b" / compat.BACKUP_METADATA_FILE
    assert json.loads(path.read_text())["epoch"] == 2
    assert compat.backup_start_epoch(backup) == 2


def test_seed_generator_state_is_found_and_drives_dropout():
    layer = keras.layers.Dropout(0.5, seed=7)
    model = keras.Sequential([keras.Input((8,)), layer])
    states = compat.seed_generator_states(model)
    assert len(states) == 1 and tuple(states[0].shape) == (2,)
    x = tf.ones((4, 8))
    states[0].assign([7, 5])
    a = layer(x, training=True)
    states[0].assign([7, 5])
    b = layer(x, training=True)
    tf.debugging.assert_equal(a, b)  # the state alone decides the mask


def test_no_environment_changes_on_import():
    code = (
        "import os; before = dict(os.environ); import keras_sentemb; "
        "from keras_sentemb.evaluation import readers; "
        "assert dict(os.environ) == before, set(os.environ) ^ set(before); print('OK')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-2000:]


def test_other_backend_is_refused_with_a_clear_error(monkeypatch):
    import pytest

    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    with pytest.raises(ImportError, match="needs Keras' TensorFlow backend; Keras is using 'jax'"):
        compat.require_tensorflow_backend()


def test_wordpiece_words_are_what_wordpiece_sees():
    from tests.conftest import make_tiny_encoder

    tokenizer = make_tiny_encoder().tokenizer  # lowercases and strips accents
    text = tf.constant(["The man, 中文猫!", "Résumé  café"])
    words = compat.wordpiece_words(tokenizer, text).to_list()
    assert words == [
        [b"the", b"man", b",", "中".encode(), "文".encode(), "猫".encode(), b"!"],
        [b"resume", b"cafe"],
    ]
    tokenize = tf.function(tokenizer)
    for sentence, row in zip(text, words):
        pieces = tokenize(tf.constant(row)).flat_values.numpy().tolist()
        assert pieces == tokenize(sentence[None]).flat_values.numpy().tolist()


def test_keras_hub_gelu_is_what_bert_presets_name():
    import keras_hub

    gelu = compat.keras_hub_gelu_approximate()
    x = tf.constant([-2.0, -0.5, 0.0, 0.5, 2.0])
    expected = 0.5 * x * (1 + tf.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))
    assert float(tf.reduce_max(tf.abs(gelu(x) - expected))) < 1e-6
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=10, num_layers=1, num_heads=1, hidden_dim=4, intermediate_dim=8)
    dense = backbone.transformer_layers[0]._feedforward_intermediate_dense
    assert dense.activation is gelu


def test_preset_json_reads_a_preset_file_or_says_none(tmp_path):
    (tmp_path / "task.json").write_text('{"registered_name": "x", "config": {"a": 1}}')
    assert compat.preset_json(str(tmp_path), "task.json") == {"registered_name": "x",
                                                              "config": {"a": 1}}
    assert compat.preset_json(str(tmp_path), "preprocessor.json") is None


def test_saved_model_proto_reads_a_saved_model(tmp_path):
    module = tf.Module()
    module.f = tf.function(lambda x: x * 2.0, input_signature=[tf.TensorSpec([None], tf.float32)])
    tf.saved_model.save(module, str(tmp_path))
    proto = compat.saved_model_proto(tmp_path)
    ops = {n.op for g in proto.meta_graphs for n in g.graph_def.node}
    ops |= {n.op for g in proto.meta_graphs for f in g.graph_def.library.function
            for n in f.node_def}
    assert "Mul" in ops


def test_saved_model_cli_runs(tmp_path):
    module = tf.Module()
    module.f = tf.function(lambda x: x * 2.0, input_signature=[tf.TensorSpec([None], tf.float32)])
    tf.saved_model.save(module, str(tmp_path / "m"), signatures=module.f)
    out = subprocess.run(
        [sys.executable, "-c", "from keras_sentemb.compat import run_saved_model_cli; "
         f"run_saved_model_cli(['show', '--dir', {str(tmp_path / 'm')!r}, '--all'])"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "serving_default" in out.stdout


def test_optimizer_internals_reach_the_slots_and_the_decay_rule():
    kernel = keras.Variable(tf.ones((2, 2)), name="kernel")
    bias = keras.Variable(tf.zeros((2,)), name="bias")
    adam = keras.optimizers.AdamW(1e-3, weight_decay=0.1)
    adam.exclude_from_weight_decay(var_names=["bias"])
    adam.build([kernel, bias])
    assert compat.optimizer_variable_index(adam, bias) == 1
    momentum, velocity = compat.optimizer_slots(adam, bias, "momentums", "velocities")
    assert tuple(momentum.shape) == tuple(velocity.shape) == (2,)
    assert compat.optimizer_variable_key(adam, kernel) != compat.optimizer_variable_key(adam, bias)
    assert compat.optimizer_decays(adam, kernel) and not compat.optimizer_decays(adam, bias)
    rms = keras.optimizers.RMSprop(1e-3, momentum=0.9)
    rms.build([kernel])
    assert len(compat.optimizer_slots(rms, kernel, "velocities", "momentums")) == 2


def test_the_weight_decay_hook_replaces_keras_decay_and_can_defer_to_it():
    calls = []

    class Probe(keras.optimizers.SGD):
        pass

    def hook(self, variables):
        calls.append(len(variables))
        return compat.keras_weight_decay(Probe, self, variables)

    compat.install_weight_decay_hook(Probe, hook)
    w = keras.Variable(tf.ones((3,)))
    opt = Probe(0.1, weight_decay=0.5)
    opt.apply_gradients([(tf.zeros((3,)), w)])
    assert calls == [1]
    np.testing.assert_allclose(w.numpy(), 1.0 - 0.1 * 0.5, rtol=1e-6)  # Keras' decay ran


def test_no_autocast_reads_variables_as_stored():
    v = keras.Variable(np.ones([2, 2], "float32"))
    with keras.src.backend.AutocastScope("bfloat16"):
        assert tf.convert_to_tensor(v).dtype == tf.bfloat16
        with compat.no_autocast():
            assert tf.convert_to_tensor(v).dtype == tf.float32


def test_keras_hub_transformer_layer_parts_are_where_the_kernels_read_them():
    import keras_hub

    layer = keras_hub.layers.TransformerEncoder(8, 2, activation="gelu")
    layer.build([None, None, 4])
    for name in compat.TRANSFORMER_PARTS.values():
        assert name in vars(layer), f"keras-hub's TransformerEncoder has no `{name}` any more"
    parts = compat.transformer_parts(layer)
    assert type(parts.attention) is keras.layers.MultiHeadAttention
    assert isinstance(parts.attention_norm, keras.layers.LayerNormalization)
    assert isinstance(parts.output_norm, keras.layers.LayerNormalization)
    assert parts.attention_norm is not parts.output_norm
    assert isinstance(parts.intermediate, keras.layers.Dense) and parts.intermediate.units == 8
    assert isinstance(parts.output, keras.layers.Dense) and parts.output.units == 4
    assert parts.intermediate.activation is keras.activations.gelu
    assert isinstance(parts.attention_dropout, keras.layers.Dropout)
    assert isinstance(parts.output_dropout, keras.layers.Dropout)
    assert parts.attention_dropout is not parts.output_dropout
    assert compat.feedforward_intermediate(layer) is parts.intermediate
    # The public MultiHeadAttention properties the fused layer reads beside them.
    attention = parts.attention
    assert (attention.key_dim, attention.value_dim) == (2, 2)
    for dense in (attention.query_dense, attention.key_dense, attention.value_dense,
                  attention.output_dense):
        assert isinstance(dense, keras.layers.EinsumDense)
    # A layer without one of them (a rename) is reported by name.
    unbuilt = keras_hub.layers.TransformerEncoder(8, 2)
    with pytest.raises(AttributeError, match="_self_attention_layer"):
        compat.transformer_parts(unbuilt)
    assert compat.feedforward_intermediate(unbuilt) is None


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_masked_lm_head_transform_is_the_heads_call_after_its_gather(tied, policy):
    import keras_hub

    from keras_sentemb.trainers.lm_head import masked_lm_logits

    keras.utils.set_random_seed(1)
    embedding = None
    if tied:
        embedding = keras_hub.layers.ReversibleEmbedding(40, 8, dtype=policy)
        embedding.build((None, None))
    head = keras_hub.layers.MaskedLMHead(vocabulary_size=40, token_embedding=embedding,
                                         intermediate_activation="gelu", activation="softmax",
                                         bias_initializer="random_normal", dtype=policy)
    head.build((None, None, 8), (None, None))
    states = tf.random.normal([2, 6, 8])
    positions = tf.constant([[1, 4, 0], [5, 2, 2]])
    theirs = head(states, mask_positions=positions)
    ours = masked_lm_logits(head, states, positions)
    assert ours.dtype == theirs.dtype
    every = tf.tile(tf.range(6)[None], [2, 1])
    for a, b in ((ours, theirs),
                 (masked_lm_logits(head, states), head(states, mask_positions=every))):
        a, b = np.asarray(tf.cast(a, tf.float32)), np.asarray(tf.cast(b, tf.float32))
        if policy == "float32":
            np.testing.assert_array_equal(a, b)
        else:  # a bfloat16 value may round the other way: one unit, up to 2^-7 of it
            assert np.linalg.norm(a - b) <= 2.0 ** -7 * np.linalg.norm(b)


def test_multi_head_attention_private_options():
    plain = keras.layers.MultiHeadAttention(2, 4)
    for name, _ in compat.ATTENTION_OPTIONS.values():
        assert hasattr(plain, name), f"Keras' MultiHeadAttention has no `{name}` any more"
    assert compat.attention_options(plain) == {
        "use_gate": False, "sliding_window": None, "output_shape": None}
    options = compat.attention_options(
        keras.layers.MultiHeadAttention(2, 4, use_gate=True, output_shape=8))
    assert options["use_gate"] is True and options["output_shape"] is not None


def test_attention_probability_dropout_is_the_layers_own_and_none_at_rate_zero():
    attention = keras.layers.MultiHeadAttention(2, 4, dropout=0.25)
    attention.build((None, 3, 8), (None, 3, 8))
    dropout = compat.attention_probability_dropout(attention)
    assert isinstance(dropout, keras.layers.Dropout) and dropout.rate == 0.25
    assert compat.attention_probability_dropout(keras.layers.MultiHeadAttention(2, 4)) is None


def test_in_xla_compiled_graph_sees_jit_compiled_functions_and_their_inner_functions():
    seen = {}

    def probe(name):
        seen[name] = compat.in_xla_compiled_graph()

    @tf.function(autograph=False)
    def inner(x):
        probe("inner")
        return x

    @tf.function(jit_compile=True, autograph=False)
    def compiled(x):
        probe("compiled")
        return inner(x) + 1

    @tf.function(autograph=False)
    def traced(x):
        probe("traced")
        return x + 1

    compiled(tf.constant(1.0))
    traced(tf.constant(1.0))
    probe("eager")
    assert seen == {"compiled": True, "inner": True, "traced": False, "eager": False}


def test_all_layers_reaches_nested_layers():
    inner = keras.Sequential([keras.layers.Dense(2), keras.layers.Dropout(0.1)])
    outer = keras.Sequential([inner, keras.layers.LayerNormalization()])
    found = compat.all_layers(outer)
    assert outer in found and inner in found
    assert {type(x).__name__ for x in found} >= {"Dense", "Dropout", "LayerNormalization"}


def test_variable_init_hooks_route_the_first_value_and_writes_and_restore():
    assert compat.has_variable_init_hooks()
    seen = []

    def on_initialize(variable, initializer, initialize, set_value):
        seen.append(("init", tuple(variable.shape)))
        set_value(tf.fill(variable.shape, 7.0))

    restore = compat.patch_variable_init(on_initialize, lambda v: seen.append(("assign",)))
    try:
        v = keras.Variable(initializer="ones", shape=(2,), dtype="float32")
        assert v.numpy().tolist() == [7.0, 7.0]
        v.assign([1.0, 2.0])
        assert v.numpy().tolist() == [1.0, 2.0]
    finally:
        restore()
    assert seen == [("init", (2,)), ("assign",)]
    assert keras.Variable(initializer="ones", shape=(2,), dtype="float32").numpy().tolist() == [1, 1]


def test_an_optimizer_remembers_the_strategy_it_was_made_under():
    outside = keras.optimizers.SGD(0.1)
    assert compat.optimizer_strategy(outside) is tf.distribute.get_strategy()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        inside = keras.optimizers.SGD(0.1)
    assert compat.optimizer_strategy(inside) is strategy


def test_the_quantized_matmul_op_is_core_tensorflow():
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(compat.QUANTIZED_MATMUL_OP)
    assert op_def is not None, compat.QUANTIZED_MATMUL_OP
    attrs = {attr.name for attr in op_def.attr}
    assert {"fused_ops", "input_quant_mode", "output_quant_mode", "Tdevice_inputs",
            "Tdevice_outputs", "is_weight_const", "is_bias_const"} <= attrs
    assert isinstance(compat.onednn_enabled(), bool)
    layer_norm = op_def_registry.get(compat.LAYER_NORM_OP)
    assert [arg.name for arg in layer_norm.input_arg] == ["x", "scale", "offset"]
    assert {attr.name for attr in layer_norm.attr} == {"T", "epsilon"}


def test_checked_versions_are_what_setup_requires_and_what_is_installed():
    import ast
    import importlib.metadata
    from pathlib import Path

    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    setup = ast.parse((Path(__file__).resolve().parents[1] / "setup.py").read_text())
    required = next(keyword.value for node in ast.walk(setup) if isinstance(node, ast.Call)
                    for keyword in node.keywords if keyword.arg == "install_requires")
    requirements = {r.name: r.specifier for r in map(Requirement, ast.literal_eval(required))}
    for name, spec in compat.CHECKED_VERSIONS.items():
        assert requirements[name] == SpecifierSet(spec), (name, requirements[name], spec)
        assert importlib.metadata.version(name) in SpecifierSet(spec), name


def test_replace_symbolic_build_runs_the_models_own_build_before_fit():
    import inspect

    keras_build = getattr(keras.Model, compat.symbolic_build_method_name())
    assert list(inspect.signature(keras_build).parameters) == ["self", "iterator", "data_batch"]
    calls = []

    @compat.replace_symbolic_build
    class Model(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)
            self.dense.build((None, 2))

        def call(self, x):
            return self.dense(x)

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(self(x) - y))
            self.optimizer.apply(tape.gradient(loss, self.trainable_variables),
                                 self.trainable_variables)
            return {"loss": loss}

        def build_before_fit(self):
            calls.append(self.optimizer.built)
            self.optimizer.build(self.trainable_variables)

    model = Model()
    model.compile(optimizer="sgd")
    x = tf.ones((4, 2))
    for _ in range(2):
        model.fit(x, x[:, :1], epochs=2, batch_size=2, verbose=0)
    assert calls == [False, True]  # once before each fit, instead of Keras' build
    assert Model._maybe_symbolic_build is not keras_build


def test_calls_xla_compiled_function_sees_jit_compiled_calls_only():
    spec = tf.TensorSpec([None], tf.float32)
    compiled = tf.function(lambda x: x * 2.0, jit_compile=True)
    calling = tf.function(lambda x: compiled(x) + 1.0)
    plain = tf.function(lambda x: x * 2.0 + 1.0)
    assert compat.XLA_MUST_COMPILE_ATTR == "_XlaMustCompile"
    assert compat.calls_xla_compiled_function(calling.get_concrete_function(spec))
    assert not compat.calls_xla_compiled_function(plain.get_concrete_function(spec))


def test_frozen_function_holds_the_weights_as_constants():
    weight = tf.Variable([2.0])
    traced = tf.function(lambda x: x * weight,
                         input_signature=[tf.TensorSpec([None], tf.float32)])
    frozen = compat.frozen_function(traced.get_concrete_function())
    assert "ReadVariableOp" not in {op.type for op in frozen.graph.get_operations()}
    np.testing.assert_allclose(tf.nest.flatten(frozen(tf.constant([3.0])))[0], [6.0])


def test_tflite_schema_has_the_classes_the_litert_export_reads():
    schema = compat.tflite_schema()
    for name in ("Model", "ModelT", "BufferT", "MetadataT"):
        assert hasattr(schema, name), name
    assert hasattr(schema.Model, "GetRootAsModel")


def test_the_gradient_registry_holds_what_custom_gradient_registers():
    from keras_sentemb import compat

    @tf.custom_gradient
    def doubled(x):
        return 2 * x, lambda dy: 2 * dy

    before = set(compat.gradient_registry())
    tf.function(lambda x: doubled(x))(tf.constant(1.0))
    new = set(compat.gradient_registry()) - before
    assert len(new) == 1 and next(iter(new)).startswith("CustomGradient-")



def test_functions_kept_out_of_the_global_graph_while_datasets_still_run():
    """TensorFlow's scan and counter datasets add their function to the global graph even
    eagerly; inside the block they leave it as it was, and run."""
    def library():
        return len(tf.compat.v1.get_default_graph().as_graph_def().library.function)

    before = library()
    with compat.functions_kept_out_of_the_global_graph():
        sums = tf.data.Dataset.range(5).scan(tf.constant(0, tf.int64),
                                             lambda total, x: (total + x, total + x))
        steps = tf.data.Dataset.counter(start=3, dtype=tf.int64)
    assert library() == before
    assert [int(x) for x in sums] == [0, 1, 3, 6, 10]
    assert [int(x) for x in steps.take(2)] == [3, 4]
    tf.data.Dataset.counter(dtype=tf.int64)
    assert library() > before  # what TensorFlow's own counter leaves, which the block removes
