"""Freed memory handed back to the system in long-running processes (glibc's `malloc_trim`).

A service calls `encode` for every request, with every batch size and length.
TensorFlow frees what each call allocated, but glibc keeps the freed pages of
its per-thread arenas resident for reuse, and with requests of ever-changing
sizes those pages fragment: over 20,000 calls of random size the resident
memory of a float32 `encode` process grew 5.6 % after its warm-up while the
memory it held grew 3 % (`benchmarks/soak.py`). `malloc_trim(0)` hands every
arena's free pages back; after every 100th call it took the growth to 4.1 %
for 25 ms a trim (p50), a quarter of a millisecond a call.

`after_encode()` counts the calls of this process and trims after every
`every`-th one. `KERAS_SENTEMB_MALLOC_TRIM_EVERY` sets `every` (0: never). On
a C library without `malloc_trim` (musl, macOS, Windows) it does nothing.
"""

import ctypes
import logging
import os
import threading

ENV = "KERAS_SENTEMB_MALLOC_TRIM_EVERY"
DEFAULT_EVERY = 100

logger = logging.getLogger(__name__)


def _malloc_trim():
    """glibc's `malloc_trim`, or None where the C library has none."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None


def trim_every():
    """Calls between trims: `KERAS_SENTEMB_MALLOC_TRIM_EVERY` when it is an int >= 0, else 100."""
    raw = os.environ.get(ENV)
    if raw is None or not raw.strip():
        return DEFAULT_EVERY
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        logger.warning("%s=%r is not a count of calls (an int >= 0); trimming after every %d "
                       "calls.", ENV, raw, DEFAULT_EVERY)
        return DEFAULT_EVERY
    return value


class HeapTrim:
    """Counts calls; `malloc_trim(0)` after every `every`-th (thread-safe).

    Args:
        every: int or None. Calls between trims; None reads `trim_every()`
            at the first call; 0 never trims.
        trim: callable or None. The trim (tests pass a fake); None is
            glibc's `malloc_trim`, looked up at the first trim.
    """

    def __init__(self, every=None, trim=None):
        self.every = every
        self.calls = 0
        self.trims = 0
        self._trim = trim
        self._lock = threading.Lock()

    def __call__(self):
        """Count one call; trim if it is an `every`-th. Returns whether it trimmed."""
        with self._lock:  # the count and the decision; the trim itself runs outside
            if self.every is None:
                self.every = trim_every()
            if not self.every:
                return False
            self.calls += 1
            if self.calls % self.every:
                return False
            if self._trim is None:
                self._trim = _malloc_trim() or (lambda pad: 0)
            self.trims += 1
            trim = self._trim
        trim(0)
        return True


# The process's counter: every `encode` of every encoder counts.
after_encode = HeapTrim()
