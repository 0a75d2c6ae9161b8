"""``spacy-elmo train``'s runner: one training run in this process (alone, or as one of torchrun's processes), or in
the N processes that ``--processes N`` starts on this machine, each with its share of the cores.

The command line parses its options into a :class:`TrainRun` and hands it to :func:`run_training`. An error the
user can fix goes through the command's ``errors`` (its one-line message and exit status 2), said by rank 0 alone
when the run's own processes share the work: they read the same files, so each would say the same.
"""

from __future__ import annotations

import dataclasses
import json
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Callable

import typer

from ...bilm.threads import set_process_threads
from ...groundwork.machine import usable_cores
from ..allocator import keep_freed_memory
from ..config import TrainConfig
from ..distributed import World, join_world, leave_world, run_processes, training_processes
from .trainer import Trainer

# errors(quiet): a block whose error the user can fix becomes its one-line message (none when quiet) and typer.Exit(2)
Errors = Callable[[bool], AbstractContextManager[None]]

__all__ = ["Errors", "TrainRun", "run_training"]


@dataclasses.dataclass(frozen=True)
class TrainRun:
    """One ``spacy-elmo train`` run, for this process or for each process it starts: what it trains and where, and
    the command's way of saying an error (a module-level function: the processes it starts receive it pickled)."""

    config: TrainConfig
    output_dir: Path
    errors: Errors
    resume: bool = False
    overwrite: bool = False
    progress: bool = True
    # the processes --processes starts read the same files on one machine: rank 0 says each error for all of them
    errors_from_rank_0_only: bool = False

    def __call__(self, world: World) -> None:
        """Train in this process as ``world``'s rank: the trainer, the process's torch threads, the run, its line."""
        memory = keep_freed_memory()  # this command's own process: reuse each step's large blocks (no page faults)
        with self.errors(self.errors_from_rank_0_only and not world.is_main):
            trainer = Trainer(
                self.config,
                self.output_dir,
                resume=self.resume,
                progress=self.progress,
                world=world,
                overwrite=self.overwrite,
            )
            if world.is_main:
                typer.echo(trainer.precision_note)
                typer.echo(f"memory: {memory}")
            # --threads, else (several processes) the cores shared out, else the resumed run's, else torch's choice
            several = max(1, usable_cores() // world.local_size) if world.size > 1 else None
            threads = self.config.threads or several or trainer.config.threads
            set_process_threads(threads)  # the command's own process (the library never sets the count)
            if world.size > 1 and world.is_main:
                typer.echo(f"{world.describe()}; {threads} torch thread{'' if threads == 1 else 's'} per process")
            metrics = trainer.run()
        if world.is_main:
            best = metrics.get("best") or {}
            typer.echo(
                f"saved to {self.output_dir}; best: "
                + json.dumps({k: v for k, v in best.items() if "ppl" in k or k == "step"})
            )


def run_training(run: TrainRun, processes: int = 1, device: str = "cpu") -> int:
    """Run ``run`` in this process (alone, or as the rank torchrun started it as), or in ``processes`` new processes
    that form one group on this machine (gloo on the CPU, nccl between GPUs: ``device``); returns the exit status,
    0 or the first failed process's (an exception a process raised: a ``TrainingProcessError`` naming it)."""
    with run.errors(False):  # (the command line has checked the architecture, before torch was imported)
        count = training_processes(processes, device)
    if count > 1:
        typer.echo(f"training processes: {count}")
        return run_processes(count, _spawned_run, dataclasses.replace(run, errors_from_rank_0_only=True), device=device)
    with run.errors(False):
        world = join_world(device)  # under torchrun: nccl between GPUs, gloo between CPUs
    try:
        run(world)
    finally:
        leave_world(world)
    return 0


def _spawned_run(world: World, run: TrainRun) -> None:
    """A process started by ``train --processes N``: the run, its ``typer.Exit`` status as the process's."""
    try:
        run(world)
    except typer.Exit as stop:
        raise SystemExit(stop.exit_code) from None
