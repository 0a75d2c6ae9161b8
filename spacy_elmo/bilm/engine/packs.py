"""The packs an engine holds: one per weight, remade whenever the weight changes.

A pack is keyed by its owner module and parameter name, and is valid for one version of that parameter
(the same tensor object, its ``(data_ptr, _version)``: an optimizer step, an in-place edit under
``torch.no_grad()`` or a reload makes a new one). The engine lives on the module it serves, so its packs
are freed with the model. Looked up once per layer and call, not per step; the lock is taken only to make
a pack (two direction threads asking for the same one make it once).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable, Generic, Optional, TypeVar

import torch
from torch import nn

from ..threads import ForkSafeLock

P = TypeVar("P")
_lock = ForkSafeLock()  # held only while a pack is made


@dataclass
class _Entry(Generic[P]):
    param: weakref.ref[torch.Tensor]
    version: tuple[int, int]
    pack: Optional[P]


class WeightPacks(Generic[P]):
    """``make(out_in)`` of each weight, once per version of the weight; ``make`` may return None (no pack)."""

    def __init__(self, make: Callable[[torch.Tensor], Optional[P]]) -> None:
        self._make = make
        self._entries: dict[tuple[int, str], _Entry[P]] = {}

    def get(self, owner: nn.Module, name: str, out_in: torch.Tensor) -> Optional[P]:
        """The pack of parameter ``owner.<name>`` (``out_in``: its ``(out, in)`` view), made now if missing or stale."""
        param = getattr(owner, name)
        key = (id(owner), name)
        version = (param.data_ptr(), param._version)
        entry = self._entries.get(key)
        if entry is not None and entry.param() is param and entry.version == version:
            return entry.pack
        with _lock:
            entry = self._entries.get(key)
            if entry is None or entry.param() is not param or entry.version != version:
                entry = _Entry(weakref.ref(param), version, self._make(out_in.detach()))
                self._entries[key] = entry
            return entry.pack

    def __len__(self) -> int:
        return len(self._entries)
