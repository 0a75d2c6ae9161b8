"""Training on several processes: torchrun's environment, the process group, and what ranks agree on.

``torchrun --nproc_per_node N -m spacy_elmo train ...`` starts N processes with ``WORLD_SIZE``,
``RANK`` and ``LOCAL_RANK`` set; :func:`join_world` then joins the process group (gloo for a model
on the CPU, nccl for one on a GPU). Without those variables (or with ``WORLD_SIZE=1``) it returns
:data:`SINGLE`, whose collectives are no-ops, so a single-process run does exactly what it did
before. ``spacy-elmo train --processes N`` starts N processes itself (:func:`run_processes`:
``torch.multiprocessing``, a gloo group on this machine), for the same training as torchrun's.

Every rank reads the same corpus and builds the same global batches; each trains on its
:meth:`World.share` of each batch's rows, and DistributedDataParallel sums the gradients. The
global batch (``--token-budget``) and the number of steps are those of a single-process run, and
so is the gradient (to float rounding); no rank can run out of batches before another. Decisions
that end or change a run (a diverged loss, the time limit) are taken from all-reduced numbers, so
all ranks take them at the same step. Rank 0 alone writes files and prints.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import torch

T = TypeVar("T")

_ENV = ("WORLD_SIZE", "RANK", "LOCAL_RANK")
# how long a collective waits for gloo's worker thread to let go of its tensor (it does so a moment after the
# collective completes: microseconds, milliseconds on a loaded machine), and how often it looks
_RELEASE_TIMEOUT_S = 1.0
_RELEASE_POLL_S = 5e-5


@dataclass(frozen=True)
class World:
    """This process's place among the training processes (rank 0 of 1 when not distributed)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0  # rank on this machine
    local_size: int = 1  # processes on this machine
    backend: Optional[str] = None  # "gloo" or "nccl" once the process group is joined

    @property
    def is_main(self) -> bool:
        """Whether this process writes the files and prints (rank 0)."""
        return self.rank == 0

    def share(self, rows: Sequence[T]) -> tuple[list[T], float]:
        """This rank's rows of a global batch (every ``size``-th, from ``rank``) and their weight.

        A batch with fewer rows than ranks leaves some ranks without a row: they take the first
        row with weight 0, so that they still join the gradient all-reduce but add nothing to it.
        """
        mine = list(rows[self.rank :: self.size])
        if mine:
            return mine, 1.0
        return list(rows[:1]), 0.0

    def sum(self, values: Sequence[float]) -> list[float]:
        """``values`` summed over all ranks (float64; unchanged with one process)."""
        if self.size == 1:
            return [float(v) for v in values]
        tensor = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self._device())
        self._all_reduce(tensor)
        return [float(v) for v in tensor.tolist()]

    def max(self, value: float) -> float:
        """The largest ``value`` of all ranks (unchanged with one process)."""
        if self.size == 1:
            return float(value)
        tensor = torch.tensor([float(value)], dtype=torch.float64, device=self._device())
        self._all_reduce(tensor, op=torch.distributed.ReduceOp.MAX)
        return float(tensor.item())

    def same(self, value: int) -> bool:
        """Whether every rank holds the same ``value`` (an integer below 2**53; True with one process)."""
        if self.size == 1:
            return True
        low, high = self.max(-float(value)), self.max(float(value))
        return -low == high

    def barrier(self) -> None:
        """Wait until every rank is here (nothing with one process)."""
        if self.size > 1:
            torch.distributed.barrier()

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` as DistributedDataParallel (its weights broadcast from rank 0), or itself with one process.

        ``find_unused_parameters``: the adaptive softmax's tail clusters get no gradient in a
        step whose targets on this rank are all in the head (and a parameter no rank used keeps
        no gradient, as in a single process; torch warns once per process when a step used them all).
        """
        if self.size == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [self.local_rank] if self.backend == "nccl" else None
        return DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=True)

    def describe(self) -> str:
        """One line for the start of a run, e.g. ``world size 2 (gloo): rank 0 of 2 writes the files``."""
        return f"world size {self.size} ({self.backend}): rank {self.rank} of {self.size} writes the files"

    def _device(self) -> torch.device:
        return torch.device("cuda", self.local_rank) if self.backend == "nccl" else torch.device("cpu")

    def _all_reduce(self, tensor: torch.Tensor, **options: Any) -> None:
        """``all_reduce(tensor, **options)``; with gloo, returns once gloo's worker thread has let go of ``tensor``.

        gloo runs a collective on a worker thread, which wakes the caller and only then drops its
        reference to the tensor. Dropping a C++ reference to a tensor made in Python takes the GIL.
        A rank that stops right after its last collective (a diverged loss) may be shutting the
        interpreter down by then: Python ends a thread that asks for the GIL during shutdown, inside
        a C++ destructor, and the process aborts ("terminate called without an active exception",
        SIGABRT instead of exit status 2). :func:`leave_world` cannot join those threads:
        DistributedDataParallel (and torch modules it imports) keep the process group alive until
        the process exits.
        """
        torch.distributed.all_reduce(tensor, **options)
        if self.backend == "gloo":
            _wait_until_released(tensor)


SINGLE = World()


def weights_digest(module: torch.nn.Module) -> int:
    """A 48-bit digest of ``module``'s parameter bytes: equal on ranks whose weights are bit-identical."""
    digest = hashlib.blake2b(digest_size=6)
    for name, param in sorted(module.named_parameters()):
        digest.update(name.encode())
        digest.update(param.detach().cpu().contiguous().numpy().tobytes())
    return int.from_bytes(digest.digest(), "big")


def launched_world() -> Optional[tuple[int, int, int, int]]:
    """(rank, size, local rank, local size) from torchrun's variables, or None for a single process."""
    if not all(name in os.environ for name in _ENV):
        return None
    try:
        size = int(os.environ["WORLD_SIZE"])
        rank = int(os.environ["RANK"])
        local_rank = int(os.environ["LOCAL_RANK"])
        local_size = int(os.environ.get("LOCAL_WORLD_SIZE", size))
    except ValueError as err:
        raise ValueError(f"torchrun's WORLD_SIZE, RANK and LOCAL_RANK must be integers ({err})") from err
    if size <= 1:
        return None
    if not 0 <= rank < size:
        raise ValueError(f"RANK={rank} is not in [0, WORLD_SIZE={size})")
    return rank, size, local_rank, local_size


def join_world(device: torch.device = torch.device("cpu")) -> World:
    """Join torchrun's process group (gloo on the CPU, nccl for a CUDA ``device``); :data:`SINGLE` without torchrun.

    Joining twice in one process returns the same world.
    """
    launched = launched_world()
    if launched is None:
        return SINGLE
    rank, size, local_rank, local_size = launched
    import torch.distributed as dist

    if not dist.is_available():
        raise ValueError("this torch build has no torch.distributed: run one process, without torchrun")
    backend = "nccl" if device.type == "cuda" else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend)
    return World(rank, size, local_rank, local_size, backend)


def training_processes(requested: int) -> int:
    """How many training processes ``spacy-elmo train --processes N`` starts on this machine: N, or 1 under torchrun.

    (Under torchrun the processes are torchrun's.) More than one needs torch.distributed with gloo.
    """
    if launched_world() is not None:
        return 1
    if requested < 1:
        raise ValueError(f"--processes must be at least 1, not {requested}")
    if requested > 1 and not _gloo_available():
        raise ValueError("--processes > 1 needs torch.distributed with the gloo backend, which this torch lacks")
    return requested


def _gloo_available() -> bool:
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_gloo_available())


def run_processes(count: int, target: Callable[..., None], *args: Any) -> int:
    """Run ``target(world, *args)`` in ``count`` new processes that form one gloo group on this machine.

    ``target`` must be a module-level function (the processes are spawned, not forked: no
    OpenMP or torch state is copied). Returns 0, or the exit status of the first process that
    failed (the others are stopped then). A ``SystemExit`` in ``target`` ends its process with that
    status; any other exception is printed by the process and gives status 1.
    """
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="spacy-elmo-group-") as folder:
        rendezvous = (Path(folder) / "rendezvous").as_uri()  # a FileStore: no port to choose or collide on
        try:
            mp.spawn(_spawned, args=(count, rendezvous, target, args), nprocs=count, join=True)
        except mp.ProcessExitedException as err:
            return int(err.exit_code) or 1
        except mp.ProcessRaisedException as err:
            print(err, file=sys.stderr)
            return 1
    return 0


def _spawned(index: int, count: int, rendezvous: str, target: Callable[..., None], args: tuple[Any, ...]) -> None:
    """One spawned training process: join the group as rank ``index``, run ``target``, leave."""
    import torch.distributed as dist

    try:
        dist.init_process_group("gloo", init_method=rendezvous, rank=index, world_size=count)
    except RuntimeError as err:
        print(f"error: the training processes could not form a gloo group ({err}); run --processes 1", file=sys.stderr)
        raise SystemExit(2) from err
    world = World(index, count, index, count, "gloo")
    try:
        target(world, *args)
    finally:
        leave_world(world)


def _wait_until_released(tensor: torch.Tensor, timeout_s: float = _RELEASE_TIMEOUT_S) -> None:
    """Sleep (the GIL free) until nothing but its Python object holds ``tensor``, for at most ``timeout_s``."""
    use_count = getattr(tensor, "_use_count", None)  # C++ references to the tensor, its Python object's included
    if use_count is None:  # pragma: no cover - a torch without Tensor._use_count: nothing to watch
        return
    deadline = time.monotonic() + timeout_s
    while use_count() > 1 and time.monotonic() < deadline:
        time.sleep(_RELEASE_POLL_S)


def leave_world(world: World) -> None:
    """Leave the process group (nothing with one process); :meth:`Trainer.run` has waited for every rank already."""
    if world.size > 1 and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


__all__ = [
    "SINGLE",
    "World",
    "join_world",
    "launched_world",
    "leave_world",
    "run_processes",
    "training_processes",
    "weights_digest",
]
