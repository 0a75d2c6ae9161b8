"""What this machine offers a process, read without torch: the cores it may run on and its physical memory.

The checks of a user's numbers bound counts and sizes by them (``runtime/configuration/validation.py``: at most the
usable cores for worker processes, at most the memory for an in-memory cache), and ``spacy-elmo train`` shares the cores
out between its processes. Read at each call (a process's affinity can change), never cached.
"""

from __future__ import annotations

import os
from typing import Optional

__all__ = ["memory_bytes", "usable_cores"]


def usable_cores() -> int:
    """The CPU cores this process may run on: its affinity where the system says it (Linux), else the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def memory_bytes() -> Optional[int]:
    """This machine's physical memory in bytes, or None where the system does not say (no ``sysconf`` fields)."""
    try:
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None
    return pages * page_size if pages > 0 and page_size > 0 else None
