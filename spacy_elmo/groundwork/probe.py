"""Whether the installed torch (or any library) has a feature: an attribute looked up without letting its absence raise.

torch grows attributes from one version to the next, and an older version answers for a missing one in its own
way: ``torch.backends.cuda.matmul.fp32_precision`` raises AssertionError before torch 2.9, a missing operator of
``torch.ops`` raises RuntimeError in some versions, a lazily imported module ImportError. ``hasattr`` and
``getattr(obj, name, default)`` catch only AttributeError, so a probe written with them passes on the newest torch
and crashes the import on an older one. Every feature probe of the package goes through :func:`feature` or
:func:`has_feature` (``tests/architecture/`` finds any other).
"""

from __future__ import annotations

from typing import Any

_MISSING = object()


def feature(owner: object, path: str, default: Any = None) -> Any:
    """``owner.<path>`` (a dotted path of attributes: ``"cuda.matmul.fp32_precision"``), or ``default`` where any step
    of it is missing, whatever exception that step's owner raises to say so."""
    value = owner
    for name in path.split("."):
        try:
            value = getattr(value, name)
        except Exception:  # AttributeError, or what an older version raises instead (see the module's docstring)
            return default
    return value


def has_feature(owner: object, path: str) -> bool:
    """Whether ``owner.<path>`` exists (:func:`feature` found every step of it)."""
    return feature(owner, path, _MISSING) is not _MISSING
