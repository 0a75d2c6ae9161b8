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


def test_tanh_through_sigmoid_only_on_cpu_with_several_threads():
    """threads.use_sigmoid_tanh, the one choice of tanh's form in the LSTM steps: the sigmoid form where torch would
    hand tanh to MKL's threaded vector math (CPU, 2+ threads), torch's tanh elsewhere."""
    import torch

    from spacy_elmo.bilm.threads import use_sigmoid_tanh

    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert use_sigmoid_tanh(torch.device("cpu")) and not use_sigmoid_tanh(torch.device("meta"))
        torch.set_num_threads(1)
        assert not use_sigmoid_tanh(torch.device("cpu"))
    finally:
        torch.set_num_threads(saved)
