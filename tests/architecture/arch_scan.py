"""What the architecture rules read: the package's modules, their imports, the names they use.

Shared by the rule tests of this folder (one file per family of rules); each rule test first proves on a broken
input (or a known hit) that it sees what it looks for, so none can pass because it sees nothing.
"""

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "spacy_elmo"


def module_files() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, not ``.__init__``)."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


MODULES = module_files()


def import_nodes(tree: ast.AST, *, in_functions: bool) -> Iterator[ast.stmt]:
    """The import statements of a module: those run at import time (``if TYPE_CHECKING`` blocks included),
    and with ``in_functions`` also the ones inside functions."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and not in_functions:
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        yield from import_nodes(child, in_functions=in_functions)


def imported_names(name: str, *, in_functions: bool = False) -> set[str]:
    """Absolute names of everything module ``name`` imports (other packages too)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in import_nodes(ast.parse(path.read_text(encoding="utf-8")), in_functions=in_functions):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
            continue
        if node.level:
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        submodules = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in MODULES]
        found.update(submodules)
        if len(submodules) < len(node.names):  # a name defined in ``target`` itself
            found.add(target)
    return found


def packages_run_by(importer: str, imported: str) -> set[str]:
    """The packages whose ``__init__`` importing ``imported`` runs first, if they have not run yet: its enclosing
    packages, less those that enclose ``importer`` too (they are already running when ``importer`` imports)."""
    parts = imported.split(".")
    ancestors = {".".join(parts[:n]) for n in range(1, len(parts))}
    importer_parts = importer.split(".")
    own = {".".join(importer_parts[:n]) for n in range(1, len(importer_parts) + 1)}
    return {a for a in ancestors if a in MODULES and a not in own}


def internal_graph(*, in_functions: bool = False) -> dict[str, set[str]]:
    """Module -> the package modules importing it runs: what it imports and the packages enclosing those (importing
    ``a.b.c`` runs ``a/b/__init__.py`` first, and with it everything that imports)."""
    graph = {}
    for name in MODULES:
        direct = {d for d in imported_names(name, in_functions=in_functions) if d in MODULES and d != name}
        graph[name] = direct.union(*(packages_run_by(name, d) for d in direct)) - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle as ``[a, b, ..., a]``, or ``[]`` when there is none (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return []


def used_names(path: Path) -> set[str]:
    """Every name, attribute and string constant in a module (``getattr(lib, "name")`` counts as using ``name``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
    return names


def import_aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> dotted module name, from every import of a module (``import numpy as np``: np -> numpy)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]  # ``import os.path`` binds os
                names[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def dotted_name(node: ast.AST, aliases: dict[str, str]) -> str:
    """``np.random.seed`` -> ``numpy.random.seed`` (the root resolved through the imports); "" for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Subscript):  # os.environ["X"]
        return dotted_name(node.value, aliases)
    if not isinstance(node, ast.Name):
        return ""
    return ".".join([aliases.get(node.id, node.id), *reversed(parts)])
