"""The floor pass's versions, read from pyproject.toml: what the package declares is what .ci/run installs.

``python .ci/floors.py`` prints pip constraints, ``name==floor`` one a line: every requirement of
``[project] dependencies`` and of the ``plot``, ``dask`` and ``test`` extras at its lower bound (``>=``), so the
floor pass runs on the oldest versions the package says it takes and no list can drift from pyproject.toml.
``python .ci/floors.py --python`` prints the oldest Python (``requires-python``'s bound). The tools the floor pass
does not run (:data:`TOOLS`: lint, types, the docs, the wheel build) are left to pip; the main pass runs them.
Needs Python 3.11+ (tomllib) and ``packaging``: .ci/run runs it with the main pass's venv.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
EXTRAS = ("plot", "dask", "test")  # every extra but docs (mkdocs, a tool)
TOOLS = frozenset({"mypy", "ruff", "mkdocs", "build", "setuptools", "types-requests"})


def project() -> dict:
    return tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]


def requirements() -> list[Requirement]:
    """The requirements the floor pass pins: the dependencies and the extras' (one of each name), less the tools."""
    meta = project()
    found: dict[str, Requirement] = {}
    for text in [*meta["dependencies"], *(r for extra in EXTRAS for r in meta["optional-dependencies"][extra])]:
        requirement = Requirement(text)
        if requirement.name not in TOOLS:
            found.setdefault(requirement.name, requirement)
    return list(found.values())


def floor(requirement: Requirement) -> str | None:
    """The lower bound of ``requirement`` (its ``>=`` version), None where it has none."""
    bounds = [spec.version for spec in requirement.specifier if spec.operator == ">="]
    return bounds[0] if len(bounds) == 1 else None


def constraints() -> list[str]:
    """``name==floor`` for each pinned requirement; a requirement without a lower bound is an error (exit 2)."""
    lines, unbounded = [], []
    for requirement in requirements():
        version = floor(requirement)
        if version is None:
            unbounded.append(str(requirement))
        lines.append(f"{requirement.name}=={version}")
    if unbounded:
        sys.exit(f"error: pyproject.toml declares no lower bound (>=) for {', '.join(unbounded)}: add one")
    return lines


def python() -> str:
    """requires-python's lower bound, ``"3.9"``."""
    spec = project()["requires-python"]
    if not spec.startswith(">="):
        sys.exit(f"error: requires-python = {spec!r}: expected '>=3.N'")
    return spec[2:].strip()


if __name__ == "__main__":
    print(python() if sys.argv[1:] == ["--python"] else "\n".join(constraints()))
