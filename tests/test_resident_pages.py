"""The test processes' page lock: file-backed code only, never the heap."""

import subprocess
import sys

import pytest

from tests import resident_pages

MAPS = """\
55d0c0a00000-55d0c0a21000 r--p 00000000 fd:01 131 /usr/bin/python3.11
7f3a10000000-7f3a10021000 rw-p 00000000 00:00 0
7f3a12000000-7f3a14000000 r-xp 00100000 fd:01 4242 /venv/lib/libtensorflow_framework.so.2
7f3a14000000-7f3a14001000 ---p 00000000 fd:01 4242 /venv/lib/libtensorflow_framework.so.2
7f3a15000000-7f3a15100000 rw-s 00000000 00:05 77 /dev/shm/gone (deleted)
7ffd1e3e0000-7ffd1e401000 rw-p 00000000 00:00 0                          [stack]
7ffd1e5f1000-7ffd1e5f3000 r-xp 00000000 00:00 0                          [vdso]
"""


def test_file_mappings_lists_readable_file_backed_ranges_only(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(MAPS)
    assert list(resident_pages.file_mappings(str(maps))) == [
        (0x55D0C0A00000, 0x55D0C0A21000, "/usr/bin/python3.11"),
        (0x7F3A12000000, 0x7F3A14000000, "/venv/lib/libtensorflow_framework.so.2"),
    ]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's mlock2")
def test_locks_library_pages_on_fault_and_leaves_the_heap_alone():
    script = """
import re
from tests import resident_pages

def locked_kib():
    return int(re.search(r"VmLck:\\s+(\\d+)", open("/proc/self/status").read()).group(1))

heap = bytearray(256 << 20)  # touched anonymous memory
assert resident_pages.lock_file_mappings() > 0
assert resident_pages.lock_file_mappings() == 0  # nothing new the second time
after = locked_kib()
import decimal, json, sqlite3  # code loaded now is locked by the next call
resident_pages.lock_file_mappings()
print(after, locked_kib())
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=resident_pages.__file__.rsplit("/tests/", 1)[0], check=True)
    before, after = (int(kib) for kib in result.stdout.split())
    if before == 0:
        pytest.skip("this host does not permit locking pages (RLIMIT_MEMLOCK)")
    assert before < 64 << 10  # the 256 MiB heap is not locked
    assert after > before
