"""What the backend asks of the code that computes a batch: the runner (torch-free; the torch runner is
:mod:`.torch_runner`).

:class:`~.backend.ElmoBackend` keeps everything around the computation (checks, the memory and disk caches, repeated
sentences computed once, length batches, the retry in halves when memory runs out, delivery, the shared process
cache) and hands each batch of unique, non-empty, uncached sentences to a :class:`Runner`; :func:`.backend.open_runner`
is the one place that chooses which runner a model gets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional, Protocol

import numpy as np

if TYPE_CHECKING:
    from ...bilm.engine.precisions import Precision


class TokenCache(Protocol):
    """A runner's cache of context-independent token vectors between batches (``max_tokens`` 0: off)."""

    max_tokens: int

    def clear(self) -> None: ...

    def __len__(self) -> int: ...


class Runner(Protocol):
    """Computes the layers of one batch of sentences for a backend, on one device in one precision.

    A runner holds no lock of its own for :meth:`layers`: the backend calls it under its lock, one batch at a time.
    """

    small_work_threads: Optional[int]  # threads for small batches (None: the runtime's own setting)

    @property
    def token_cache(self) -> TokenCache:
        """Its token vectors kept between batches: sized and cleared by the backend (configure_cache, clear_cache,
        after running out of memory)."""
        ...

    @property
    def n_layers(self) -> int:
        """Number of biLSTM layers; :meth:`layers` gives ``n_layers + 1`` (0 = the token layer)."""
        ...

    @property
    def dim(self) -> int:
        """Width of every output layer, ``2 * projection_dim``."""
        ...

    @property
    def device_name(self) -> str:
        """Its device as torch spells it: ``"cpu"``, ``"cuda:0"``."""
        ...

    @property
    def precision(self) -> Precision:
        """Its row of the precision table (bilm/engine/precisions.py)."""
        ...

    def layers(self, batch: list[Sequence[str]]) -> list[np.ndarray]:
        """The activations of each sentence of ``batch`` (non-empty sentences), in order: float32, C-contiguous,
        ``(n_layers + 1, len(tokens), dim)``, each the caller's own; never inf or nan (``FloatingPointError``)."""
        ...

    def after_fork(self) -> None:
        """In a forked child: forget what a parent thread may have left half done (its token cache)."""
        ...

    def is_out_of_memory(self, err: BaseException) -> bool:
        """Whether ``err``, raised by :meth:`layers`, is the device (or host) running out of memory: the backend then
        retries the batch in halves."""
        ...

    def free_memory(self) -> None:
        """Hand back the device memory its allocator caches (after running out), before a retry."""
        ...

    def describe(self) -> str:
        """One line for the load log (DEBUG): the kernels it computes with."""
        ...


def device_type(runner: Runner) -> str:
    """The type of a runner's device: ``"cuda"`` for ``"cuda:0"``."""
    return runner.device_name.partition(":")[0]
