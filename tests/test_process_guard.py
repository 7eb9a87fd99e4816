"""The guard that keeps TensorFlow and PyTorch out of one test process."""

import importlib
import importlib.util
import subprocess
import sys
import textwrap

import pytest

from tests import process_guard
from tests.conftest import REPO
from tests.torch_side import missing_packages


def test_importing_torch_after_tensorflow_is_refused_before_it_loads():
    importlib.import_module("tensorflow")  # the suite's processes hold it

    if missing_packages():
        pytest.skip("torch is not installed: nothing to refuse")
    with pytest.raises(process_guard.MixedFrameworksError, match="subprocess"):
        importlib.import_module("torch")
    with pytest.raises(process_guard.MixedFrameworksError):
        importlib.import_module("triton")
    assert "torch" not in sys.modules and "triton" not in sys.modules
    assert process_guard.mixed_frameworks() is None


def test_availability_probes_still_answer():
    importlib.import_module("tensorflow")

    # A library asking whether torch is installed gets the same answer as
    # without the guard; only loading it is refused.
    assert (importlib.util.find_spec("torch") is None) == bool(missing_packages())
    assert importlib.util.find_spec("not_a_real_package_xyz") is None


def test_the_other_order_is_refused_too():
    # A PyTorch process (the worker) that reaches for TensorFlow.
    if missing_packages():
        pytest.skip("torch is not installed")
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO / "tests")!r})
        import importlib
        import process_guard
        process_guard.install()
        importlib.import_module("torch")  # a PyTorch process
        try:
            importlib.import_module("tensorflow")
        except process_guard.MixedFrameworksError as error:
            print("refused:", "tensorflow" not in sys.modules)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "refused: True"


def test_the_worker_runs_pytorch_without_tensorflow(torch_worker, tmp_path):
    # The round trip the interoperability tests use: arrays out, arrays back.
    import numpy as np

    embeddings = np.array([[0.5, -1.0, 2.0, -0.1, 0.0, 3.0, -2.0, 1.0]], np.float32)
    inputs = torch_worker.save_inputs(embeddings=embeddings)
    _, arrays = torch_worker.request("st_quantize", inputs=inputs, precision="ubinary")
    np.testing.assert_array_equal(arrays["quantized"], [[0b10100101]])
    with pytest.raises(Exception, match="KeyError"):
        torch_worker.request("no_such_op")
