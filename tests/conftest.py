"""Shared fixtures: tiny random backbones for unit tests, paths to data."""

import gc
import os
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# pytest-xdist runs one test process per core (`-n 2` on 2 cores). Where the OS
# allows it, each of them runs on a core of its own, and so does every process
# its tests start (they inherit the affinity): a test that starts a two-worker
# cluster or a fresh interpreter then slows its own process only, never the
# tests of the other. Unpinned, cheap tests beside such a test took up to ten
# times their time alone.
# Each process, and every process a test starts, also gets its share of the
# cores for every thread pool it runs: TensorFlow's intra-op threads, OpenBLAS
# (numpy, scipy) and OpenMP (scikit-learn, PyTorch in the subprocesses);
# OpenBLAS's waiting threads spin, and a scipy L-BFGS fit ran six times slower
# oversubscribed. (Each library reads its variable when it starts: this runs
# before any imports it.)
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_PINNED = False
if _WORKERS > 1 and _WORKER.startswith("gw") and hasattr(os, "sched_setaffinity"):
    _CORES = sorted(os.sched_getaffinity(0))
    if len(_CORES) >= _WORKERS:
        _SPAN = len(_CORES) // _WORKERS
        _FIRST = (int(_WORKER[2:]) % _WORKERS) * _SPAN
        os.sched_setaffinity(0, set(_CORES[_FIRST:_FIRST + _SPAN]))
        _PINNED = True


if _WORKERS > 1:
    _SHARE = str(_cores() if _PINNED else max(1, _cores() // _WORKERS))
    for _variable in ("TF_NUM_INTRAOP_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                      "MKL_NUM_THREADS"):
        os.environ.setdefault(_variable, _SHARE)


def _libc():
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


# A test process lives for hundreds of modules, each building and dropping
# models and traced graphs on many threads. glibc gives each thread that
# allocates its own heap (arena), up to 8 per core, and keeps the freed pages
# of each: a worker's resident memory grew past 12 GiB, two workers and the
# processes their tests start past the 24 GiB of a CI machine. Two arenas per
# process, and the free pages handed back after each module
# (`_memory_returned_after_each_module`), keep it near what is in use.
_LIBC = _libc() if sys.platform.startswith("linux") else None
if _LIBC is not None and hasattr(_LIBC, "mallopt"):
    _M_ARENA_MAX = -8
    _LIBC.mallopt(_M_ARENA_MAX, 2)

import pytest  # noqa: E402

from tests import process_guard  # noqa: E402

# TensorFlow and PyTorch never share a test process: importing the second
# raises instead of crashing the worker (the PyTorch side runs in
# tests/torch_worker.py through the `torch_worker` fixture).
process_guard.install()

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

TINY_VOCAB = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "a", "the", "man", "woman", "is", "are", "playing", "plays", "guitar",
    "piano", "dog", "cat", "runs", "sits", "on", "mat", "park", "in", "and",
    "resume", "cafe", "naive", "hello", "world", ".", ",", "!", "?", "'",
    "##s", "##ing", "##ed", "x", "y", "z", "中", "文",
]


def spy_calls(monkeypatch, module, name):
    """Record each call of `module.name` (e.g. a fused kernel) for the rest of the test.

    Returns the list that grows by one entry per call; the function still runs.
    """
    calls = []
    original = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *args: calls.append(1) or original(*args))
    return calls


def run_in_graph(fn, **kind):
    """`fn()` traced and run as one `tf.function` whose graph declares `kind`.

    `kind`: `kernels.declare_graph`'s keywords (`forward_only=`, `plain=`); none
    leaves the graph undeclared. Returns what the function returns (tensors).
    """
    import tensorflow as tf

    from keras_sentemb.kernels import policy as kernels

    @tf.function(autograph=False)
    def graph():
        if kind:
            kernels.declare_graph(**kind)
        return fn()

    return graph()


def while_tracing(fn, **kind):
    """`fn()`'s Python result, computed while a graph declaring `kind` is traced."""
    out = []
    run_in_graph(lambda: out.append(fn()), **kind)
    return out[0]


def make_tiny_encoder(num_layers=2, hidden_dim=32, dropout=0.1, **kwargs):
    """A 2-layer, 32-wide random BERT with a few dozen words of vocabulary."""
    import keras
    import keras_hub

    from keras_sentemb.models import SentenceEncoder

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=len(TINY_VOCAB),
        num_layers=num_layers,
        num_heads=2,
        hidden_dim=hidden_dim,
        intermediate_dim=2 * hidden_dim,
        max_sequence_length=64,
        dropout=dropout,
    )
    tokenizer = keras_hub.models.BertTokenizer(
        vocabulary=TINY_VOCAB, lowercase=True, strip_accents=True
    )
    kwargs.setdefault("max_length", 64)
    return SentenceEncoder(backbone, tokenizer, **kwargs)


# Tests that start extra processes (MirroredStrategy on logical CPUs, a
# multi-worker cluster) or kill and resume every method: the slow tier.
SLOW_NAME_PARTS = ("mirrored", "two_replicas", "two_workers", "multi_worker", "killed_run")
def pytest_collection_modifyitems(config, items):
    """Mark the tiers: `integration` (the bundled default model), `slow`.

    The fast tier for daily work is `pytest -m "not integration and not slow"`;
    CI runs everything.
    """
    for item in items:
        if "default_encoder" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)
        if any(part in item.nodeid for part in SLOW_NAME_PARTS):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def tiny_encoder():
    return make_tiny_encoder()


@pytest.fixture(scope="session")
def default_encoder():
    from keras_sentemb.models import SentenceEncoder

    return SentenceEncoder.from_preset("default")


@pytest.fixture(scope="session")
def torch_worker():
    """A PyTorch interpreter (sentence-transformers, transformers) beside this test process."""
    from tests.torch_side import TorchWorker
    from tests.torch_side import missing_packages

    missing = missing_packages()
    if missing:
        pytest.skip(f"the test extra's PyTorch side is not installed: {', '.join(missing)}")
    worker = TorchWorker()
    yield worker
    worker.close()


@pytest.fixture(autouse=True, scope="module")
def _memory_returned_after_each_module():
    """After each module: its models and graphs collected, the heap's free pages returned."""
    yield
    gc.collect()
    if _LIBC is not None and hasattr(_LIBC, "malloc_trim"):
        _LIBC.malloc_trim(0)


@pytest.fixture(autouse=True)
def _registry_restored_after_each_test():
    """Methods a test registers (toys, plugins) are gone for the tests after it."""
    from keras_sentemb.methods import registry

    before = dict(registry._REGISTERED)
    yield
    # A built-in method first imported during the test stays registered: its module is
    # imported once per process, so it could not register again.
    builtins = {name: cls for name, cls in registry._REGISTERED.items()
                if name not in before and name in registry.BUILTIN_METHODS
                and cls.__module__.startswith(registry.BUILTIN_METHODS[name])}
    registry._REGISTERED.clear()
    registry._REGISTERED.update(before)
    registry._REGISTERED.update(builtins)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Fails the test after which this process holds TensorFlow and PyTorch together."""
    outcome = yield
    report = outcome.get_result()
    mixed = process_guard.mixed_frameworks()
    if mixed and call.when == "call" and report.passed:
        report.outcome = "failed"
        report.longrepr = (f"this test process now holds {', '.join(mixed)}: TensorFlow and "
                           "PyTorch must not share a process; use the torch_worker fixture")
