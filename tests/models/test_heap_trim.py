"""`kernels.heap_trim`: every 100th `encode` hands glibc's freed pages back to the system."""

import threading

import pytest

from keras_sentemb.kernels import heap_trim


def test_it_trims_after_every_nth_call_and_never_at_zero():
    trims = []
    counter = heap_trim.HeapTrim(every=3, trim=trims.append)
    assert [counter() for _ in range(7)] == [False, False, True, False, False, True, False]
    assert trims == [0, 0] and counter.calls == 7 and counter.trims == 2
    never = heap_trim.HeapTrim(every=0, trim=trims.append)
    assert not any(never() for _ in range(500)) and trims == [0, 0]


def test_threads_count_every_call_once():
    trims = []
    counter = heap_trim.HeapTrim(every=10, trim=trims.append)
    threads = [threading.Thread(target=lambda: [counter() for _ in range(250)])
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counter.calls == 1000 and len(trims) == 100


@pytest.mark.parametrize("value,every,warned", [
    (None, 100, False), ("", 100, False), ("0", 0, False), ("25", 25, False),
    ("-3", 100, True), ("often", 100, True),
])
def test_the_environment_sets_the_count(value, every, warned, monkeypatch, caplog):
    import logging

    if value is None:
        monkeypatch.delenv(heap_trim.ENV, raising=False)
    else:
        monkeypatch.setenv(heap_trim.ENV, value)
    with caplog.at_level(logging.WARNING):
        assert heap_trim.trim_every() == every
        assert heap_trim.HeapTrim(trim=lambda pad: None).every is None  # read at the first call
    assert (heap_trim.ENV in caplog.text) is warned


def test_glibcs_trim_hands_back_freed_pages():
    """The real call: 80 MiB of small blocks freed between blocks still held stay resident
    until the trim."""
    from pathlib import Path

    if heap_trim._malloc_trim() is None or not Path("/proc/self/status").exists():
        pytest.skip("the C library has no malloc_trim, or no /proc to read RSS from")

    def rss_mib():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

    counter = heap_trim.HeapTrim(every=1)
    blocks = [bytearray(4096) for _ in range(20000)]
    keep = blocks[::50]
    del blocks
    before = rss_mib()
    assert counter() is True
    assert before - rss_mib() >= 40, (before, rss_mib())
    del keep


def test_encode_counts_once_per_call_whatever_its_precision(monkeypatch):
    """`encode` counts one call, also when a precision twin or a truncation computes it."""
    from tests.conftest import make_tiny_encoder

    trims = []
    counter = heap_trim.HeapTrim(every=1, trim=trims.append)
    monkeypatch.setattr("keras_sentemb.models.encoding_engine.after_encode", counter)
    encoder = make_tiny_encoder(max_length=16)
    encoder.encode(["a sentence", "another one"], precision="float32")
    encoder.encode(["a sentence"], precision="bfloat16")
    encoder.encode(["a sentence"], precision="float32", truncate_dim=8)
    encoder.encode([], precision="float32")  # nothing encoded: nothing counted
    assert counter.calls == 3 and len(trims) == 3
