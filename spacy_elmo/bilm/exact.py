"""Full float32 arithmetic whatever the process asked for: no TF32 or bf16 inside the package's own products.

A process may let torch run float32 products in reduced precision. On a GPU, TF32 (10-bit mantissas): cuDNN
convolutions by default, and every matmul once anything calls ``torch.set_float32_matmul_precision("high")``.
On a CPU, oneDNN's bf16 or TF32 arithmetic for float32 products and convolutions
(``torch.backends.mkldnn.matmul.fp32_precision``; ``set_float32_matmul_precision("medium")`` asks for bf16),
where the CPU has those instructions (AMX, AVX-512 BF16); even where it does not, the request routes float32
matmuls from MKL to oneDNN, which changes their rounding. The biLM's float32 vectors must not change with any
of it, so each of the package's computations runs inside :func:`exact_float32`, which sets full float32 for
the device's backends and puts the process's own settings back when the last such computation in any thread
ends (a count across threads). This module is the one place the package touches these settings
(``tests/architecture/``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, Optional, Union

import torch

from ..groundwork.probe import has_feature
from .threads import ForkSafeLock, renew_after_fork

_LOCK = ForkSafeLock()


def per_backend_settings(backends: Any) -> tuple[bool, bool]:
    """Whether ``backends`` (``torch.backends``) has torch 2.9's per-backend ``fp32_precision`` settings: for CUDA
    (cuBLAS matmul and cuDNN conv), for the CPU (oneDNN matmul and conv). Older torch has the global flags only,
    and its ``torch.backends.cuda.matmul`` raises AssertionError for an attribute it lacks (torch 2.1 to 2.8)."""
    cuda = has_feature(backends, "cuda.matmul.fp32_precision") and has_feature(backends, "cudnn.conv.fp32_precision")
    cpu = has_feature(backends, "mkldnn.matmul.fp32_precision") and has_feature(backends, "mkldnn.conv.fp32_precision")
    return cuda, cpu


_PER_BACKEND, _MKLDNN_PER_BACKEND = per_backend_settings(torch.backends)
Settings = tuple[Any, ...]


def _read_cuda() -> Settings:
    if _PER_BACKEND:
        conv = torch.backends.cudnn.conv  # type: ignore[attr-defined]  # torch 2.9+, untyped
        return torch.backends.cuda.matmul.fp32_precision, conv.fp32_precision
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


def _put_cuda(settings: Settings) -> None:
    if _PER_BACKEND:
        torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = settings  # type: ignore[attr-defined]
    else:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = settings


def _read_cpu() -> Settings:
    if _MKLDNN_PER_BACKEND:
        mkldnn = torch.backends.mkldnn  # torch 2.9+: untyped
        return mkldnn.matmul.fp32_precision, mkldnn.conv.fp32_precision  # type: ignore[attr-defined]
    return (torch.get_float32_matmul_precision(),)  # older torch: the one setting oneDNN's bf16 mode follows


def _put_cpu(settings: Settings) -> None:
    if _MKLDNN_PER_BACKEND:
        torch.backends.mkldnn.matmul.fp32_precision, torch.backends.mkldnn.conv.fp32_precision = settings  # type: ignore[attr-defined]
    else:
        torch.set_float32_matmul_precision(settings[0])


class _Switch:
    """One device kind's float32 settings, set to full float32 while any caller is inside (a count across threads).

    torch 2.9+ has per-backend ``fp32_precision`` settings ("ieee" / "tf32" / "bf16" / "none"); reading the
    older flags after a process set the newer ones raises, so the newer ones are used where they exist.
    """

    def __init__(self, read: Callable[[], Settings], put: Callable[[Settings], None], exact: Settings) -> None:
        self.read, self.put, self.exact = read, put, exact
        self.users = 0
        self.saved: Optional[Settings] = None  # the settings as the process had them
        renew_after_fork(self)

    def _read(self) -> Settings:
        return self.read()

    def _put(self, settings: Settings) -> None:
        self.put(settings)

    def _after_fork(self) -> None:
        """A forked child has none of the parent's callers: its settings go back to the process's own."""
        if self.saved is not None:
            self.put(self.saved)
        self.users, self.saved = 0, None

    def enter(self) -> None:
        with _LOCK:
            if self.users == 0:
                self.saved = self.read()
                self.put(self.exact)
            self.users += 1

    def leave(self) -> None:
        with _LOCK:
            self.users -= 1
            if self.users == 0 and self.saved is not None:
                self.put(self.saved)
                self.saved = None


_SWITCH = _Switch(_read_cuda, _put_cuda, ("ieee", "ieee") if _PER_BACKEND else (False, False))  # CUDA: no TF32
_CPU_SWITCH = _Switch(_read_cpu, _put_cpu, ("ieee", "ieee") if _MKLDNN_PER_BACKEND else ("highest",))  # oneDNN


@contextmanager
def exact_float32(device: Union[str, torch.device, None]) -> Iterator[None]:
    """Run the block with full float32 products on ``device`` (CUDA: no TF32; CPU: no oneDNN bf16 / TF32).

    ``None`` (no tensor yet) changes nothing. Thread-safe and re-entrant: the process's settings come back when
    the last caller inside leaves.
    """
    if device is None:
        yield
        return
    kind = torch.device(device).type
    switch = _SWITCH if kind == "cuda" else _CPU_SWITCH if kind == "cpu" else None
    if switch is None:
        yield
        return
    switch.enter()
    try:
        yield
    finally:
        switch.leave()
