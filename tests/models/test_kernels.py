"""KernelPolicy: one decision per op (environment, graph kind, policy, measured table)."""

import json

import keras
import pytest
import tensorflow as tf

import keras_sentemb
from keras_sentemb import compat
from keras_sentemb.kernels import fast_dropout, fused_gelu, fused_layer_norm
from keras_sentemb.kernels import policy as kernels
from keras_sentemb.kernels.policy import KernelPolicy
from tests.conftest import make_tiny_encoder, spy_calls, while_tracing
from tests.helpers.graphs import clear_kernel_overrides

SENTS = ["a man plays a guitar .", "the cat sits on the mat !"]


@pytest.fixture(autouse=True)
def no_overrides(monkeypatch):
    clear_kernel_overrides(monkeypatch)


def test_policy_values_are_validated_with_one_line_errors():
    assert KernelPolicy.of(None) == KernelPolicy() == KernelPolicy.of("auto")
    assert KernelPolicy.of("plain") == KernelPolicy(**{op: "plain" for op in kernels.OPS})
    assert KernelPolicy.of({"dropout": "plain"}).dropout == "plain"
    with pytest.raises(ValueError, match=r"`gelu` must be one of .* received 'fast'"):
        KernelPolicy(gelu="fast")
    with pytest.raises(ValueError, match=r"unknown ops \['softmax'\]"):
        KernelPolicy.of({"softmax": "fused"})
    with pytest.raises(ValueError, match="received 'xla'"):
        KernelPolicy.of("xla")
    with pytest.raises(ValueError, match="received int"):
        KernelPolicy.of(3)
    policy = KernelPolicy(layer_norm="plain", transformer="fused")
    assert KernelPolicy.of(json.loads(json.dumps(policy.to_config()))) == policy
    assert KernelPolicy().to_config() == "auto"


def test_the_instruction_set_class_comes_from_the_cpu_flags(tmp_path, monkeypatch):
    assert kernels.isa_of({"avx2", "avx512f", "fma"}) == "avx512"
    assert kernels.isa_of({"avx2", "fma", "vaes"}) == "avx2"
    assert kernels.isa_of({"neon", "bf16"}) == kernels.isa_of(None) == "other"
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu SSE2 AVX2 fma\n")
    assert kernels.cpu_flag_set(cpuinfo) == {"fpu", "sse2", "avx2", "fma"}
    assert kernels.cpu_flag_set(tmp_path / "missing") is None
    # An AVX-512 CPU whose oneDNN and XLA code are both capped at AVX2 reads the AVX2 row.
    monkeypatch.setattr(kernels, "_detected_isa", lambda: "avx512")
    assert kernels.cpu_isa() == "avx512"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert kernels.cpu_isa() == "avx512"  # XLA's code generation not capped: not an emulation
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=AVX2")
    assert kernels.cpu_isa() == "avx2"


def test_every_row_of_the_table_names_every_op():
    assert set(kernels.MEASURED) == {"avx512", "avx2", "other"} == set(kernels.MEASURED_SOURCE)
    for row in kernels.MEASURED.values():
        assert set(row) == set(kernels.OPS) and set(row.values()) <= {"fused", "plain"}


def test_decide_order_environment_graph_kind_policy_table(monkeypatch):
    isa = kernels.cpu_isa()
    monkeypatch.setitem(kernels.MEASURED, isa, {**kernels.MEASURED[isa], "dropout": "plain",
                                                "layer_norm": "fused"})
    auto, fused = KernelPolicy(), KernelPolicy.of("fused")
    assert not kernels.decide("dropout", auto)  # the table's row
    assert kernels.decide("dropout", fused)  # the policy's explicit choice
    assert kernels.decide("layer_norm", auto)
    assert not kernels.decide("layer_norm", KernelPolicy(layer_norm="plain"))
    # Graph kinds: encoding ops only in forward-only graphs, training ops only outside.
    assert not kernels.decide("transformer", fused) and not kernels.decide("gelu_encode", fused)
    decisions = while_tracing(lambda: {op: kernels.decide(op, fused) for op in kernels.OPS},
                              forward_only=True)
    assert decisions["transformer"] and decisions["gelu_encode"]
    assert not decisions["gelu"] and not decisions["layer_norm"]
    # Plain graphs (exports): nothing fused but dropout's 16-bit masks, without XLA.
    plain = while_tracing(lambda: ({op: kernels.decide(op, fused) for op in kernels.OPS},
                                   kernels.xla_allowed()), plain=True)
    assert not any(plain[0][op] for op in ("gelu", "layer_norm"))
    assert plain[0]["dropout"] and not plain[1]
    assert not while_tracing(lambda: kernels.decide("transformer", fused),
                             forward_only=True, plain=True)
    assert kernels.xla_allowed()
    # The environment overrides everything.
    monkeypatch.setenv("KERAS_SENTEMB_PLAIN_DROPOUT", "1")
    assert not kernels.decide("dropout", fused)
    monkeypatch.setenv("KERAS_SENTEMB_PLAIN_GELU", "1")  # no XLA kernel anywhere
    assert not kernels.decide("gelu", fused) and not kernels.decide("layer_norm", fused)
    assert not kernels.xla_allowed()
    with pytest.raises(ValueError, match="Unknown kernel op 'softmax'"):
        kernels.decide("softmax")


def test_kernel_report_says_which_and_why(monkeypatch):
    report = keras_sentemb.kernel_report()
    assert report["isa"] == kernels.cpu_isa() and set(report["ops"]) == set(kernels.OPS)
    row = kernels.MEASURED[report["isa"]]
    for op, entry in report["ops"].items():
        assert entry["kernel"] == row[op] and entry["why"].startswith("table, ")
    assert str(report).splitlines()[0] == f"kernels on this CPU ({report['isa']}):"
    monkeypatch.setenv("KERAS_SENTEMB_PLAIN_TRANSFORMER", "1")
    report = keras_sentemb.kernel_report({"dropout": "plain", "gelu": "fused"}, isa="avx512")
    ops = report["ops"]
    assert ops["dropout"] == {**ops["dropout"], "kernel": "plain", "why": "policy"}
    assert ops["gelu"]["kernel"] == "fused" and ops["gelu"]["why"] == "policy"
    assert ops["transformer"]["kernel"] == "plain"
    assert ops["transformer"]["why"] == "environment KERAS_SENTEMB_PLAIN_TRANSFORMER=1"
    assert "avx512 row" in ops["layer_norm"]["why"]
    monkeypatch.setenv("KERAS_SENTEMB_PLAIN_GELU", "1")
    ops = keras_sentemb.kernel_report("fused")["ops"]
    assert [ops[op]["kernel"] for op in ("gelu", "gelu_encode", "layer_norm", "dropout")] == [
        "plain", "plain", "plain", "fused"]
    with pytest.raises(ValueError, match="`isa` must be one of"):
        keras_sentemb.kernel_report(isa="sse2")


@pytest.fixture(scope="module")
def plain_and_fused():
    return make_tiny_encoder(kernels="plain"), make_tiny_encoder(kernels="fused")


def test_the_encoder_traces_what_its_policy_says(plain_and_fused, monkeypatch):
    plain, fused = plain_and_fused
    assert plain.kernels == KernelPolicy.of("plain") and fused.kernels == KernelPolicy.of("fused")
    assert keras_sentemb.kernel_report(plain)["ops"]["gelu"]["kernel"] == "plain"
    spies = [spy_calls(monkeypatch, fused_gelu, "bias_gelu"),
             spy_calls(monkeypatch, fused_layer_norm, "_forward"),
             spy_calls(monkeypatch, fast_dropout, "dropout")]

    def training_step(encoder):
        x = encoder.preprocess(tf.constant(SENTS))

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(encoder(x, training=True))
            return tape.gradient(loss, encoder.trainable_variables)

        return step()

    training_step(plain)
    assert [len(calls) for calls in spies] == [0, 0, 0]
    training_step(fused)
    assert all(len(calls) > 0 for calls in spies)


def test_the_policy_is_saved_loaded_and_copied(plain_and_fused, tmp_path):
    encoder = make_tiny_encoder(kernels={"dropout": "plain"})
    config = encoder.get_config()
    assert config["kernels"]["dropout"] == "plain"
    assert type(encoder).from_config(config).kernels == encoder.kernels
    assert encoder.clone().kernels == encoder.kernels
    encoder.save(tmp_path / "m")
    assert json.loads((tmp_path / "m" / "sentemb_config.json").read_text())["kernels"] == \
        encoder.kernels.to_config()
    loaded = keras_sentemb.SentenceEncoder.from_preset(str(tmp_path / "m"))
    assert loaded.kernels == encoder.kernels
    again = keras_sentemb.SentenceEncoder.from_preset(str(tmp_path / "m"), kernels="fused")
    assert again.kernels == KernelPolicy.of("fused")
    # The default policy writes nothing new into the folder's config.
    make_tiny_encoder().save(tmp_path / "d")
    assert "kernels" not in json.loads((tmp_path / "d" / "sentemb_config.json").read_text())
    with pytest.raises(ValueError, match="`kernels` must be one of"):
        make_tiny_encoder(kernels="fastest")


def test_installing_again_binds_the_new_policy():
    encoder = make_tiny_encoder(kernels="fused")
    again = type(encoder)(encoder.backbone, encoder.tokenizer, max_length=64, kernels="plain")
    dense = compat.feedforward_intermediate(encoder.backbone.transformer_layers[0])
    assert dense.activation.policy == again.kernels
    dropouts = [layer for layer in encoder.backbone._flatten_layers()
                if isinstance(layer, keras.layers.Dropout)]
    assert dropouts and all(kernels.policy_of(layer) == again.kernels for layer in dropouts)
