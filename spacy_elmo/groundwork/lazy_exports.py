"""A package's public names imported on first use (PEP 562), for the ``__init__`` files that must stay cheap.

``spacy_elmo``, ``spacy_elmo.bilm``, ``spacy_elmo.bilm.engine`` and ``spacy_elmo.train`` name their public API in
a table (name -> the module that defines it) and take their module-level ``__getattr__`` and ``__dir__`` from
:func:`lazy_exports`, so that importing the package (and the command line, before it has checked its arguments,
and the precision table below the engines) imports no torch.
``spacy_elmo.dask`` takes ``local_cluster`` from ``output/cluster.py`` the same way (it needs ``distributed``).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Callable


def lazy_exports(
    package: str, homes: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``), whose ``namespace`` is its
    ``globals()``: each name of ``homes`` imported from its module (relative to ``package``, or absolute) on first
    use, then kept in the namespace; any other name an ``AttributeError``, as for an ordinary module."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *namespace.get("__all__", ())})

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
