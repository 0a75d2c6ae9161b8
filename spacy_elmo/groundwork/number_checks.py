"""Whether a value is a number a user may give: the one test of an integer and of a finite number, below every group.

``runtime/configuration/validation.py`` builds its checks of the front ends' settings on them (:func:`whole_number` in
``integer_in``, :func:`finite_number` in ``finite_in``), and ``spacy-elmo train``'s config check on them too: a
boolean is no number, numpy's numbers are, NaN, infinities and integers beyond int64 (or too large for a float) are
none. No message here: each check says its setting in its own words.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Optional

__all__ = ["MAX_COUNT", "MIN_INT", "finite_number", "whole_number"]

MAX_COUNT = 2**63 - 1  # the largest int64, numpy's and torch's: a count or a seed beyond it is none
MIN_INT = -(2**63)


def whole_number(value: Any, low: int = MIN_INT, high: int = MAX_COUNT) -> Optional[int]:
    """``value`` as an ``int`` when it is an integer (Python's or numpy's, not a boolean) in ``[low, high]``; else
    None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):  # (numpy's bool_ is no Integral)
        return None
    number = int(value)
    return number if low <= number <= high else None


def finite_number(value: Any) -> Optional[float]:
    """``value`` as a finite ``float`` when it is a real number (Python's or numpy's, not a boolean); else None (an
    integer too large for a float included: ``float(10**400)`` is an OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # (nor a Real)
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None
