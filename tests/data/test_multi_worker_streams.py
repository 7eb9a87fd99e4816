"""Streamed data on two workers (localhost, gRPC collectives): each reads its own files.

With 4 files and 2 workers the stream is sharded by FILE: over one pass
(epoch) every sentence is used exactly once across the workers, no text
occurs twice in a global batch, and `fit_ct` and `fit_simcse` train on the glob.
"""

import json
import sys

import pytest

from tests.conftest import REPO
from tests.helpers.processes import free_ports
from tests.helpers.processes import run_two_workers

SCRIPT = REPO / "tests" / "data" / "multi_worker_stream_check.py"


@pytest.mark.slow
def test_two_workers_read_their_own_files_once_per_epoch(tmp_path):
    texts = [f"file {f} line {i}" for f in range(4) for i in range(16)]
    for f in range(4):
        (tmp_path / f"part-{f}.txt").write_text("\n".join(texts[f * 16:(f + 1) * 16]) + "\n")
    batch, steps = 8, len(texts) // 8  # one pass: 8 global batches of 8
    ports = ",".join(map(str, free_ports(2)))
    outs = [tmp_path / f"worker{i}.json" for i in range(2)]
    run_two_workers(lambda i: [sys.executable, str(SCRIPT), str(tmp_path), str(outs[i]), str(i),
                               ports, str(steps), str(batch)])
    runs = [json.loads(o.read_text()) for o in outs]
    import tensorflow as tf

    assert all(r["workers"] == 2 for r in runs)
    assert all(r["policy"] == int(tf.data.experimental.AutoShardPolicy.FILE) for r in runs)
    assert all(r["steps_trained"] == r["simcse_steps_trained"] == 2 for r in runs)
    used = [t for r in runs for share in r["shares"] for t in share]
    assert sorted(used) == sorted(texts)  # every sentence once in the pass
    files = [{t.split(" line")[0] for share in r["shares"] for t in share} for r in runs]
    assert not files[0] & files[1]  # each worker its own files
    for a, b in zip(runs[0]["shares"], runs[1]["shares"]):
        assert len(a) == len(b) == batch // 2 and len(set(a + b)) == batch
