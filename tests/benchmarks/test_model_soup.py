"""benchmarks/model_soup.py: the mean it takes, the ensemble's cosine, and two tiny runs end to end."""

import json
import subprocess
import sys

import numpy as np

from tests.conftest import REPO
from tests.helpers.processes import load_benchmark


def test_the_soup_is_the_element_wise_mean_in_each_weights_dtype():
    soup = load_benchmark("model_soup")
    a = [np.array([[1.0, 2.0]], np.float32), np.array([3], np.int32)]
    b = [np.array([[3.0, 6.0]], np.float32), np.array([5], np.int32)]
    c = [np.array([[2.0, 1.0]], np.float32), np.array([7], np.int32)]
    mean = soup.mean_weights([a, b, c])
    np.testing.assert_allclose(mean[0], [[2.0, 3.0]], rtol=1e-7)
    assert mean[0].dtype == np.float32 and mean[1].dtype == np.int32 and mean[1][0] == 5


def test_the_ensembles_cosine_is_the_mean_of_its_members_cosines():
    soup = load_benchmark("model_soup")
    rng = np.random.default_rng(1)
    a_vectors, b_vectors = rng.standard_normal((5, 4)), 3.0 * rng.standard_normal((5, 6))

    class Fixed:
        def __init__(self, vectors):
            self.vectors, self.kwargs = vectors, None

        def encode(self, sentences, **kwargs):
            self.kwargs = kwargs
            return self.vectors[: len(sentences)]

    members = [Fixed(a_vectors), Fixed(b_vectors)]
    joined = soup.Ensemble(members).encode(["s"] * 5, batch_size=2, precision="float32")
    assert joined.shape == (5, 10) and all(m.kwargs == {"batch_size": 2, "precision": "float32"}
                                           for m in members)

    def cosine(x, i, j):
        return x[i] @ x[j] / np.linalg.norm(x[i]) / np.linalg.norm(x[j])

    for i, j in [(0, 1), (2, 4), (3, 3)]:
        expected = (cosine(a_vectors, i, j) + cosine(b_vectors, i, j)) / 2
        assert abs(cosine(joined, i, j) - expected) < 1e-6 * max(1.0, abs(expected))


def test_two_runs_make_a_uniform_and_a_greedy_soup_and_test_is_read_once(tmp_path):
    from keras_sentemb.models import SentenceEncoder
    from tests.conftest import make_tiny_encoder

    encoder = make_tiny_encoder(max_length=16)
    encoder.save(tmp_path / "a")
    rng = np.random.default_rng(0)
    encoder.set_weights([w + 0.05 * rng.standard_normal(np.shape(w)).astype(np.asarray(w).dtype)
                         if np.issubdtype(np.asarray(w).dtype, np.floating) else w
                         for w in encoder.get_weights()])
    encoder.save(tmp_path / "b")
    out = tmp_path / "soup.jsonl"
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "model_soup.py"),
                          str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)],
                         capture_output=True, text=True, timeout=900, cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r.get("candidate") for r in records[:3]] == ["run", "run", "uniform soup"]
    assert records[-2]["candidate"] == "ensemble" and records[-2]["runs"] == 2
    summary = records[-1]
    runs = sorted(name for name in summary["dev"] if name.startswith("run "))
    assert [name.rsplit("/", 1)[-1] for name in runs] == ["a", "b"]  # a folder's last parts
    assert set(summary["dev"]) == {*runs, "uniform soup", "greedy soup", "ensemble"}
    assert summary["chosen_dev"] == max(summary["dev"].values())
    assert summary["dev"][summary["chosen_on_dev"]] == summary["chosen_dev"]
    assert -100 <= summary["chosen_test"] <= 100
    assert sum("chosen_test" in r for r in records) == 1  # test read once, for the choice
    assert summary["greedy_members"][0].rsplit("/", 1)[-1] in ("a", "b")
    assert str(tmp_path) not in out.read_text()  # no machine's paths in the results
    a = SentenceEncoder.from_preset(str(tmp_path / "a")).get_weights()
    assert len(a) == len(encoder.get_weights())
