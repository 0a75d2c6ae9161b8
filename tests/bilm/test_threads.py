"""bilm/threads.py's ForkSafeLock: a lock another thread held at a fork is free in the child."""

import os
import sys
import threading

import pytest

from spacy_elmo.bilm.threads import ForkSafeLock


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs fork")
@pytest.mark.parametrize("factory", [threading.Lock, threading.RLock])
def test_a_lock_held_by_another_thread_at_fork_is_free_in_the_child(factory):
    lock = ForkSafeLock(factory)
    held, release = threading.Event(), threading.Event()

    def holder():
        with lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(10)
    try:
        pid = os.fork()
        if pid == 0:  # the child: the holder thread does not exist here
            os._exit(0 if lock.acquire(timeout=5) else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert not lock.acquire(blocking=False)  # the parent's lock is still held by its thread
    finally:
        release.set()
        thread.join()
    with lock:  # and usable as the lock itself
        pass
