"""Full float32 arithmetic on CUDA whatever the process asked for: TF32 off for the package's own products.

On a GPU, torch runs float32 matrix products and convolutions in TF32 (10-bit mantissas) where the process
allows it: cuDNN convolutions by default, and every matmul once anything calls
``torch.set_float32_matmul_precision("high")``. The biLM's float32 vectors must not change with that, so each
of the package's CUDA computations runs inside :func:`exact_float32`, which turns TF32 off for cuBLAS and cuDNN
and puts the process's own settings back when the last such computation in any thread ends. CPU work needs
nothing and takes no lock. This module is the one place the package touches these settings
(``tests/architecture/``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional, Union

import torch

from .threads import ForkSafeLock, renew_after_fork

_LOCK = ForkSafeLock()
_PER_BACKEND = hasattr(torch.backends.cuda.matmul, "fp32_precision") and hasattr(
    getattr(torch.backends.cudnn, "conv", None), "fp32_precision"
)


class _Tf32Switch:
    """The process's TF32 settings, turned off while any caller is inside (a count across threads).

    torch 2.9+ has per-backend ``fp32_precision`` settings ("ieee" / "tf32" / "none"); reading the older
    ``allow_tf32`` flags after a process set the newer ones raises, so the newer ones are used where they exist.
    """

    def __init__(self) -> None:
        self.users = 0
        self.saved: Optional[tuple[Any, Any]] = None  # (cuBLAS's, cuDNN convolutions') settings as the process had them
        renew_after_fork(self)

    def _after_fork(self) -> None:
        """A forked child has none of the parent's callers: its settings go back to the process's own."""
        if self.saved is not None:
            self._put(self.saved)
        self.users, self.saved = 0, None

    @staticmethod
    def _read() -> tuple[Any, Any]:
        if _PER_BACKEND:
            conv = torch.backends.cudnn.conv  # type: ignore[attr-defined]  # torch 2.9+, untyped
            return torch.backends.cuda.matmul.fp32_precision, conv.fp32_precision
        return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32

    @staticmethod
    def _put(settings: tuple[Any, Any]) -> None:
        if _PER_BACKEND:
            torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = settings  # type: ignore[attr-defined]
        else:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = settings

    def enter(self) -> None:
        with _LOCK:
            if self.users == 0:
                self.saved = self._read()
                self._put(("ieee", "ieee") if _PER_BACKEND else (False, False))
            self.users += 1

    def leave(self) -> None:
        with _LOCK:
            self.users -= 1
            if self.users == 0 and self.saved is not None:
                self._put(self.saved)
                self.saved = None


_SWITCH = _Tf32Switch()


@contextmanager
def exact_float32(device: Union[str, torch.device, None]) -> Iterator[None]:
    """Run the block with full float32 products on ``device`` if it is a CUDA device (no TF32); else as it is.

    Thread-safe and re-entrant: the process's settings come back when the last caller inside leaves.
    """
    if device is None or torch.device(device).type != "cuda":
        yield
        return
    _SWITCH.enter()
    try:
        yield
    finally:
        _SWITCH.leave()
