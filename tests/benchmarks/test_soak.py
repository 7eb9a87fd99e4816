"""benchmarks/soak.py: the requests it sends, the small model it can run, what it counts."""

import numpy as np
import pytest

from tests.helpers.processes import load_benchmark


@pytest.fixture(scope="module")
def soak():
    return load_benchmark("soak")


def test_requests_are_random_sized_mixed_script_and_the_same_for_a_seed(soak):
    requests = list(soak.requests(300, seed=3))
    sizes = [len(r) for r in requests]
    lengths = [len(s) for r in requests for s in r]
    assert 1 <= min(sizes) and max(sizes) <= 256 and len(set(sizes)) > 50
    assert min(lengths) == 0 and max(lengths) <= 5000 and max(lengths) > 1000
    text = "".join(s for r in requests for s in r)
    assert all(any(c in text for c in script) for script in soak.SCRIPTS)
    assert list(soak.requests(300, seed=3)) == requests
    assert list(soak.requests(3, seed=4)) != requests[:3]


def test_the_heap_in_use_counts_what_the_process_holds(soak):
    """glibc's in-use bytes rise by an allocation's size while it lives and fall when it is freed:
    the reading that tells a held allocation from memory the allocator only keeps."""
    before = soak.heap_mib()
    if before is None:
        pytest.skip("the C library has no mallinfo2")
    held = bytearray(64 * 2**20)
    during = soak.heap_mib()
    del held
    after = soak.heap_mib()
    assert 63 <= during[0] - before[0] <= 66, (before, during)
    assert during[0] - after[0] >= 63, (during, after)
    assert all(v >= 0 for v in before + during + after)


def test_a_soak_that_trims_records_its_trims_apart_from_the_calls(soak):
    """`trim_every`: malloc_trim after every that many calls, timed apart; the freed memory it
    hands back leaves the allocator's kept bytes."""
    if soak.heap_mib() is None or soak.malloc_trim() is None:
        pytest.skip("the C library has no mallinfo2 / malloc_trim")
    calls = []
    result = soak._soak(calls.append, 30, 0.1, trim_every=10)
    assert len(calls) == 30 and result["calls"] == 30
    assert result["malloc_trim"]["every"] == 10 and result["malloc_trim"]["calls"] == 3
    assert 0 <= result["malloc_trim"]["p50_ms"] <= result["malloc_trim"]["max_ms"]
    assert "malloc_trim" not in soak._soak(calls.append, 5, 0.2)
    # 80 MiB of small blocks freed between blocks still held: resident until a trim.
    blocks = [bytearray(4096) for _ in range(20000)]
    keep = blocks[::50]
    del blocks
    before = soak.rss_mib()
    soak.malloc_trim()
    assert before - soak.rss_mib() >= 40, (before, soak.rss_mib())
    del keep


def _in_a_fresh_process(body):
    """Runs `body` (Python source using `soak`) in a new interpreter with glibc's default malloc
    settings and prints nothing but the JSON of the dict `seen` it fills. Where blocks land depends
    on the allocator's history: a test worker has limited its arenas and has freed gigabytes in its
    main heap, which a new block may reuse. A fresh process shows the defaults a reading explains."""
    import json
    import os
    import subprocess
    import sys
    import textwrap

    from tests.helpers.processes import REPO

    program = textwrap.dedent("""
        import json, sys
        sys.path.insert(0, {benchmarks!r})
        import soak
        seen = {{}}
    """).format(benchmarks=str(REPO / "benchmarks")) + textwrap.dedent(body) + "\nprint(json.dumps(seen))\n"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES", "LD_PRELOAD")}
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_rss_by_mapping_counts_a_threads_small_blocks_in_mallocs_arenas():
    """Small blocks a second thread allocates come from a glibc arena of its own, whose heap is
    mapped 64 MiB-aligned: they count as `malloc_arenas`."""
    seen = _in_a_fresh_process("""
        import threading

        def allocate():
            seen["before"] = soak.rss_by_mapping()
            blocks = [bytearray(1000) for _ in range(100_000)]  # ~100 MiB of small blocks
            seen["during"] = soak.rss_by_mapping()
            del blocks

        thread = threading.Thread(target=allocate)
        thread.start()
        thread.join()
    """)
    grown = seen["during"]["malloc_arenas"] - seen["before"]["malloc_arenas"]
    assert grown >= 80, seen


def test_trimmed_reads_the_rss_after_handing_freed_memory_back(soak):
    """What the fit part records after a trim: freed, fragmented memory leaves the RSS."""
    if soak.heap_mib() is None or soak.malloc_trim() is None:
        pytest.skip("the C library has no mallinfo2 / malloc_trim")
    blocks = [bytearray(4096) for _ in range(20000)]
    keep = blocks[::50]
    del blocks
    before = soak.rss_mib()
    after = soak.trimmed()
    assert set(after) == {"trim_seconds", "rss_after_trim_mib", "heap_in_use_after_trim_mib",
                          "heap_free_kept_after_trim_mib", "heap_mapped_blocks_after_trim_mib",
                          "rss_by_mapping_after_trim_mib"}
    assert before - after["rss_after_trim_mib"] >= 40, (before, after)
    assert after["rss_by_mapping_after_trim_mib"]["threads"] >= 1
    del keep


def test_rss_by_mapping_adds_up_to_the_rss_and_sees_a_large_block():
    """The kinds of mapping sum to the RSS, and a large touched block shows as anonymous memory
    (glibc maps blocks this size on their own)."""
    seen = _in_a_fresh_process("""
        seen["before"], seen["rss_before"] = soak.rss_by_mapping(), soak.rss_mib()
        held = b"x" * (64 * 2**20)
        seen["during"], seen["mapped_blocks"] = soak.rss_by_mapping(), soak.mapped_blocks_mib()
    """)
    before, during = seen["before"], seen["during"]
    total = sum(before[k] for k in ("heap", "anonymous", "files", "other"))
    assert abs(total - seen["rss_before"]) <= 0.05 * seen["rss_before"] + 2, seen
    assert during["anonymous"] - before["anonymous"] >= 60, (before, during)
    if seen["mapped_blocks"] is not None:  # glibc maps a block this size on its own
        assert seen["mapped_blocks"] >= 64, seen


def test_rss_by_mapping_tells_thread_stacks_and_executable_pages_apart(soak):
    """A thread adds one to `threads`, and its stack's resident pages count in
    `thread_stacks`; pages mapped to run code count as `anonymous_executable` (and as `anonymous`)."""
    import mmap
    import threading

    before = soak.rss_by_mapping()
    started, release = threading.Event(), threading.Event()

    def wait():
        started.set()
        release.wait()

    thread = threading.Thread(target=wait)
    thread.start()
    assert started.wait(60)
    try:
        during = soak.rss_by_mapping()
    finally:
        release.set()
        thread.join()
    assert during["threads"] == before["threads"] + 1
    # glibc keeps a finished thread's stack mapped for the next thread, so the stack may have
    # been counted before; it must be counted now.
    assert during["thread_stacks"] > 0, (before, during)

    try:
        code = mmap.mmap(-1, 8 * 2**20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                         prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except (OSError, PermissionError):
        pytest.skip("this system refuses writable executable pages")
    code.write(b"\xc3" * (8 * 2**20))  # touch every page
    after = soak.rss_by_mapping()
    code.close()
    assert after["anonymous_executable"] - before["anonymous_executable"] >= 7.5, (before, after)


@pytest.mark.integration
def test_the_small_model_tokenizes_and_pools_as_the_default_model(soak, default_encoder,
                                                                   tmp_path):
    from keras_sentemb.models import SentenceEncoder

    small = SentenceEncoder.from_preset(soak.small_model(tmp_path / "small"))
    texts = ["A man is playing a guitar.", "Кошка сидит на коврике.", "猫がマットの上に", ""]
    assert small.tokenize(texts).to_list() == default_encoder.tokenize(texts).to_list()
    assert (small.pooling, small.normalize, small.max_length) == (
        default_encoder.pooling, default_encoder.normalize, default_encoder.max_length)
    assert (small.num_layers, small.base_output_dim) == (2, 64)
    vectors = small.encode(texts, precision="float32")
    assert vectors.shape == (4, 64) and np.isfinite(vectors).all()


def test_the_traced_functions_stay_at_one_forward_pass_and_one_tokenizer(soak):
    from tests.conftest import make_tiny_encoder

    encoder = make_tiny_encoder()
    for sentences in soak.requests(12, seed=1):
        encoder.encode(sentences, precision="float32")
    assert soak.traced_functions(encoder) == {"count": 2, "variants": 2}


def test_late_over_early_compares_medians_of_three_and_skips_the_first_run(soak):
    def runs(values):
        return [{"seconds": v, "cpu_seconds": 2 * v} for v in values]

    # Runs 2-4 (median 10) against the last three (median 11); the first, slow run and a
    # single noisy late run do not move it.
    by_method = {"simcse": runs([40, 10, 9, 12, 10, 30, 11, 11]), "ct": runs([20, 5, 6, 7, 8])}
    assert soak.late_over_early(by_method) == {"simcse": 1.1, "ct": 1.6}
    assert soak.late_over_early(by_method, "cpu_seconds") == {"simcse": 1.1, "ct": 1.6}
    assert soak.late_over_early({"sg": runs([3, 4])}) == {}
    # The same, of each run over a fresh process's at the same moment: a host that slows
    # down by half slows both, and the ratio stays flat.
    drifting = [{"cpu_over_fresh": round(v / f, 3)} for v, f in
                zip([40, 10, 9, 12, 10, 30, 15, 15], [20, 10, 9, 12, 10, 20, 15, 15])]
    assert soak.late_over_early({"simcse": drifting}, "cpu_over_fresh") == {"simcse": 1.0}


def test_a_fits_phases_split_its_seconds_at_the_batches(soak):
    """setup: up to the start of training; first step: the first batch; step: the median later
    batch; finish: after the last batch. Wall and CPU each, from the callback's stamps."""

    class Clock:
        stamps = [(10.0, 100.0), (14.0, 103.0), (15.0, 104.0), (15.5, 104.5), (17.5, 106.0)]

    phases = soak._phases((8.0, 99.0), Clock(), (18.0, 106.25))
    assert phases == {"setup_wall": 2.0, "first_step_wall": 4.0, "step_wall": 1.0,
                      "finish_wall": 0.5, "setup_cpu": 1.0, "first_step_cpu": 3.0,
                      "step_cpu": 1.0, "finish_cpu": 0.25}
    Clock.stamps = Clock.stamps[:2]  # one batch: no later batch to take a median of
    assert soak._phases((8.0, 99.0), Clock(), (18.0, 106.0)) == {}


def test_the_late_runs_are_read_against_the_early_ones_phase_by_phase(soak):
    runs = [{"step_cpu": 1.0 + (i >= 6) * 0.5, "setup_cpu": 2.0} for i in range(9)]
    assert soak.late_over_early({"simcse": runs}, "step_cpu") == {"simcse": 1.5}
    assert soak.late_over_early({"simcse": runs}, "setup_cpu") == {"simcse": 1.0}
    assert soak.late_over_early({"simcse": [{"seconds": 1.0}]}, "step_cpu") == {}
