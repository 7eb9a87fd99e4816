"""TensorFlow's oneDNN kernels: turned on for AVX2-only CPUs by the programs, never over a choice."""

import json
import os
import subprocess
import sys

import keras_sentemb
from keras_sentemb.kernels import policy as kernels
from keras_sentemb.kernels.onednn_opts import ENV
from keras_sentemb.kernels.onednn_opts import enable_onednn_opts


def _without_tensorflow(monkeypatch):
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setattr(kernels, "ONEDNN_SET_HERE", [])


def test_set_on_avx2_only_before_tensorflow(monkeypatch):
    _without_tensorflow(monkeypatch)
    assert enable_onednn_opts(isa="avx512") is False and ENV not in os.environ
    assert enable_onednn_opts(isa="other") is False and ENV not in os.environ
    assert enable_onednn_opts(isa="avx2") is True and os.environ[ENV] == "1"
    assert kernels.ONEDNN_SET_HERE  # the report then says it was set for this CPU


def test_a_users_value_and_an_imported_tensorflow_are_kept(monkeypatch):
    _without_tensorflow(monkeypatch)
    monkeypatch.setenv(ENV, "0")
    assert enable_onednn_opts(isa="avx2") is False and os.environ[ENV] == "0"
    monkeypatch.delenv(ENV)
    monkeypatch.setitem(sys.modules, "tensorflow", object())  # already imported: too late
    assert enable_onednn_opts(isa="avx2") is False and ENV not in os.environ


def test_the_default_isa_is_this_cpus(monkeypatch):
    _without_tensorflow(monkeypatch)
    monkeypatch.setattr(kernels, "cpu_isa", lambda: "avx2")
    assert enable_onednn_opts() is True
    monkeypatch.delenv(ENV)
    monkeypatch.setattr(kernels, "cpu_isa", lambda: "avx512")
    assert enable_onednn_opts() is False


def test_the_report_says_whether_it_runs(monkeypatch):
    import tensorflow  # noqa: F401  (the status is read from TensorFlow once imported)

    onednn = keras_sentemb.kernel_report()["onednn"]
    assert isinstance(onednn["enabled"], bool) and onednn["why"]
    assert "oneDNN" in str(keras_sentemb.kernel_report())
    monkeypatch.setattr(kernels, "onednn_status", lambda: (False, "why not"))
    monkeypatch.setattr(kernels, "cpu_isa", lambda: "avx2")
    assert "why not" in str(keras_sentemb.kernel_report())


# A recipe's entry point: the switch, then TensorFlow started quietly, then its main.
PROBE = """
import json, os, sys
from keras_sentemb.quiet_startup import run_quietly
from keras_sentemb.kernels import onednn_opts
from keras_sentemb.kernels import policy as kernels
kernels.cpu_isa = lambda: sys.argv[1]
onednn_opts.enable_onednn_opts()
run_quietly(lambda argv: print(json.dumps([os.environ.get(onednn_opts.ENV),
                                           onednn_opts.onednn_status()[0]])), [])
"""


def _probe(isa, env_value=None):
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if env_value is not None:
        env[ENV] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE, isa], env=env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_programs_start_tensorflow_with_it_on_avx2_only():
    # A fresh process each: TensorFlow reads the variable once, at import.
    assert _probe("avx2") == ["1", True]
    assert _probe("avx2", env_value="0") == ["0", False]  # the user's choice
    assert _probe("avx512")[0] is None  # TensorFlow's own default


def test_the_command_line_and_every_recipe_set_it_before_tensorflow_starts():
    import inspect
    from pathlib import Path

    from keras_sentemb.cli import program

    source = inspect.getsource(program.main)
    assert source.index("enable_onednn_opts()") < source.index("start_tensorflow()")
    recipes = sorted((Path(__file__).resolve().parents[2] / "recipes").glob("*.py"))
    entry_points = [p for p in recipes if "sys.exit(run_quietly(main))" in p.read_text()]
    assert len(entry_points) >= 9
    for path in entry_points:
        lines = path.read_text().splitlines()
        at = next(i for i, line in enumerate(lines) if "sys.exit(run_quietly(main))" in line)
        assert lines[at - 1].strip().startswith("enable_onednn_opts()"), path.name
