"""Training precision: `"auto"` per CPU, what stays float32 in a bfloat16 step, bfloat16 vs float32.

`precision="auto"` (the default of every `fit_*` that trains with gradients)
trains in mixed bfloat16 where the CPU computes bfloat16 natively and in
float32 elsewhere. The CPU is faked with its flags, so every class is checked
on any machine. What stays float32 in a mixed bfloat16 step is read from the
traced step's graph (every op and every function it calls), not from the code.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework.function_def_to_graph import function_def_to_graph

import keras_sentemb
from keras_sentemb.kernels import cpu_threads
from keras_sentemb.kernels import native_bfloat16
from keras_sentemb.kernels import precision
from keras_sentemb.kernels.precision import resolve_training_precision
from keras_sentemb.kernels.report import kernel_report
from keras_sentemb.methods.registry import BUILTIN_METHODS
from keras_sentemb.methods.registry import get_method
from keras_sentemb.methods.contrastive_tension.trainer import ContrastiveTension
from keras_sentemb.methods.simcse.trainer import SimCSE
from keras_sentemb.pipelines.plan import RunConfig
from keras_sentemb.trainers.torch_adamw import TorchAdamW
from tests.conftest import make_tiny_encoder
from tests.helpers.batches import packed
from tests.helpers.corpora import CORPUS, SENTENCES

AVX2 = {"avx", "avx2", "fma"}
# Flags as /proc/cpuinfo writes them, per CPU class -> what "auto" trains in.
CPUS = {
    "AVX2-only (AMD Zen 3, Intel Skylake client)": (AVX2, "float32"),
    "AVX-512 without bfloat16 (Intel Skylake server)": (AVX2 | {"avx512f", "avx512_vnni"},
                                                        "float32"),
    "AVX512-BF16 (AMD Zen 4, Intel Cooper Lake)": (AVX2 | {"avx512f", "avx512_bf16"},
                                                   "bfloat16"),
    "AMX (Intel Sapphire Rapids)": (AVX2 | {"avx512f", "avx512_bf16", "amx_bf16"}, "bfloat16"),
    "Arm with BF16 (Graviton 3)": ({"fp", "asimd", "sve", "bf16"}, "bfloat16"),
    "Arm without BF16 (Graviton 2)": ({"fp", "asimd"}, "float32"),
}
NATIVE = AVX2 | {"avx512f", "avx512_bf16"}
ROWS = len(SENTENCES)

# A bfloat16 step's loss and gradients against float32's on the same batch and
# weights (tiny random BERT, dropout off): bfloat16 keeps 8 bits of mantissa
# (relative rounding 2^-9 per value), and the error grows through the layers.
LOSS_RTOL = 2e-2
GRADIENT_MIN_COSINE = 0.99  # of the whole gradient, and of each weight's
GRADIENT_NORM_RTOL = 5e-2


@pytest.fixture(autouse=True)
def auto_unpinned(monkeypatch):
    monkeypatch.delenv(precision.PIN_ENV, raising=False)
    monkeypatch.delenv("KERAS_SENTEMB_BFLOAT16", raising=False)
    monkeypatch.setattr(cpu_threads, "has_accelerator", lambda: False)


def fake_cpu(monkeypatch, flags):
    monkeypatch.setattr(native_bfloat16, "cpu_flags", lambda path=None: frozenset(flags))


def run_config(method="simcse", **arguments):
    return RunConfig.from_arguments(method, {"data": None, "dev": None, **arguments})


# ----------------------------------------------------------------- the choice
@pytest.mark.parametrize("cpu", sorted(CPUS))
def test_auto_trains_in_bfloat16_exactly_where_the_cpu_computes_it(cpu, monkeypatch):
    flags, expected = CPUS[cpu]
    assert resolve_training_precision("auto", flags)[0] == expected
    fake_cpu(monkeypatch, flags)
    computes, why = resolve_training_precision(None)
    assert computes == expected and why.startswith("auto: ")
    config = run_config(precision="auto")
    assert (config.precision, config.precision_reason) == (computes, why)
    assert kernel_report()["training"] == {"asked": "auto", "computes": expected, "why": why}
    assert ("mixed bfloat16" in str(kernel_report())) == (expected == "bfloat16")
    # float32 asked for is float32 everywhere; bfloat16 asked for only where native.
    assert resolve_training_precision("float32") == ("float32", "asked for")
    assert resolve_training_precision("bfloat16")[0] == expected


# The built-in methods that train in float32 on every CPU, and why.
FLOAT32_METHODS = {
    "whitening": "no gradients: one covariance of the vectors",
    "flow": "the encoder is frozen; the flow's log-determinants need float32",
    "static": "a lookup and a mean: no matrix multiply for bfloat16 to speed up",
}


def test_every_gradient_method_defaults_to_auto():
    """Every registered method trains at the CPU's best precision, but the float32 ones named."""
    for name in BUILTIN_METHODS:
        default = get_method(name).signature().parameters.get("precision")
        if name in FLOAT32_METHODS:
            assert default is None, f"{name} has a precision option: drop it from the list"
            continue
        assert default is not None and default.default == "auto", name
        assert run_config(name, precision="auto").precision_reason.startswith("auto: "), name


def test_the_pin_accelerators_and_methods_without_the_option_keep_float32(monkeypatch):
    fake_cpu(monkeypatch, NATIVE)
    monkeypatch.setenv(precision.PIN_ENV, "float32")
    assert resolve_training_precision("auto") == (
        "float32", "auto: KERAS_SENTEMB_PRECISION=float32")
    monkeypatch.setenv(precision.PIN_ENV, "int8")  # an encoding precision
    assert resolve_training_precision("auto")[0] == "float32"
    monkeypatch.setenv(precision.PIN_ENV, "bfloat16")
    assert resolve_training_precision("auto")[0] == "bfloat16"
    # A pin to bfloat16 on a CPU that only emulates it trains in float32.
    fake_cpu(monkeypatch, AVX2)
    computes, why = resolve_training_precision("auto")
    assert computes == "float32" and "emulated" in why
    monkeypatch.delenv(precision.PIN_ENV)
    fake_cpu(monkeypatch, NATIVE)
    monkeypatch.setattr(cpu_threads, "has_accelerator", lambda: True)
    assert resolve_training_precision("auto") == (
        "float32", "auto: a GPU or TPU computes float32 by default")
    monkeypatch.setattr(cpu_threads, "has_accelerator", lambda: False)
    # A method without the option (whitening) stays float32, and says so.
    config = run_config("whitening")
    assert (config.precision, config.precision_reason) == (
        "float32", "whitening trains in float32")
    with pytest.raises(ValueError, match="precision"):
        resolve_training_precision("float16")


def test_the_report_names_the_precision_and_why(monkeypatch, caplog):
    fake_cpu(monkeypatch, NATIVE)
    start = make_tiny_encoder()
    with caplog.at_level("INFO", logger="keras_sentemb"):
        out = keras_sentemb.fit_simcse(CORPUS[:32], model=start, steps=1, batch_size=8,
                                       dev=None, pooling="mean", mlp="none", verbose=0)
    report = out.training_report
    assert report.hyperparameters["precision"] == "auto"
    assert report.resolved["precision"] == "bfloat16"
    assert report.resolved["precision_reason"] == (
        "auto: the CPU computes bfloat16 natively (avx512_bf16)")
    assert "simcse: trains in mixed bfloat16 (auto: the CPU computes" in caplog.text
    assert out.backbone.dtype_policy.name == "float32"  # kept in float32
    fake_cpu(monkeypatch, AVX2)
    out = keras_sentemb.fit_simcse(CORPUS[:32], model=start, steps=1, batch_size=8, dev=None,
                                   pooling="mean", mlp="none", verbose=0)
    assert out.training_report.resolved["precision"] == "float32"
    assert "no native bfloat16" in out.training_report.resolved["precision_reason"]


# ------------------------------------------------------- the traced bf16 step
def traced_ops(concrete):
    """`(op, output)` for every op of a concrete function and of every function it calls."""
    graphs = [concrete.graph]
    graphs += [function_def_to_graph(f.definition) for f in concrete.graph._functions.values()]
    return [(op, out) for graph in graphs for op in graph.get_operations() for out in op.outputs]


def ct_batch(encoder):
    x = packed(encoder)
    return {"left": x, "right": x, "labels": tf.constant([1.0] + [0.0] * (ROWS - 1))}


TRAINERS = {
    "simcse": (lambda enc: SimCSE(enc, pooling="mean", mlp="none"),
               lambda enc: {"sentence": packed(enc)}),
    "ct_k7": (lambda enc: ContrastiveTension(enc), ct_batch),
    "ct_in_batch": (lambda enc: ContrastiveTension(enc, negatives="in_batch"),
                    lambda enc: {"left": packed(enc), "right": packed(enc)}),
}


def traced_bfloat16_step(kind):
    make_trainer, make_batch = TRAINERS[kind]
    encoder = make_tiny_encoder().clone(dtype="mixed_bfloat16")  # as `fit_*` trains it
    trainer = make_trainer(encoder)
    trainer.compile(optimizer=TorchAdamW(learning_rate=1e-3))
    batch = make_batch(encoder)
    trainer.fit(tf.data.Dataset.from_tensors(batch).repeat(), steps_per_epoch=1, epochs=1,
                verbose=0)  # builds the optimizer's state
    return trainer, tf.function(trainer.train_step).get_concrete_function(batch)


@pytest.mark.parametrize("kind", sorted(TRAINERS))
def test_what_stays_float32_in_a_bfloat16_step(kind):
    trainer, step = traced_bfloat16_step(kind)
    ops = traced_ops(step)
    dtypes = collections.defaultdict(set)
    for op, out in ops:
        dtypes[op.type].add(out.dtype.name)
    # The Transformer really computes in bfloat16.
    matmuls = [out for op, out in ops if op.type in ("MatMul", "BatchMatMulV2")]
    assert sum(out.dtype == tf.bfloat16 for out in matmuls) >= 8
    # The similarity matrix / logits (an [n, n] or [n] product of the sentence
    # vectors) and everything computed on it: float32.
    similarity = [out for op, out in ops if op.type == "MatMul" and out.shape.rank == 2
                  and out.shape[0] == ROWS and out.shape[1] == ROWS]
    pairwise = [out for op, out in ops if op.type in ("Mul", "Sum") and
                out.shape.rank == 1 and out.shape[0] == ROWS]
    assert similarity or pairwise
    for out in similarity + pairwise:
        assert out.dtype == tf.float32, out.name
    for op, out in ops:
        if out.shape.rank in (1, 2) and out.shape[0] == ROWS and (
                out.shape.rank == 1 or out.shape[1] == ROWS):
            assert out.dtype in (tf.float32, tf.int32, tf.int64, tf.bool), (op.type, out.name)
    # Temperature / scale, log-softmax, logsumexp and the loss: float32. The
    # attention's softmax inside the Transformer (rank 4) computes in bfloat16.
    loss_ops = [(op, out) for op, out in ops if op.type in (
        "SparseSoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits", "LogSoftmax",
        "Log", "Log1p", "Exp", "Softplus", "Sigmoid", "Softmax") and out.shape.rank != 4]
    assert loss_ops
    for op, out in loss_ops:
        assert out.dtype == tf.float32, (op.type, out.name)
    assert step.structured_outputs["loss"].dtype == tf.float32
    # Layer norms (mean, variance, rsqrt) and every square root: float32 (the
    # optimizer's bias correction takes some in float64).
    for kind_ in ("Mean", "Rsqrt", "RsqrtGrad", "Sqrt"):
        assert "bfloat16" not in dtypes[kind_], (kind_, dtypes[kind_])
    assert dtypes["Rsqrt"] == {"float32"}
    # The optimizer update: float32 weights and state, float32 values written.
    assert {v.dtype for v in trainer.trainable_variables} == {"float32"}
    assert {v.dtype for v in trainer.optimizer.variables if v.dtype != "int64"} == {"float32"}
    writes = [op for graph in [step.graph] + [function_def_to_graph(f.definition)
                                              for f in step.graph._functions.values()]
              for op in graph.get_operations()
              if op.type in ("AssignVariableOp", "AssignSubVariableOp", "AssignAddVariableOp")]
    written = collections.Counter(op.inputs[1].dtype.name for op in writes)
    assert written["float32"] > 0 and set(written) <= {"float32", "int64"}, written


def test_grad_cache_and_matryoshka_see_float32_embeddings():
    """GradCache caches d loss / d embeddings and Matryoshka slices them: float32 in a bf16 step."""
    encoder = make_tiny_encoder().clone(dtype="mixed_bfloat16")
    trainer = SimCSE(encoder, pooling="mean", mlp="none", mini_batch_size=4)
    views = trainer.embed_batch({"sentence": packed(encoder)}, training=True)
    assert {t.dtype for t in tf.nest.flatten(views)} == {tf.float32}
    with tf.GradientTape() as tape:
        tape.watch(views)
        loss = trainer.loss_from_embeddings(views, {"sentence": None}, training=True).loss
    cached = tape.gradient(loss, views)
    assert {t.dtype for t in tf.nest.flatten(cached)} == {tf.float32}


# ---------------------------------------- a bf16 step against float32, same batch
def loss_and_gradients(kind, encoder):
    make_trainer, make_batch = TRAINERS[kind]
    trainer = make_trainer(encoder)
    batch = make_batch(encoder)
    trainer.compute_loss_terms(batch, training=True)  # builds every weight
    variables = trainer.trainable_variables
    with tf.GradientTape() as tape:
        loss = trainer.compute_loss_terms(batch, training=True).loss
    grads = tape.gradient(loss, variables)
    return float(loss), [tf.convert_to_tensor(g).numpy().astype(np.float64).ravel()
                         for g in grads]


@pytest.mark.parametrize("kind", sorted(TRAINERS))
def test_a_bfloat16_step_has_float32s_loss_and_gradients(kind):
    full = make_tiny_encoder(dropout=0.0)  # dropout off: both precisions see the same network
    mixed = full.clone(dtype="mixed_bfloat16")
    for a, b in zip(full.get_weights(), mixed.get_weights()):
        np.testing.assert_array_equal(a, b)  # the same float32 weights
    loss32, grads32 = loss_and_gradients(kind, full)
    loss16, grads16 = loss_and_gradients(kind, mixed)
    assert loss16 == pytest.approx(loss32, rel=LOSS_RTOL)
    assert loss16 != loss32  # the step really computed in bfloat16
    g32, g16 = np.concatenate(grads32), np.concatenate(grads16)
    cosine = g32 @ g16 / (np.linalg.norm(g32) * np.linalg.norm(g16))
    assert cosine >= GRADIENT_MIN_COSINE
    assert np.linalg.norm(g16) == pytest.approx(np.linalg.norm(g32), rel=GRADIENT_NORM_RTOL)
    largest = max(np.linalg.norm(g) for g in grads32)
    for a, b in zip(grads32, grads16):
        if np.linalg.norm(a) > 1e-2 * largest:  # weights the batch moves (not unused rows)
            assert a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) >= GRADIENT_MIN_COSINE
