"""Keep the library code a test process has run in memory (Linux, where permitted).

Some hosts page out file pages that stayed idle for a minute (a DAMON `pageout`
scheme). With no swap only file-backed pages go: TensorFlow's and Keras' shared
libraries, whose code no test ran for a while, are then read back from disk by the
next test that runs it. In full runs on such a host, cheap tests took ten to fifty
times their time alone.

`lock_file_mappings()` locks every readable file-backed mapping of this process
with `mlock2(MLOCK_ONFAULT)`: a page is locked when it is first touched, never read
in ahead of use, and anonymous memory (the heap, tensors) is left alone, so malloc
still gives freed memory back. Call it again after new libraries load; mappings
already locked are skipped. Where locking is not permitted (no CAP_IPC_LOCK and a
small RLIMIT_MEMLOCK) the calls fail and nothing changes.
"""

import ctypes
import ctypes.util
import sys

_MLOCK_ONFAULT = 1
_locked = set()
_libc = None


def _mlock2():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.mlock2.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint)
    return _libc.mlock2


def file_mappings(maps="/proc/self/maps"):
    """(start, end, path) of each readable mapping of a file in `maps`."""
    with open(maps) as lines:
        for line in lines:
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or fields[4] == "0" or "r" not in fields[1]:
                continue
            path = fields[5].strip()
            if not path.startswith("/") or path.endswith("(deleted)"):
                continue
            start, end = (int(bound, 16) for bound in fields[0].split("-"))
            yield start, end, path


def lock_file_mappings():
    """Lock this process's new file-backed mappings on fault; returns how many were new."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        mlock2 = _mlock2()
        mappings = list(file_mappings())
    except (OSError, AttributeError):
        return 0
    new = 0
    for start, end, _ in mappings:
        if (start, end) in _locked:
            continue
        _locked.add((start, end))
        new += 1
        mlock2(start, end - start, _MLOCK_ONFAULT)
    return new
