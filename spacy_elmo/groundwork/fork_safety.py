"""What a forked child must renew: locks another thread of the parent may have held, caches, pools.

``fork`` copies every lock as it was: one that another thread of the parent held at that moment is held forever in
the child (that thread does not exist there), so the first ``with lock:`` hangs. :class:`ForkSafeLock` is renewed,
unlocked, in the child; :func:`renew_after_fork` calls an object's ``_after_fork()`` there, and
:func:`at_fork_in_child` runs a module's callback there (forget a pool). Below every group and torch-free (nothing of
the package imported), so that the backend, its caches and the front ends use it without torch;
:mod:`spacy_elmo.bilm.threads` re-exports it and decides, with :func:`in_forked_child`, that work in a child runs on
one thread.
"""

from __future__ import annotations

import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional

_callbacks: list[Callable[[], None]] = []
_renewed: weakref.WeakSet[Any] = weakref.WeakSet()
_forked = False


def at_fork_in_child(callback: Callable[[], None]) -> Callable[[], None]:
    """Run ``callback`` in a forked child before anything else (renew locks, forget pools); usable as a decorator."""
    _callbacks.append(callback)
    return callback


def renew_after_fork(holder: Any) -> None:
    """Call ``holder._after_fork()`` in a forked child: objects with locks or caches another thread may have held."""
    _renewed.add(holder)


def in_forked_child() -> bool:
    """Whether this process is a forked child of the one that imported this module."""
    return _forked


class ForkSafeLock:
    """A lock (``threading.Lock`` by default, or another factory's, e.g. ``threading.RLock``) that a forked child
    gets anew and unlocked.

    ``fork`` copies a lock that another thread of the parent held at that moment; that thread does not exist
    in the child, so nothing there would ever release it, and the first ``with lock:`` would hang forever.
    Use it as the lock itself: ``with lock:``, ``acquire()``, ``release()``.
    """

    def __init__(self, factory: Callable[[], Any] = threading.Lock) -> None:
        self._factory = factory
        self._lock = factory()
        renew_after_fork(self)

    def __enter__(self) -> bool:
        return self._lock.__enter__()

    def __exit__(self, *exc_info: Any) -> None:
        self._lock.__exit__(*exc_info)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def _after_fork(self) -> None:
        self._lock = self._factory()


class ForkSafePool:
    """A thread pool of ``workers`` threads named ``name``, started on first use (:meth:`get`) and anew in a forked
    child: the parent's threads do not exist there, and work handed to its pool would wait forever. ``initializer``
    runs in each thread when it starts (e.g. a thread-local limit)."""

    def __init__(self, workers: int, name: str, initializer: Optional[Callable[[], None]] = None) -> None:
        self._workers, self._name, self._initializer = workers, name, initializer
        self._pool: Optional[ThreadPoolExecutor] = None
        self._lock = ForkSafeLock()
        renew_after_fork(self)

    def get(self) -> ThreadPoolExecutor:
        """The pool, started now if it is not yet."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, self._name, self._initializer)
            return self._pool

    def _after_fork(self) -> None:
        self._pool = None


def _after_fork_in_child() -> None:
    global _forked
    _forked = True
    for callback in _callbacks:
        callback()
    for holder in list(_renewed):
        holder._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
