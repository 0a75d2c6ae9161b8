"""Keep freed memory for reuse in a training process (glibc's malloc), instead of returning it to the system.

A training step allocates and frees the same large tensors every step: the gates of every time step
of a layer (``2 x rows x 4 cell`` floats, tens of megabytes), the softmax's logits, their bfloat16
copies. glibc's malloc serves blocks above its mmap threshold (at most 32 MiB) with a fresh ``mmap``
and gives them back with ``munmap`` when freed, so each step touches new pages and pays a page fault
for every 4 KiB of them: on a 2-core AMD EPYC Zen 4 that was a third of a step's time
(benchmarks/RESULTS.md, "Training speed"). :func:`keep_freed_memory` sets ``M_MMAP_MAX`` to 0
(every block from the heap) and ``M_TRIM_THRESHOLD`` to its maximum (freed memory stays with the
process), so the second step reuses the first step's pages; the peak resident memory is the same.

This changes the allocator of the whole process, so only the ``spacy-elmo train`` command calls it,
in its own training processes; library code never does. Where the user set glibc's own variables
(``MALLOC_MMAP_MAX_``, ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_MMAP_THRESHOLD_``) or the C library is
not glibc, nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_USER_SETTINGS = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")


def keep_freed_memory() -> str:
    """Make this process's malloc keep freed memory for reuse; what was done, for the run's output."""
    given = [name for name in _USER_SETTINGS if name in os.environ]
    if given:
        return f"malloc as set by {', '.join(given)}"
    if not sys.platform.startswith("linux"):
        return f"the system's malloc ({sys.platform})"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        version = libc.gnu_get_libc_version
    except (OSError, AttributeError):
        return "the C library's malloc (not glibc: left as it is)"
    version.restype = ctypes.c_char_p
    # mallopt returns 1 on success
    if libc.mallopt(_M_MMAP_MAX, 0) != 1 or libc.mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) != 1:
        return "glibc's malloc (mallopt refused: left as it is)"
    return f"glibc {version().decode()} malloc keeps freed memory for reuse"


__all__ = ["keep_freed_memory"]
