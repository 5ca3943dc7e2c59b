"""glibc malloc tuning for the embedded engine's process: keep large buffers off the heap.

What a replay's peak RSS is made of (mallinfo2, first 4,000 requests of the shipped trace at
the default pool, instrumentation off, 2026-12-02): the engine's build leaves a ~200 MB
heap; by the end of the loop the heap has grown to 713 MB of which 211 MB is in use and
501 MB is free but held. The bare loop's process grows by 31 MB. The free part is
fragmentation: every request allocates prompt-sized buffers (its token arrays, fill ids,
prefix index tensors, extend outputs and kernel temporaries, tens to hundreds of KiB each)
that glibc places on the heap, because its mmap threshold rises after the first large free
(from 128 KiB up to 32 MiB), interleaved with small long-lived allocations that pin the
holes. `malloc_trim` in the loop does not give them back.

A fixed mmap threshold stops that: buffers of at least `MMAP_THRESHOLD` bytes get their own
mapping and return it when freed. Measured, same run, RSS growth over the build:

    threshold       none (dynamic)   128 KiB   64 KiB   16 KiB   4 KiB
    4,000 requests      +527 MB      +281 MB   +158 MB   +74 MB   +56 MB

Each mapping costs page faults on first touch, so lower thresholds trade CPU for memory.
On this shared 2-core machine the loop times of that sweep (24, 68, 38, 43, 55 s in the
order above) were dominated by the load of other processes; an interleaved rerun at 2,000
requests (none, 64 KiB, none, 64 KiB: 82, 45, 34, 32 s) shows no cost above the noise for
64 KiB, which is why it is the setting; benchmarks/bench_replay.py reports the loop and
the peak RSS with it in place. `M_TRIM_THRESHOLD` (1 MiB) returns a
freed top of the heap sooner. Only a process-wide allocator setting, never a change to
what SGLang computes; a no-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util

MMAP_THRESHOLD = 64 * 1024
TRIM_THRESHOLD = 1 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
_done = False


def tune() -> bool:
    """Set glibc's mmap and trim thresholds for this process (idempotent). Returns whether
    they were set (False where mallopt is unavailable)."""
    global _done
    if _done:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    _done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _done
