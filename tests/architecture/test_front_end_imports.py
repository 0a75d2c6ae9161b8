"""The front ends stand side by side on runtime/: none imports another, lazily included.

The front ends are spacy/, compat/, sklearn, dask, hub and similarity (ARCHITECTURE.md's floor above output/); cli
sits above them all. What two front ends share lives below them (runtime/, sources/, output/), so a change to one
front end never reaches into another, and a walk of one never climbs back up through a sibling.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "spacy_elmo"
# a group of the package: a folder under spacy_elmo/ or a module directly in it
FRONT_ENDS = ("spacy", "compat", "sklearn", "dask", "hub", "similarity")


def group_of(module: str) -> str:
    """``spacy_elmo.<group>[.rest]`` -> ``<group>``; ``spacy_elmo`` itself -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """``(line, module)`` of every spacy_elmo import in ``path`` (or in ``source`` as if it were ``path``'s), those
    inside functions included."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    text = path.read_text(encoding="utf-8") if source is None else source
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join([*base, node.module] if node.module else base)
            found.append((node.lineno, target))
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]  # from . import sklearn
    return [(line, module) for line, module in found if module.split(".")[0] == "spacy_elmo"]


def crossings(paths: list[Path]) -> list[str]:
    wrong = []
    for path in paths:
        own = group_of(module_name(path))
        if own not in FRONT_ENDS:
            continue
        for line, imported in imports(path):
            other = group_of(imported)
            if other in FRONT_ENDS and other != own:
                wrong.append(f"{path.relative_to(PACKAGE)}:{line} imports {imported}")
    return sorted(set(wrong))


def test_the_check_sees_front_ends_and_their_imports():
    """Guards the rule below against passing because it reads nothing."""
    sklearn = PACKAGE / "sklearn.py"
    assert any(module.startswith("spacy_elmo.runtime") for _, module in imports(sklearn))
    assert {group_of(module_name(path)) for path in PACKAGE.rglob("*.py")} >= set(FRONT_ENDS)


def test_the_check_reads_relative_and_lazy_imports():
    source = "from .sklearn import ElmoVectorizer\n\ndef f():\n    from .spacy.extensions import fresh_layers\n"
    assert [module for _, module in imports(PACKAGE / "dask.py", source)] == [
        "spacy_elmo.sklearn",
        "spacy_elmo.sklearn.ElmoVectorizer",
        "spacy_elmo.spacy.extensions",
        "spacy_elmo.spacy.extensions.fresh_layers",
    ]


def test_no_front_end_imports_another():
    """spacy/, compat/, sklearn, dask, hub and similarity each import only spacy_elmo's lower groups (and their own
    modules): what two of them share moves down to runtime/ (or sources/, output/)."""
    wrong = crossings(sorted(PACKAGE.rglob("*.py")))
    assert not wrong, "a front end imports another: " + "; ".join(wrong)
