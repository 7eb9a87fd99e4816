"""Bad streamed training data, remote paths, LiteRT export and plugins: one line, exit 2, nothing saved.

Every case of `benchmarks/bad_inputs.py`'s `streamed_cases` (the table in
docs/results/bad-inputs.md) runs through the command line's `main` on a tiny
model, all in one child process (TensorFlow starts once): a source without
the text field (jsonl, TFRecord, Parquet, and for Contrastive Tension), random
bytes and a corrupt record in a TFRecord, a truncated gzip file, a glob whose
only file is empty and one with an empty file among others, a listed file gone
when read, a header-only CSV, broken JSON lines within and above the share,
lines that are not UTF-8, fewer rows than a batch, `--steps` past a small
source, unreachable `gs://`, `s3://` and `hdfs://` globs, a LiteRT export
under a file-size limit and into a read-only folder, and a plugin whose
import fails. Each must end with its exit status, exactly one error line
naming the file or field (no internal error, no traceback), and nothing
saved; the cases that train must save their model.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(not hasattr(os, "statvfs"), reason="POSIX only")


def _bad_inputs():
    spec = importlib.util.spec_from_file_location("bad_inputs", REPO / "benchmarks" / "bad_inputs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = _bad_inputs().streamed_cases("WORK", "MODEL")

# The child: a tiny model, the input files and the plugin, then every case
# through `cli.main` with stderr captured (logging writes to the captured one).
CHILD = """
import contextlib, importlib.util, io, json, logging, os, resource, sys, traceback
work = {work!r}
sys.path[:0] = [os.path.join(work, "plugin"), {repo!r}]
spec = importlib.util.spec_from_file_location("bad_inputs", {bench!r})
bad_inputs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bad_inputs)
from keras_sentemb import cli
from tests.conftest import make_tiny_encoder

model = os.path.join(work, "model")
make_tiny_encoder().save(model)
bad_inputs.write_streamed_inputs(os.path.join(work, "streamed"))
bad_inputs.write_broken_plugin(os.path.join(work, "plugin"))
importlib.invalidate_caches()  # the plugin's folder is on sys.path from the start
os.makedirs(os.path.join(work, "outputs"))


class CurrentStderr:
    def write(self, text):
        sys.stderr.write(text)

    def flush(self):
        sys.stderr.flush()


logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=CurrentStderr())
_, HARD = resource.getrlimit(resource.RLIMIT_FSIZE)
results = []
for case in bad_inputs.streamed_cases(work, model):
    err, raised = io.StringIO(), None
    if case.fsize:
        resource.setrlimit(resource.RLIMIT_FSIZE, (case.fsize, HARD))
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = cli.main(case.argv)
    except BaseException:
        code, raised = None, traceback.format_exc()
    resource.setrlimit(resource.RLIMIT_FSIZE, (HARD, HARD))
    folder = os.path.dirname(case.output)
    results.append({{
        "label": case.label, "code": code, "stderr": err.getvalue(), "raised": raised,
        "output_exists": os.path.exists(case.output),
        "backup_exists": os.path.exists(case.output + ".backup"),
        "leftovers": [f for f in (os.listdir(folder) if os.path.isdir(folder) else ())
                      if ".tmp" in f or ".probe" in f],
    }})
print(json.dumps(results))
"""


def _run_every_case(work):
    """`{label: result}` of every case, run in one child process (TensorFlow starts once)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    script = CHILD.format(work=str(work), repo=str(REPO),
                          bench=str(REPO / "benchmarks" / "bad_inputs.py"))
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           env=env, timeout=900)
    assert child.returncode == 0, child.stderr[-5000:]
    return {r["label"]: r for r in json.loads(child.stdout.strip().splitlines()[-1])}


def _error_lines(stderr):
    return [line for line in stderr.splitlines() if "keras-sentemb: error:" in line]


def problems_of(case, result):
    """What is wrong with one case's result (an empty list when nothing is)."""
    stderr, problems = result["stderr"], []
    if result["raised"] is not None:
        return [f"raised: {result['raised']}"]
    if "internal error" in stderr or "Traceback" in stderr:
        problems.append("an internal error or a traceback")
    if "ran out of data" in stderr:
        problems.append("Keras' 'ran out of data' warning (the toolkit must say it)")
    if result["code"] != case.code:
        problems.append(f"exit status {result['code']}, expected {case.code}")
    if result["leftovers"] or result["backup_exists"]:
        problems.append(f"left {result['leftovers']} (backup: {result['backup_exists']})")
    if case.code == 0:
        if not result["output_exists"]:
            problems.append("the trained model was not saved")
        lines = stderr.splitlines()
        problems += [f"no line says {name!r}" for name in case.names
                     if not any(name in line for line in lines)]
        return problems
    lines = _error_lines(stderr)
    if len(lines) != 1:
        return problems + [f"{len(lines)} error lines"]
    problems += [f"the line does not say {name!r}" for name in case.names if name not in lines[0]]
    if result["output_exists"]:
        problems.append("something was saved")
    return problems


def test_every_bad_input_is_one_line_and_nothing_is_saved(tmp_path):
    pytest.importorskip("pyarrow")  # the Parquet case (the `parquet` extra)
    results = _run_every_case(tmp_path)
    report = []
    for case in CASES:
        result = results[case.label]
        problems = problems_of(case, result)
        if problems:
            report.append(f"{case.where} {case.label}: {'; '.join(problems)}\n"
                          f"{result['stderr'][-2000:]}")
    assert not report, "\n\n".join(report)
    assert len(results) == len(CASES) >= 20


def test_the_check_of_a_case_can_fail():
    case = CASES[0]  # the .jsonl without a text field
    good = {"raised": None, "code": 2, "output_exists": False, "backup_exists": False,
            "leftovers": [], "stderr": "keras-sentemb: error: x/no_text.jsonl: 40 lack the field "
                                       "'text' (its records have the fields ['body']).\n"}
    assert problems_of(case, good) == []
    bad = dict(good, code=70, output_exists=True,
               stderr="keras-sentemb: internal error: DataLossError; please report it\n")
    assert problems_of(case, bad) == ["an internal error or a traceback",
                                      "exit status 70, expected 2", "0 error lines"]
