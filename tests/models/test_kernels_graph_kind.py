"""The graph's kind (`kernels.GraphKind`): declared by the traced function, held by its graph."""

import threading

import pytest
import tensorflow as tf

from keras_sentemb.kernels import fused_gelu, fused_layer_norm
from keras_sentemb.kernels import policy as kernels
from keras_sentemb.kernels.policy import UNDECLARED, GraphKind
from tests.conftest import make_tiny_encoder, run_in_graph, spy_calls, while_tracing
from tests.helpers.graphs import clear_kernel_overrides, xla_compiled_functions

FUSED = kernels.KernelPolicy.of("fused")
FORWARD_ONLY = GraphKind(forward_only=True)
PLAIN = GraphKind(plain=True)
SENTS = ["a man plays a guitar .", "the cat sits on the mat !"]


@pytest.fixture(autouse=True)
def no_overrides(monkeypatch):
    clear_kernel_overrides(monkeypatch)


def seen_here():
    """The kind of the graph being traced now and two decisions that depend on it."""
    return (kernels.graph_kind(), kernels.decide("gelu_encode", FUSED),
            kernels.decide("gelu", FUSED))


def test_a_forward_only_graph_takes_the_encoding_kernels_an_undeclared_one_does_not(
        monkeypatch):
    encoder = make_tiny_encoder(kernels="fused")
    x = encoder.preprocess(tf.constant(SENTS))
    real_op = fused_gelu._gelu_op
    gelu_ops = []
    monkeypatch.setattr(fused_gelu, "_gelu_op", lambda: gelu_ops.append(real_op()) or gelu_ops[-1])
    norms = spy_calls(monkeypatch, fused_layer_norm, "_forward")

    run_in_graph(lambda: encoder(x))
    assert set(gelu_ops) == {"gelu"} and norms  # training's kernels
    gelu_ops.clear(), norms.clear()
    run_in_graph(lambda: encoder(x), forward_only=True)
    assert set(gelu_ops) == {"gelu_encode"} and not norms
    gelu_ops.clear()
    encoder.encode(SENTS)  # encode's graph declares itself forward-only
    assert set(gelu_ops) == {"gelu_encode"} and not norms


def test_each_graph_sees_its_own_declaration_and_nested_graphs_their_outer_ones():
    seen = {}

    @tf.function(autograph=False)
    def encoding():
        assert kernels.declare_graph(forward_only=True) == FORWARD_ONLY
        kernels.declare_graph(forward_only=True)  # the same kind again: fine
        seen["encoding"] = seen_here()
        tf.cond(tf.constant(True), lambda: seen.setdefault("branch", seen_here()) and 1,
                lambda: 0)
        tf.function(lambda: seen.setdefault("inner", seen_here()) and 1, autograph=False)()

        @tf.function(autograph=False)
        def inner_plain():
            kernels.declare_graph(plain=True)
            seen["inner plain"] = seen_here()
            return 1

        inner_plain()
        seen["encoding after"] = seen_here()
        return tf.constant(0)

    @tf.function(autograph=False)
    def training():
        seen["training"] = seen_here()
        return tf.constant(0)

    encoding.get_concrete_function()
    training.get_concrete_function()
    assert seen["encoding"] == seen["branch"] == seen["inner"] == seen["encoding after"] == (
        FORWARD_ONLY, True, False)
    assert seen["inner plain"] == (PLAIN, False, False)
    assert seen["training"] == (UNDECLARED, False, True)
    # Eager execution: the default kind; declaring there has no graph to mark.
    assert seen_here() == (UNDECLARED, False, True)
    assert kernels.declare_graph(plain=True) == PLAIN and kernels.graph_kind() == UNDECLARED


def test_a_graph_traced_in_another_thread_at_the_same_time_keeps_its_own_kind():
    seen, errors = {}, []
    declared, traced_here = threading.Event(), threading.Event()

    @tf.function(autograph=False)
    def encoding():
        kernels.declare_graph(forward_only=True)
        declared.set()
        # Held open while the main thread traces its own graphs.
        seen["overlapped"] = traced_here.wait(60)
        seen["encoding"] = seen_here()
        return tf.constant(0)

    def trace():
        try:
            encoding.get_concrete_function()
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)
            declared.set()

    thread = threading.Thread(target=trace)
    thread.start()
    assert declared.wait(60)
    seen["training"] = while_tracing(seen_here)
    seen["plain"] = while_tracing(seen_here, plain=True)
    traced_here.set()
    thread.join(60)
    assert not errors and seen["overlapped"]
    assert seen["encoding"] == (FORWARD_ONLY, True, False)
    assert seen["training"] == (UNDECLARED, False, True)
    assert seen["plain"] == (PLAIN, False, False)


def test_declaring_a_graph_as_another_kind_is_refused():
    def twice():
        kernels.declare_graph(forward_only=True)
        kernels.declare_graph(plain=True)

    with pytest.raises(ValueError, match="already declared as GraphKind.forward_only=True"):
        run_in_graph(twice)


def test_an_archive_written_out_directly_has_no_xla_compiled_call(tmp_path, monkeypatch):
    from keras_sentemb.export import saved_model

    encoder = make_tiny_encoder(kernels="fused")
    archive = saved_model.build_export_archive(encoder, token_signature=True, chunk_size=None)
    archive.write_out(str(tmp_path / "declared"), verbose=False)  # no scope around it
    assert xla_compiled_functions(tmp_path / "declared") == []
    # Without the endpoints' declaration the same graphs carry the XLA kernels.
    monkeypatch.setattr(saved_model, "declare_graph", lambda **kind: None)
    archive = saved_model.build_export_archive(encoder, token_signature=False, chunk_size=None)
    archive.write_out(str(tmp_path / "undeclared"), verbose=False)
    assert xla_compiled_functions(tmp_path / "undeclared") != []


def test_a_serving_graph_takes_the_kernels_made_of_tensorflow_ops_and_no_xla(monkeypatch):
    from keras_sentemb import compat

    monkeypatch.setattr(compat, "onednn_enabled", lambda: True)

    def decisions():
        return (kernels.decide("transformer", FUSED), kernels.decide("gelu_encode", FUSED),
                kernels.decide("gelu_encode", FUSED, xla=False),
                kernels.decide("layer_norm_encode", FUSED), kernels.xla_allowed())

    assert while_tracing(decisions, forward_only=True, serving=True) == (
        True, False, True, False, False)
    # An int8 serving graph needs oneDNN anyway: its layer norms take oneDNN's kernel.
    assert while_tracing(decisions, forward_only=True, serving=True, int8=True) == (
        True, False, True, True, False)
    assert while_tracing(decisions, forward_only=True) == (True, True, True, True, True)
    assert while_tracing(decisions, plain=True) == (False, False, False, False, False)
