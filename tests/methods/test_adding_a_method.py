"""The "Adding a method" guide's example, installed as a plugin and trained from the command line.

The page's first block is written to `align_uniform.py`, a distribution's
metadata declares it in the `keras_sentemb.methods` entry-point group, and a
fresh `keras-sentemb` process lists it among `train`'s methods, shows its
option in `--help` and trains it. (The page's own blocks also run in
tests/test_docs_snippets.py.)
"""

import os
import subprocess
import sys

from tests.conftest import REPO
from tests.conftest import make_tiny_encoder
from tests.docs_snippets import DOCS
from tests.docs_snippets import extract

PAGE = DOCS / "guides" / "adding-a-method.md"


def _install_plugin(folder):
    (folder / "align_uniform.py").write_text(extract(PAGE)[0].code + "\n", encoding="utf-8")
    info = folder / "align_uniform-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: align-uniform\nVersion: 0.1\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text(
        "[keras_sentemb.methods]\nalign_uniform = align_uniform\n", encoding="utf-8")


def _cli(args, folder):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), str(REPO)]))
    return subprocess.run([sys.executable, "-m", "keras_sentemb", *args], capture_output=True,
                          text=True, timeout=900, env=env, cwd=folder)


def test_the_guides_method_trains_from_the_command_line_once_installed(tmp_path):
    _install_plugin(tmp_path)
    make_tiny_encoder().save(tmp_path / "tiny")
    words = ["a man", "the cat", "a dog", "the woman"]
    (tmp_path / "train.txt").write_text(
        "\n".join(f"{a} {b} ." for a in words for b in ("runs", "sits on the mat", "plays")) * 3,
        encoding="utf-8")

    help_text = _cli(["train", "align_uniform", "--help"], tmp_path)
    assert help_text.returncode == 0, help_text.stderr[-3000:]
    text = " ".join(help_text.stdout.split())
    assert "alignment and uniformity" in text and "--uniformity-weight" in text
    assert "The paper's: Wang & Isola 2020, section 4.1. (default: 1.0)" in text

    refused = _cli(["train", "align_uniform", "--model", "tiny", "--train-file", "train.txt",
                    "--output", "out", "--uniformity-weight", "-1"], tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].endswith(
        "`uniformity_weight` must be >= 0.0. Received: uniformity_weight=-1.0.")

    run = _cli(["train", "align_uniform", "--model", "tiny", "--train-file", "train.txt",
                "--output", "out", "--steps", "2", "--batch-size", "4", "--dev", "none",
                "--uniformity-weight", "0.5", "--verbose", "0"], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "saved the align_uniform encoder to out" in run.stderr
    report = (tmp_path / "out" / "training_report.json").read_text(encoding="utf-8")
    assert '"method": "align_uniform"' in report and '"uniformity_weight": 0.5' in report
