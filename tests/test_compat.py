"""The private Keras / TensorFlow internals keras_sentemb relies on still exist.

Each check fails loudly with the name of the internal when an upgrade moves
it, instead of letting training break deep inside a step function.
"""

import json
import subprocess
import sys

import keras
import tensorflow as tf

from keras_sentemb import compat


def test_strategy_supports_no_merge_call_is_callable():
    assert compat.strategy_supports_no_merge_call() in (True, False)


def test_multi_worker_mode_probe():
    assert compat.in_multi_worker_mode(tf.distribute.get_strategy()) is False
    assert hasattr(tf.distribute.MultiWorkerMirroredStrategy, "extended")


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
