"""Training on several processes: torchrun's environment, the process group, and what ranks agree on.

``torchrun --nproc_per_node N -m spacy_elmo train ...`` starts N processes with ``WORLD_SIZE``,
``RANK`` and ``LOCAL_RANK`` set; :func:`join_world` then joins the process group (gloo for a model
on the CPU, nccl for one on a GPU: each rank on ``cuda:LOCAL_RANK``). Without those variables (or
with ``WORLD_SIZE=1``) it returns a world of one process, whose collectives are no-ops, so a
single-process run does exactly what it did before. ``spacy-elmo train --processes N`` starts N
processes itself (:func:`run_processes`: ``torch.multiprocessing``, a group on this machine, gloo or
nccl as under torchrun), for the same training as torchrun's. :func:`training_device` is the one
reading of ``--device`` (``cpu``, ``cuda``, ``cuda:N``, ``auto``) for train, adapt and evaluate.

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
from typing import Any, Callable, Optional, TypeVar, Union

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
    device: torch.device = torch.device("cpu")  # where this rank trains (nccl: cuda:local_rank)

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
        return [float(v) for v in self.total(tensor).tolist()]

    def total(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` summed over all ranks, in float64 on this rank's device (one process: ``tensor`` in float64).

        Nothing waits for the device here: a training step sums its losses where they were computed and reads the
        sums once (:meth:`~.trainer.Trainer.train_step`).
        """
        if self.size == 1:
            return tensor.detach().to(torch.float64)
        tensor = tensor.detach().to(self._device(), torch.float64, copy=True)  # never the caller's own memory
        self._all_reduce(tensor)
        return tensor

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
            # nccl: on this rank's GPU (else torch guesses one from the rank)
            ids = [self.device.index] if self.backend == "nccl" and self.device.index is not None else None
            torch.distributed.barrier(device_ids=ids)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` as DistributedDataParallel (its weights broadcast from rank 0), or itself with one process.

        ``find_unused_parameters``: the adaptive softmax's tail clusters get no gradient in a
        step whose targets on this rank are all in the head (and a parameter no rank used keeps
        no gradient, as in a single process; torch warns once per process when a step used them all).
        """
        if self.size == 1:
            return model
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [self.device.index] if self.device.type == "cuda" else None  # the model is there already
        return DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=True)

    def describe(self) -> str:
        """One line for the start of a run, e.g. ``world size 2 (gloo): rank 0 of 2 writes the files``."""
        return f"world size {self.size} ({self.backend}): rank {self.rank} of {self.size} writes the files"

    def _device(self) -> torch.device:
        """Where collectives' tensors live: this rank's GPU with nccl, else the CPU."""
        return self.device if self.backend == "nccl" else torch.device("cpu")

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


DEVICES = "cpu, cuda, cuda:N or auto (CUDA when available)"


def training_device(
    requested: Union[str, torch.device, None] = "cpu", local_rank: int = 0, local_size: int = 1
) -> torch.device:
    """The device ``--device`` names for a training (or evaluation) process, checked: a ValueError naming the fix.

    ``None``/``"cpu"``: the CPU; ``"auto"``: CUDA when torch sees a GPU, else the CPU; ``"cuda"``: the current
    GPU, or ``cuda:local_rank`` when ``local_size`` processes share this machine (torchrun, ``--processes``), each
    then on its own GPU; ``"cuda:N"``: that GPU (one process only). A GPU that is not there is an error, never a
    silent fall back to the CPU.
    """
    text = "cpu" if requested is None else str(requested)
    if text == "auto":
        text = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(text)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"--device must be {DEVICES}, not {text!r}") from err
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type != "cuda":
        raise ValueError(f"--device must be {DEVICES}, not {text!r} (training runs on a CPU or a CUDA GPU)")
    if not torch.cuda.is_available():
        raise ValueError(
            f"--device {text}: torch sees no CUDA GPU here (torch {torch.__version__}, built for CUDA "
            f"{torch.version.cuda or 'none'}): use --device cpu, or install a CUDA build of torch"
        )
    count = torch.cuda.device_count()
    if local_size > 1:
        if device.index is not None:
            raise ValueError(
                f"--device {text} names one GPU, but {local_size} training processes share this machine: give "
                f"--device cuda, and each process trains on its own (cuda:0 .. cuda:{local_size - 1})"
            )
        if local_size > count:
            raise ValueError(
                f"{local_size} training processes on this machine need a GPU each, and torch sees {count}: start "
                f"at most {count}"
            )
        return torch.device("cuda", local_rank)
    index = torch.cuda.current_device() if device.index is None else device.index
    if index >= count:
        raise ValueError(f"--device {text}: torch sees {count} CUDA GPU(s), cuda:0 .. cuda:{count - 1}")
    return torch.device("cuda", index)


def _backend(device: torch.device) -> str:
    """The process group's backend for ranks on ``device``: nccl between GPUs, gloo between CPUs."""
    return "nccl" if device.type == "cuda" else "gloo"


def join_world(device: Union[str, torch.device, None] = "cpu") -> World:
    """Join torchrun's process group on ``device`` (:func:`training_device`: gloo on the CPU, nccl between GPUs, each
    rank on ``cuda:LOCAL_RANK``); without torchrun, a world of one process on that device.

    Joining twice in one process returns the same world.
    """
    launched = launched_world()
    if launched is None:
        return World(device=training_device(device))
    rank, size, local_rank, local_size = launched
    import torch.distributed as dist

    if not dist.is_available():
        raise ValueError("this torch build has no torch.distributed: run one process, without torchrun")
    where = training_device(device, local_rank, local_size)
    backend = _backend(where)
    if backend == "nccl" and not dist.is_nccl_available():
        raise ValueError("this torch build has no nccl backend for training on several GPUs: run one process")
    if not dist.is_initialized():
        dist.init_process_group(backend, **_bound_to(where))
    return World(rank, size, local_rank, local_size, backend, where)


def _bound_to(device: torch.device) -> dict[str, Any]:
    """``init_process_group``'s ``device_id`` for a GPU rank (torch >= 2.3): nccl then talks on that GPU only."""
    import inspect

    import torch.distributed as dist

    if device.type != "cuda" or "device_id" not in inspect.signature(dist.init_process_group).parameters:
        return {}
    return {"device_id": device}


def training_processes(requested: int, device: Union[str, torch.device, None] = "cpu") -> int:
    """How many training processes ``spacy-elmo train --processes N`` starts on this machine: N, or 1 under torchrun.

    (Under torchrun the processes are torchrun's.) More than one needs torch.distributed with gloo (CPU) or nccl
    (``device`` a GPU: one GPU per process, :func:`training_device` checks there are enough).
    """
    if launched_world() is not None:
        return 1
    if requested < 1:
        raise ValueError(f"--processes must be at least 1, not {requested}")
    if requested > 1:
        backend = _backend(training_device(device, 0, requested))
        if not _backend_available(backend):
            raise ValueError(
                f"--processes > 1 needs torch.distributed with the {backend} backend, which this torch lacks"
            )
    return requested


def _backend_available(backend: str) -> bool:
    import torch.distributed as dist

    if not dist.is_available():
        return False
    return bool(dist.is_nccl_available() if backend == "nccl" else dist.is_gloo_available())


def run_processes(
    count: int, target: Callable[..., None], *args: Any, device: Union[str, torch.device, None] = "cpu"
) -> int:
    """Run ``target(world, *args)`` in ``count`` new processes that form one group on this machine: gloo on the
    CPU, nccl when ``device`` is a GPU (process k on ``cuda:k``; checked first by :func:`training_processes`).

    ``target`` must be a module-level function (the processes are spawned, not forked: no
    OpenMP or torch state is copied). Returns 0, or the exit status of the first process that
    failed (the others are stopped then). A ``SystemExit`` in ``target`` ends its process with that
    status; any other exception is raised here as a :class:`TrainingProcessError` naming it.
    """
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="spacy-elmo-group-") as folder:
        rendezvous = (Path(folder) / "rendezvous").as_uri()  # a FileStore: no port to choose or collide on
        try:
            mp.spawn(_spawned, args=(count, rendezvous, target, args, device), nprocs=count, join=True)
        except mp.ProcessExitedException as err:
            return int(err.exit_code) or 1
        except mp.ProcessRaisedException as err:
            raise TrainingProcessError(err.error_index, str(err)) from err
    return 0


class TrainingProcessError(RuntimeError):
    """A process :func:`run_processes` started raised an exception: said as its exception's own line (the last of
    the process's report), the whole report, its traceback, kept in the chain (``__cause__``)."""

    def __init__(self, index: int, report: str) -> None:
        lines = [line.strip() for line in report.splitlines() if line.strip()]
        super().__init__(f"training process {index} failed: {lines[-1] if lines else 'no report'}")
        self.index = index


def _spawned(
    index: int,
    count: int,
    rendezvous: str,
    target: Callable[..., None],
    args: tuple[Any, ...],
    device: Union[str, torch.device, None] = "cpu",
) -> None:
    """One spawned training process: join the group as rank ``index`` (on ``cuda:index`` for a GPU run), run
    ``target``, leave."""
    import torch.distributed as dist

    where = training_device(device, index, count)
    backend = _backend(where)
    try:
        dist.init_process_group(backend, init_method=rendezvous, rank=index, world_size=count, **_bound_to(where))
    except RuntimeError as err:
        if index == 0:  # rank 0 says it for all: another rank also fails here when rank 0 stopped early (its error)
            print(
                f"error: the training processes could not form a {backend} group ({err}); run --processes 1",
                file=sys.stderr,
            )
        raise SystemExit(2) from err
    world = World(index, count, index, count, backend, where)
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
    "TrainingProcessError",
    "World",
    "join_world",
    "launched_world",
    "leave_world",
    "run_processes",
    "training_device",
    "training_processes",
    "weights_digest",
]
