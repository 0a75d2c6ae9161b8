"""Threads and fork: when our work is split or limited, and how many threads it uses (calling thread only).

Every size threshold for threads lives here: :data:`SMALL_WORK_MACS` (a batch runs on one thread
below it), :data:`DIRECTION_THREADS_MIN_MACS` (the two LSTM directions run on two pool threads from
it) and :data:`SPLIT_TOKENS` (the char CNN runs as two halves on the pool threads from it).

``torch.set_num_threads`` is process-wide: torch copies its value into every thread that starts
using torch afterwards, so changing it during a call (even briefly) leaves other code's threads
on the wrong count. Here a limit applies to the calling thread alone: OpenMP's thread count is a
per-thread setting (``omp_set_num_threads`` outside a parallel region), and MKL has
``mkl_set_num_threads_local``. torch's own setting is written in one place, :func:`set_process_threads`, which
only the commands call, in their own processes (``--threads``); the library never does.

After ``fork`` the child has no pool threads (libgomp's, ours) and may hold copies of locks that
other threads of the parent held: :func:`at_fork_in_child` registers what must be renewed there,
and :func:`batch_thread_limit` makes our work in a forked child single-threaded (a multi-threaded
torch op there hangs on libgomp's lost pool, as PyTorch's DataLoader workers know).
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Optional

import torch

from ..groundwork.excerpt import excerpt
from ..groundwork.fork_safety import (  # noqa: F401 (ForkSafeLock, renew_after_fork re-exported)
    ForkSafeLock,
    ForkSafePool,
    at_fork_in_child,
    in_forked_child,
    renew_after_fork,
)
from ..groundwork.number_checks import whole_number

# -- when work is split or limited -------------------------------------------------------------
# Multiply-adds are those of the recurrent product of one LSTM step (rows x projection x 4 cells).

# per step, below which a batch runs on one thread (waking a team costs more than it saves). Twice the bundled
# model's batch-1 step (1 row x 128 x 4 x 512 = 262,144), so that a single sentence there never gets a team: a team
# did not pay at that step on a quiet machine and lost several-fold with one core busy, while it paid from twice
# that work on a quiet one (benchmarks/RESULTS.md, "Single sentences on the bundled model")
SMALL_WORK_MACS = 524_288
DIRECTION_THREADS_MIN_MACS = 2_000_000  # per step and direction, from which the two directions get a thread each
SPLIT_TOKENS = 64  # new tokens per batch from which the char CNN runs as two halves on two threads
MAX_THREADS = 4096  # the most a command's --threads may ask torch for (OpenMP would try to start every one)


class _Native:
    """The thread-local setters of the OpenMP runtime and MKL that torch is linked with (absent ones: None)."""

    def __init__(self) -> None:
        process = ctypes.CDLL(None)  # torch loads its OpenMP runtime globally
        self.omp_set = getattr(process, "omp_set_num_threads", None)
        self.mkl_set_local = None
        library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"  # MKL is linked into it
        if library.is_file():
            with contextlib.suppress(OSError):
                self.mkl_set_local = getattr(
                    ctypes.CDLL(str(library)), "MKL_Set_Num_Threads_Local", None
                )  # the C entry point
        if self.mkl_set_local is not None:
            self.mkl_set_local.restype = ctypes.c_int


_native: Optional[_Native] = None


def _natives() -> _Native:
    global _native
    if _native is None:
        _native = _Native()
    return _native


def _torch_thread_count() -> int:
    """torch's thread count as this thread sees it. Asked before a limit is set: torch's first call in a thread sets
    that thread's OpenMP count to its own, which would otherwise undo the limit at the block's first op."""
    return torch.get_num_threads()


def set_process_threads(threads: Optional[int]) -> None:
    """Set torch's process-wide thread count to ``threads`` (``None`` or 0: leave torch's choice).

    The one place the count is set, for a command's own process only: ``--threads`` of ``embed`` and ``adapt``
    (cli/) and each training process of ``train`` (train/run/launch.py: ``--threads``, else the cores shared out
    between its processes, else a resumed run's recorded count). Library code never calls it: the count is its
    caller's.
    """
    if threads:
        count = whole_number(threads, 1, MAX_THREADS)
        if count is None:
            raise ValueError(f"--threads={excerpt(threads)}: expected a positive integer up to {MAX_THREADS}")
        torch.set_num_threads(count)


@contextlib.contextmanager
def thread_limit(threads: Optional[int]) -> Iterator[None]:
    """Run the block's torch CPU ops on at most ``threads`` threads, in this thread only (``None``: no change).

    Where the runtime has no thread-local setter (no OpenMP symbols found) the block runs unlimited,
    which is slower for tiny work; the numbers agree to float32 rounding (another thread count may
    split a sum differently).
    """
    current = _torch_thread_count()
    native = _natives()
    omp_set = native.omp_set
    if threads is None or threads >= current or omp_set is None:
        yield
        return
    mkl_set_local = native.mkl_set_local
    omp_set(int(threads))
    previous_mkl = mkl_set_local(int(threads)) if mkl_set_local is not None else None
    try:
        yield
    finally:
        omp_set(current)
        if mkl_set_local is not None:
            mkl_set_local(previous_mkl)


def batch_thread_limit(step_macs: int, device: torch.device, small_work_threads: Optional[int]) -> Optional[int]:
    """The thread limit for one batch whose LSTM steps cost ``step_macs`` multiply-adds (``None``: no limit).

    1 in a forked child; ``small_work_threads`` for small CPU work (below :data:`SMALL_WORK_MACS`),
    whose steps take a few microseconds, less than waking a thread team costs. A team of two also waits at every
    operator for its slower thread: with another process busy on one core, a small step then costs a scheduler
    time slice instead of microseconds, so the threshold sits well above the smallest work that a team speeds up on
    a quiet machine, not at it.
    """
    if in_forked_child():
        return 1
    small = device.type == "cpu" and small_work_threads is not None and step_macs < SMALL_WORK_MACS
    return small_work_threads if small else None


def split_directions(step_macs: int, device: torch.device) -> bool:
    """Whether the two LSTM directions run on the two pool threads: CPU, 2+ threads,
    :data:`DIRECTION_THREADS_MIN_MACS`."""
    return device.type == "cpu" and _torch_thread_count() >= 2 and step_macs >= DIRECTION_THREADS_MIN_MACS


def use_sigmoid_tanh(device: torch.device) -> bool:
    """Whether the LSTM steps compute tanh as ``2 sigmoid(2x) - 1`` (:func:`.engine.step_loop.cell_update`): on CPU
    with several threads. There torch sends tanh of contiguous float tensors to MKL's vector math, which starts its
    own thread team even for the few hundred numbers of one step (on a busy machine each call can then wait
    milliseconds); sigmoid stays on torch's own kernels. The two forms agree within 1e-7."""
    return device.type == "cpu" and _torch_thread_count() > 1


def split_tokens(n_tokens: int, device: torch.device) -> bool:
    """Whether ``n_tokens`` new tokens go through the char CNN as two halves on the pool threads."""
    return device.type == "cpu" and n_tokens >= SPLIT_TOKENS and _torch_thread_count() >= 2


# -- the two-thread pool for independent halves of the work (LSTM directions, char-CNN halves) --


def _single_threaded_worker() -> None:
    """Each pool thread runs its share on one core (this thread's setting only)."""
    native = _natives()
    _torch_thread_count()  # first, so that torch sets this thread's count before the limit below, not after
    if native.omp_set is not None:
        native.omp_set(1)
    if native.mkl_set_local is not None:
        native.mkl_set_local(1)


def _new_pool() -> ForkSafePool:
    """The two-thread pool, not started yet (its threads start on first use)."""
    return ForkSafePool(2, "spacy-elmo-direction", initializer=_single_threaded_worker)


_pool = _new_pool()


def two_thread_pool() -> ThreadPoolExecutor:
    """Two single-threaded worker threads, started on first use (and anew in a forked child)."""
    return _pool.get()


def run_halves(function: Callable[[torch.Tensor], torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
    """``function(rows)`` with the rows split in two halves computed on the two pool threads (no autograd)."""
    half = (rows.shape[0] + 1) // 2
    futures = [two_thread_pool().submit(_call_without_autograd, function, part) for part in (rows[:half], rows[half:])]
    return torch.cat([f.result() for f in futures])


def _call_without_autograd(function: Callable[[torch.Tensor], torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return function(rows)
