"""benchmarks/weight_averaging.py: the averages it keeps, and one tiny run end to end."""

import json
import subprocess
import sys

import numpy as np

from tests.conftest import REPO
from tests.helpers.processes import load_benchmark


def test_the_averages_follow_their_closed_forms():
    """EMA_t = d EMA_{t-1} + (1 - d) w_t from EMA_1 = w_1; the tail is the mean of the steps
    after the first quarter of the run."""
    averaging = load_benchmark("weight_averaging")
    scored = []

    class Value:
        def __init__(self, value):
            self.value = np.asarray(value, np.float32)

        def numpy(self):
            return self.value

    class Part:
        pass

    model = Part()
    model.encoder, model.optimizer = Part(), Part()
    callback = averaging.averaging_callback(8, 100, [0.5], scored.append)
    callback.set_model(model)
    history = [float(step * step) for step in range(1, 9)]
    for step, w in enumerate(history, start=1):
        model.encoder.weights = [Value([w, -w])]
        model.optimizer.iterations = Value(step)
        callback.on_train_batch_end(step)
    ema = history[0]
    for w in history[1:]:
        ema = 0.5 * ema + 0.5 * w
    np.testing.assert_allclose(callback.averages[0.5][0], [ema, -ema], rtol=1e-12)
    tail = np.mean(history[2:])  # steps 3..8: after the first quarter (2 steps) of 8
    np.testing.assert_allclose(callback.tail[0], [tail, -tail], rtol=1e-12)
    assert callback.tail_count == 6 and not scored  # no evaluation before step 100


def test_a_tiny_run_scores_every_average_and_reads_test_once(tmp_path):
    from tests.conftest import make_tiny_encoder

    make_tiny_encoder(max_length=16).save(tmp_path / "tiny")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"sentence {i} about {w}" for i in range(60)
                                for w in ("cats",)) + "\n", encoding="utf-8")
    out = tmp_path / "averaging.jsonl"
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "weight_averaging.py"), "--start",
         str(tmp_path / "tiny"), "--corpus", str(corpus), "--method", "simcse", "--steps", "4",
         "--eval-every", "2", "--batch-size", "8", "--max-length", "12", "--decays", "0.9",
         "--learning-rate", "1e-4", "--out", str(out)],
        capture_output=True, text=True, timeout=900, cwd=REPO)
    assert run.returncode == 0, run.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    evaluations, summary = records[:-1], records[-1]
    assert [r["step"] for r in evaluations] == [2, 4]
    assert all(set(r) == {"step", "ema_0.9", "tail", "run"} for r in evaluations)
    assert summary["chosen_on_dev"] in {"ema_0.9", "tail", "run"}
    assert -100 <= summary["chosen_test"] <= 100
    assert str(tmp_path) not in summary["command"]
