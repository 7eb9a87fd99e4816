"""Concurrent encode batches (`keras_sentemb.kernels.cpu_threads`) and outlier-aware batching."""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from keras_sentemb.kernels import cpu_threads
from keras_sentemb.kernels.cpu_threads import check_max_batch_tokens
from keras_sentemb.kernels.cpu_threads import check_parallel_batches
from keras_sentemb.kernels.cpu_threads import configure_encode_threads
from keras_sentemb.kernels.cpu_threads import configure_train_threads
from keras_sentemb.kernels.cpu_threads import run_batches
from keras_sentemb.models.encoding_engine import bucket_length
from tests.conftest import REPO
from tests.numeric import assert_close_vectors

WORDS = ["a", "man", "is", "playing", "the", "guitar", "dog", "runs", "in", "park"]


def fake_batches(n, width=4):
    for b in range(n):
        idx = np.array([2 * b, 2 * b + 1])
        yield idx, np.full((2, width), b, np.int32), np.ones((2, width), np.int32)


def first_column_times_ten(token_ids, mask):
    return tf.cast(token_ids[:, :1], tf.float32) * 10.0


@pytest.mark.parametrize("parallel", [1, 2, 3])
def test_every_batch_comes_back_once_with_its_indices(parallel):
    got = dict()
    for idx, values in run_batches(first_column_times_ten, fake_batches(9), parallel):
        for i, v in zip(idx, values[:, 0]):
            assert i not in got
            got[int(i)] = float(v)
    assert got == {i: 10.0 * (i // 2) for i in range(18)}


def test_a_slow_batch_does_not_hold_back_the_others():
    def slow_first(token_ids, mask):
        if int(token_ids[0, 0]) == 0:
            time.sleep(0.5)
        return first_column_times_ten(token_ids, mask)

    order = [int(idx[0]) // 2 for idx, _ in run_batches(slow_first, fake_batches(6), 2)]
    assert sorted(order) == list(range(6))
    assert order[-1] == 0  # the others finished on the second thread meanwhile


def test_packing_runs_ahead_by_a_bounded_number_of_batches():
    pulled, finished, ahead = [0], [0], []
    lock = threading.Lock()

    def counting(n):
        for item in fake_batches(n):
            with lock:
                pulled[0] += 1
                ahead.append(pulled[0] - finished[0])
            yield item

    def compute(token_ids, mask):
        time.sleep(0.01)
        with lock:
            finished[0] += 1
        return first_column_times_ten(token_ids, mask)

    assert len(list(run_batches(compute, counting(40), 2))) == 40
    assert max(ahead) <= 8  # QUEUED_PER_THREAD * parallel_batches


def test_an_error_in_a_batch_reaches_the_caller():
    def fails_on_three(token_ids, mask):
        if int(token_ids[0, 0]) == 3:
            raise ValueError("batch three is broken")
        return first_column_times_ten(token_ids, mask)

    with pytest.raises(ValueError, match="batch three"):
        list(run_batches(fails_on_three, fake_batches(8), 2))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_parallel_batches_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="parallel_batches"):
        check_parallel_batches(bad)


def test_default_is_two_batches_on_this_cpu_only_host():
    expected = 2 if len(os.sched_getaffinity(0)) >= 2 else 1
    assert check_parallel_batches(None) == expected


def test_threads_are_not_changed_once_tensorflow_runs():
    tf.constant(1.0) + 1.0
    before = tf.config.threading.get_intra_op_parallelism_threads()
    assert configure_encode_threads(2) is False
    assert tf.config.threading.get_intra_op_parallelism_threads() == before
    assert configure_encode_threads(1) is False


def run_fresh(code):
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def test_a_fresh_process_splits_the_cores_between_two_batches():
    code = (
        "import os, tensorflow as tf\n"
        "from keras_sentemb.kernels.cpu_threads import configure_encode_threads\n"
        "applied = configure_encode_threads(2)\n"
        "t = tf.config.threading\n"
        "print(applied, t.get_intra_op_parallelism_threads(), t.get_inter_op_parallelism_threads(),"
        " len(os.sched_getaffinity(0)))\n"
    )
    applied, intra, inter, cores = run_fresh(code)
    assert applied == "True"
    assert int(intra) == max(1, int(cores) // 2) and int(inter) >= 2


def test_a_users_thread_setting_is_kept():
    code = (
        "import tensorflow as tf\n"
        "from keras_sentemb.kernels.cpu_threads import configure_encode_threads\n"
        "tf.config.threading.set_intra_op_parallelism_threads(3)\n"
        "print(configure_encode_threads(2), tf.config.threading.get_intra_op_parallelism_threads())\n"
    )
    assert run_fresh(code) == ["False", "3"]


def test_a_fresh_process_splits_the_cores_between_two_training_passes():
    code = (
        "import os, tensorflow as tf\n"
        "from keras_sentemb.kernels.cpu_threads import configure_train_threads\n"
        "applied = configure_train_threads()\n"
        "t = tf.config.threading\n"
        "print(applied, t.get_intra_op_parallelism_threads(), t.get_inter_op_parallelism_threads(),"
        " len(os.sched_getaffinity(0)))\n"
    )
    applied, intra, inter, cores = run_fresh(code)
    if int(cores) < 2:
        assert (applied, intra, inter) == ("False", "0", "0")  # nothing to split
    else:
        assert applied == "True"
        assert int(intra) == int(cores) // 2 and int(inter) >= 2


def test_train_threads_keep_a_users_setting_and_a_running_tensorflow():
    code = (
        "import tensorflow as tf\n"
        "from keras_sentemb.kernels.cpu_threads import configure_train_threads\n"
        "tf.config.threading.set_inter_op_parallelism_threads(3)\n"
        "print(configure_train_threads(), tf.config.threading.get_intra_op_parallelism_threads())\n"
    )
    assert run_fresh(code) == ["False", "0"]
    tf.constant(1.0) + 1.0
    before = tf.config.threading.get_intra_op_parallelism_threads()
    assert configure_train_threads() is False
    assert tf.config.threading.get_intra_op_parallelism_threads() == before


@pytest.mark.parametrize("passes", [0, -1, 1.5, True, "2"])
def test_train_threads_refuse_a_bad_pass_count(passes):
    with pytest.raises(ValueError, match="passes"):
        configure_train_threads(passes)


def test_train_threads_leave_an_accelerator_host_alone(monkeypatch):
    calls = []
    monkeypatch.setattr(cpu_threads, "has_accelerator", lambda: True)
    monkeypatch.setattr(cpu_threads, "_split_cores", lambda ways: calls.append(ways) or True)
    assert configure_train_threads() is False and calls == []


def test_vectors_do_not_depend_on_parallel_batches(tiny_encoder):
    rng = np.random.default_rng(0)
    sentences = [" ".join(rng.choice(WORDS, size=rng.integers(1, 40))) for _ in range(70)]
    one = tiny_encoder.encode(sentences, batch_size=8, parallel_batches=1)
    for parallel in (2, 3):
        assert_close_vectors(
            tiny_encoder.encode(sentences, batch_size=8, parallel_batches=parallel), one, rtol=1e-5
        )
    single = tiny_encoder.encode(sentences[5], parallel_batches=2)
    assert_close_vectors(single, one[5], rtol=1e-5)


def test_long_outliers_get_a_batch_of_their_own(tiny_encoder):
    rng = np.random.default_rng(1)
    lengths = [int(x) for x in rng.integers(1, 12, size=200)] + [50, 45, 20]
    sentences = [" ".join(["man"] * k) for k in lengths]
    batches = list(tiny_encoder.packed_batches(sentences, batch_size=32, max_length=64))
    seen = np.concatenate([idx for idx, _, _ in batches])
    assert sorted(seen.tolist()) == list(range(len(sentences)))
    for idx, token_ids, mask in batches:
        width = token_ids.shape[1]
        assert len(idx) <= 32 and mask.shape == token_ids.shape
        own = [bucket_length(lengths[i] + 2) for i in idx]
        assert width == min(max(own), 64)
        assert all(2 * w > width for w in own)  # no row padded past twice its own bucket
    first = batches[0][0].tolist()
    # 52 and 47 tokens pad to 52; the 22-token one (width 22) and the rest start the next batch
    assert sorted(first) == [200, 201]
    assert_close_vectors(
        tiny_encoder.encode(sentences, batch_size=32)[200:],
        tiny_encoder.encode(sentences[200:], batch_size=32),
        rtol=1e-5,
    )


def test_a_batch_holds_at_most_max_batch_tokens(tiny_encoder):
    rng = np.random.default_rng(2)
    lengths = [int(x) for x in rng.integers(1, 30, size=300)]
    sentences = [" ".join(["man"] * k) for k in lengths]
    batches = list(tiny_encoder.packed_batches(sentences, 32, 64, max_batch_tokens=256))
    seen = np.concatenate([idx for idx, _, _ in batches])
    assert sorted(seen.tolist()) == list(range(len(sentences)))
    for idx, token_ids, _ in batches:
        assert token_ids.size <= 256 and len(idx) <= 32
    # Longest first: the widest bucket (32) gives the first batch 256 // 32 = 8 rows,
    # and short sentences still fill `batch_size` rows under the cap (8 x 32 = 256).
    assert batches[0][1].shape == (8, 32)
    assert max(len(idx) for idx, _, _ in batches) == 32
    uncapped = list(tiny_encoder.packed_batches(sentences, 32, 64))
    assert len(uncapped) < len(batches)


def test_a_sentence_wider_than_the_cap_gets_a_batch_of_one(tiny_encoder):
    sentences = [" ".join(["man"] * 40), "a man", "a dog runs"]
    batches = list(tiny_encoder.packed_batches(sentences, 32, 64, max_batch_tokens=8))
    assert [idx.tolist() for idx, _, _ in batches][0] == [0]
    assert batches[0][1].shape == (1, 42)
    assert sorted(np.concatenate([idx for idx, _, _ in batches]).tolist()) == [0, 1, 2]


def test_vectors_do_not_depend_on_max_batch_tokens(tiny_encoder):
    rng = np.random.default_rng(3)
    sentences = [" ".join(rng.choice(WORDS, size=rng.integers(1, 40))) for _ in range(60)]
    full = tiny_encoder.encode(sentences, batch_size=16, max_batch_tokens=10**6)
    for cap in (1, 64, 300, None):
        assert_close_vectors(
            tiny_encoder.encode(sentences, batch_size=16, max_batch_tokens=cap), full, rtol=1e-5
        )


@pytest.mark.parametrize("bad", [0, -8, 2.5, True, "2048"])
def test_max_batch_tokens_must_be_a_positive_int(bad, tiny_encoder):
    with pytest.raises(ValueError, match="max_batch_tokens"):
        check_max_batch_tokens(bad)
    with pytest.raises(ValueError, match="max_batch_tokens"):
        tiny_encoder.encode(["a man"], max_batch_tokens=bad)


def test_default_cap_is_for_cpus_only(monkeypatch):
    assert check_max_batch_tokens(None) == cpu_threads.CPU_MAX_BATCH_TOKENS == 2048
    assert check_max_batch_tokens(np.int64(512)) == 512
    monkeypatch.setattr(cpu_threads, "has_accelerator", lambda: True)
    assert check_max_batch_tokens(None) is None
