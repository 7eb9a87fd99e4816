"""benchmarks/clustered_batches.py: the leaves it cuts, how hard it says batches are, and a tiny
run of both arms end to end."""

import json
import subprocess
import sys

import numpy as np

from tests.conftest import REPO
from tests.helpers.processes import load_benchmark


def test_leaves_are_whole_batches_of_distinct_rows_each_from_one_cluster():
    clustered = load_benchmark("clustered_batches")
    rng = np.random.default_rng(0)
    centres = 10.0 * rng.standard_normal((3, 16))
    labels = np.repeat(np.arange(3), 32)  # three clusters of 4 batches of 8
    vectors = centres[labels] + rng.standard_normal((len(labels), 16))
    shuffled = rng.permutation(len(labels))
    leaves = clustered.balanced_leaves(vectors[shuffled], 8, seed=1)
    assert len(leaves) == 12 and all(len(leaf) == 8 for leaf in leaves)
    rows = np.concatenate(leaves)
    assert len(set(rows.tolist())) == len(rows) == 96
    assert all(len(set(labels[shuffled][leaf].tolist())) == 1 for leaf in leaves)


def test_rows_that_fill_no_leaf_are_left_out():
    clustered = load_benchmark("clustered_batches")
    vectors = np.random.default_rng(2).standard_normal((70, 5))
    leaves = clustered.balanced_leaves(vectors, 16)
    assert all(len(leaf) == 16 for leaf in leaves) and len(leaves) == 4
    assert len(set(np.concatenate(leaves).tolist())) == 64


def test_hardness_is_the_mean_cosine_to_the_nearest_other_row_of_the_batch():
    clustered = load_benchmark("clustered_batches")
    vectors = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0], [-1.0, 0.0]])
    # batch (0, 1, 2): each row's nearest cosine is 1/sqrt2; batch (0, 3): -1 for both rows
    got = clustered.nearest_in_batch(vectors, [np.array([0, 1, 2]), np.array([0, 3])])
    expected = np.mean([2 ** -0.5] * 3 + [-1.0, -1.0])
    assert abs(got - expected) < 1e-12


def test_a_tiny_run_trains_both_arms_and_writes_the_leaves_in_file_order(tmp_path):
    from tests.conftest import TINY_VOCAB
    from tests.conftest import make_tiny_encoder

    make_tiny_encoder(max_length=16).save(tmp_path / "tiny")
    words = [w for w in TINY_VOCAB if w.isalpha()][:12]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"{words[i % 12]} {words[(i // 12) % 12]} {words[(i * 7) % 12]}"
                                for i in range(70)) + "\n", encoding="utf-8")
    out = tmp_path / "clustered.jsonl"
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "clustered_batches.py"), "--start",
         str(tmp_path / "tiny"), "--corpus", str(corpus), "--method", "simcse", "--steps", "4",
         "--eval-every", "2", "--batch-size", "8", "--max-length", "12",
         "--work", str(tmp_path / "work"), "--out", str(out)],
        capture_output=True, text=True, timeout=900, cwd=REPO)
    assert run.returncode == 0, run.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    setup, arms, summary = records[0], records[1:-1], records[-1]
    assert setup["leaves"] == 8 and setup["sentences"] == 70
    written = (tmp_path / "work" / "clustered.txt").read_text(encoding="utf-8").splitlines()
    assert len(written) == 64 and set(written) <= set(corpus.read_text().splitlines())
    assert [a["arm"] for a in arms] == ["random", "clustered"]
    assert all(-100 <= a["test"] <= 100 and a["kept_step"] in (0, 2, 4) for a in arms)
    assert summary["summary"] and str(tmp_path) not in out.read_text()
