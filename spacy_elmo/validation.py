"""Checks of user-given settings shared by the front ends and the backend (one copy of each)."""

from __future__ import annotations

import numbers
from typing import Any


def positive_int(value: Any, name: str) -> int:
    """``value`` as an ``int`` when it is an integer >= 1 (numpy integers too, booleans not); else ``ValueError``
    naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}={value!r}: expected a positive integer")
    return int(value)
