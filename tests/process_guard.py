"""One framework per process: TensorFlow and PyTorch never load together.

TensorFlow and PyTorch (through triton, which `torch._dynamo` imports) each
carry their own copy of LLVM; a process that imports TensorFlow and then
triton dies with a segmentation fault, and the order that happens to work on
one machine is not a fix. The test suite therefore runs the PyTorch side of a
check in its own interpreter (`tests/torch_worker.py`), as a user's PyTorch
service would load an exported folder.

`install()` puts a finder at the front of `sys.meta_path` that turns the
second framework's import into a `RuntimeError` naming the rule, before any
of its native code loads. Availability probes (`importlib.util.find_spec`)
still answer as they would without the guard; only executing the module is
refused. `RuntimeError` rather than `ImportError`, so `pytest.importorskip`
cannot turn a broken test into a skipped one.
"""

import importlib.abc
import importlib.machinery
import sys

# Top-level packages of each side. transformers and sentence-transformers are
# only dangerous through torch, so guarding torch and triton covers them.
TENSORFLOW_SIDE = ("tensorflow",)
PYTORCH_SIDE = ("torch", "triton")


class MixedFrameworksError(RuntimeError):
    """The process already holds one framework and was asked to load the other."""


def _loaded(names):
    return [name for name in names if name in sys.modules]


class _RefusingLoader(importlib.abc.Loader):
    def __init__(self, name, loaded):
        self.name, self.loaded = name, loaded

    def create_module(self, spec):
        raise MixedFrameworksError(
            f"this process already imported {', '.join(self.loaded)} and now imports "
            f"{self.name}: TensorFlow and PyTorch must not share a process (their LLVM "
            "copies clash). Run the PyTorch side in a subprocess (tests/torch_worker.py)."
        )

    def exec_module(self, module):  # pragma: no cover - create_module always raises
        raise AssertionError("unreachable")


class _FrameworkGuard(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if top in PYTORCH_SIDE:
            other = _loaded(TENSORFLOW_SIDE)
        elif top in TENSORFLOW_SIDE:
            other = _loaded(PYTORCH_SIDE)
        else:
            return None
        if not other or fullname != top:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None:
            return None  # not installed: the usual ModuleNotFoundError follows
        return importlib.machinery.ModuleSpec(fullname, _RefusingLoader(fullname, other),
                                              origin=spec.origin)


def install():
    """Adds the guard to this process once (idempotent)."""
    if not any(isinstance(finder, _FrameworkGuard) for finder in sys.meta_path):
        sys.meta_path.insert(0, _FrameworkGuard())


def mixed_frameworks():
    """The modules of both sides loaded in this process, or `None` when only one side is."""
    tf_side, torch_side = _loaded(TENSORFLOW_SIDE), _loaded(PYTORCH_SIDE)
    return (tf_side + torch_side) if tf_side and torch_side else None
