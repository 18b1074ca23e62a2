"""Keep freed memory in the process: glibc's malloc told not to hand large buffers back to the system.

By default glibc serves allocations over its mmap threshold (128 KiB, raised dynamically) with fresh mappings
and returns them to the system on free, and trims the heap's top once 128 KiB lie unused there. A training
step frees and reallocates the same score maps every step ([B, C, T, T] and [B, D, T, T], megabytes each), so
a fresh worker faulted them back page by page every step (issue 45: 9-14k page faults, 21-27 ms of kernel
time per step of DAPE1x3, 243 -> 187 ms/step with the settings below). `keep_freed_memory` raises both
thresholds (mallopt), so freed buffers stay in the heap and are reused; the arithmetic is untouched (the
same values, bit for bit: tests/test_allocator.py).

A no-op where the C library is not glibc (macOS, musl). Called where a trial trains and where an
evaluation task runs (`run_experiment`, orchestrator/evaluation/worker.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD_BYTES = 1 << 30  # unused memory the heap's top may keep before it is given back
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest: allocations below it come from the heap and stay there


@functools.cache
def keep_freed_memory() -> bool:
    """Raise glibc's trim and mmap thresholds for this process, once; True where they were set."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD,
                                                                                    TRIM_THRESHOLD_BYTES))
