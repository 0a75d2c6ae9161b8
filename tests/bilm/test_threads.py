"""bilm/threads.py: ForkSafeLock (a lock another thread held at a fork is free in the child), tanh's form, and which
batches run on one thread."""

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


def test_a_single_sentence_on_the_bundled_model_runs_on_one_thread_with_a_margin():
    """threads.batch_thread_limit: the bundled model's batch-1 step is small work with room to spare (a team there
    waits on a busy core at every operator); from SMALL_WORK_MACS on, torch's own count."""
    import json
    from pathlib import Path

    import torch

    import spacy_elmo
    from spacy_elmo.bilm.threads import SMALL_WORK_MACS, batch_thread_limit

    lstm = json.loads((Path(spacy_elmo.__file__).parent / "models" / "default" / "options.json").read_text())["lstm"]
    batch_1_step = 1 * lstm["projection_dim"] * 4 * lstm["dim"]  # the recurrent product of one step, as the backend
    cpu = torch.device("cpu")
    assert 2 * batch_1_step <= SMALL_WORK_MACS  # a margin, not an edge
    assert batch_thread_limit(batch_1_step, cpu, 1) == 1
    assert batch_thread_limit(SMALL_WORK_MACS - 1, cpu, 1) == 1
    assert batch_thread_limit(SMALL_WORK_MACS, cpu, 1) is None
    assert batch_thread_limit(batch_1_step, cpu, None) is None  # small_work_threads = None: turned off
    assert batch_thread_limit(batch_1_step, torch.device("meta"), 1) is None  # CPU work only
