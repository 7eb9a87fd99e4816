"""benchmarks/whitening_saturation.py: its cosines, and one tiny run end to end."""

import json
import subprocess
import sys

import numpy as np

from tests.conftest import REPO
from tests.helpers.processes import load_benchmark


def test_positive_and_negative_cosines():
    saturation = load_benchmark("whitening_saturation")
    a = np.eye(3)
    assert saturation.cosines(a, a) == (1.0, 0.0)
    positive, negative = saturation.cosines(a, -a)
    assert positive == -1.0 and negative == 0.0
    b = np.ones((3, 2))
    assert np.allclose(saturation.cosines(b, b), (1.0, 1.0))


def test_a_tiny_run_prints_both_losses(tmp_path):
    from tests.conftest import make_tiny_encoder
    from tests.helpers.methods import tiny_sentences

    make_tiny_encoder().save(tmp_path / "tiny")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(tiny_sentences(40)) + "\n", encoding="utf-8")
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "whitening_saturation.py"), "--corpus",
         str(corpus), "--models", str(tmp_path / "tiny"), "--batch-size", "16",
         "--max-length", "16", "--group-size", "4", "--batches", "2", "--temperatures", "0.1,1"],
        capture_output=True, text=True, timeout=600, cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    row = json.loads(run.stdout.strip().splitlines()[-1])
    assert row["model"] == "tiny"
    for name in ("raw", "whitened"):
        assert -1 <= row[f"{name}_negative_cos"] <= row[f"{name}_positive_cos"] <= 1
        # A higher temperature flattens the softmax: the loss rises toward log(batch).
        assert 0 < row[f"{name}_info_nce_t0.1"] < row[f"{name}_info_nce_t1"] <= np.log(16)
    # Whitening centres the batch: the other sentences are near-orthogonal on average.
    assert abs(row["whitened_negative_cos"]) < 0.2
