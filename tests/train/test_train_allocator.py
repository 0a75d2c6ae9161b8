"""keep_freed_memory: a training process reuses its freed large blocks instead of faulting in new pages each step."""

import os
import subprocess
import sys

import pytest

from spacy_elmo.train import allocator

# 10 rounds of a 64 MiB tensor written and freed (what a training step does with its gates); minor page faults.
# As in the train and adapt commands, the training stack is imported before keep_freed_memory is called: in an
# interpreter that has imported only torch, glibc served some rounds with fresh pages even so (7 of 10 rounds in
# most runs, on glibc 2.36), which no command does.
FAULTS = """
import resource, sys
import torch
import spacy_elmo.train.run.launch  # what `spacy-elmo train` has imported when it calls keep_freed_memory
from spacy_elmo.train.allocator import keep_freed_memory
note = keep_freed_memory() if sys.argv[1] == "keep" else "as is"
torch.ones(16 * 2**20)  # a first round, faulted in either way
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    torch.ones(16 * 2**20)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, note)
"""


def _faults(mode: str) -> tuple[int, str]:
    # without the variables another library may have set in this process (Dask sets MALLOC_TRIM_THRESHOLD_)
    env = {k: v for k, v in os.environ.items() if k not in allocator._USER_SETTINGS}
    result = subprocess.run(
        [sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True, env=env, timeout=120
    )
    count, note = result.stdout.strip().split(" ", 1)
    return int(count), note


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc: Linux")
def test_freed_blocks_are_reused_without_new_page_faults():
    plain, _ = _faults("plain")
    kept, note = _faults("keep")
    if not note.startswith("glibc"):
        pytest.skip(f"not glibc here: {note}")
    pages = 10 * 64 * 2**20 // 4096  # every round's pages, faulted in again without keeping them
    assert plain > pages // 2, plain
    assert kept <= pages // 5, (kept, note)  # measured: 163,850 faults as is, 16,384 (one round's) kept


def test_the_users_own_malloc_settings_are_left_alone(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1000")
    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda *a, **k: pytest.fail("mallopt called"))
    assert allocator.keep_freed_memory() == "malloc as set by MALLOC_TRIM_THRESHOLD_"


def test_other_systems_keep_their_malloc(monkeypatch):
    for name in allocator._USER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(allocator.sys, "platform", "darwin")
    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda *a, **k: pytest.fail("mallopt called"))
    assert allocator.keep_freed_memory() == "the system's malloc (darwin)"
