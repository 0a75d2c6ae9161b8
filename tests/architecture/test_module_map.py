"""ARCHITECTURE.md's module map names every module and only those."""

import re

from tests.architecture.arch_scan import (
    MODULES,
    PACKAGE,
)

# -- the module map of ARCHITECTURE.md ------------------------------------------------------------

ARCHITECTURE = PACKAGE.parent / "ARCHITECTURE.md"
TREE_ENTRIES = re.compile(r"(\w+(?:\.py|/)(?:, \w+(?:\.py|/))*)(?:\s|$)")  # "a.py, b.py  what they do"


def map_modules(markdown: str) -> set[str]:
    """The dotted modules that the tree under "## Module map" names (its first fenced block).

    A tree line is indented two spaces deeper than its folder and starts with one or more
    comma-separated entries, ``name.py`` or ``name/`` (a package, named by its folder), before the
    description; deeper indented lines that continue a description are not tree lines.
    """
    section = markdown.split("## Module map", 1)[1]
    block = section.split("```", 2)[1]
    folders: dict[int, str] = {}  # indent -> dotted name of the folder opened at that indent
    found = set()
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        entries = TREE_ENTRIES.match(line.strip())
        if entries is None:
            continue  # a description's continuation
        names = [name.strip() for name in entries[1].split(",")]
        parent = folders.get(indent - 2) if indent else ""
        if parent is None:
            continue
        for name in names:
            stem = name[:-1] if name.endswith("/") else name[: -len(".py")]
            dotted = f"{parent}.{stem}" if parent else stem
            if name.endswith("/"):
                folders[indent] = dotted
                found.add(dotted)
            else:
                found.add(parent if stem == "__init__" else dotted)
        folders = {k: v for k, v in folders.items() if k <= indent}  # deeper folders are closed
    return found


def test_the_map_reader_sees_missing_and_phantom_modules():
    """Guards the check below: a tree line per module is read as its dotted name, prose is not."""
    tree = (
        "## Module map\n\n```\npkg/\n  __init__.py       the API\n  a.py, b.py        two\n"
        "                    prose that ends in c.py\n"
        "    f.py is prose too: not two spaces deeper than a folder\n"
        "  sub/              a package\n    d.py          one\n"
        "  e.py              back at the top\n```\n"
    )
    assert map_modules(tree) == {"pkg", "pkg.a", "pkg.b", "pkg.sub", "pkg.sub.d", "pkg.e"}


def test_the_module_map_names_every_module_and_only_those():
    """ARCHITECTURE.md's map is the contributor's map: a module missing from it, or named in it but gone, fails."""
    mapped = map_modules(ARCHITECTURE.read_text(encoding="utf-8"))
    missing = sorted(set(MODULES) - mapped)
    phantom = sorted(mapped - set(MODULES))
    assert not missing, f"modules missing from ARCHITECTURE.md's module map: {missing}"
    assert not phantom, f"ARCHITECTURE.md's module map names modules that do not exist: {phantom}"


# -- modules named for what they hold ----------------------------------------------------------------

# names that say what kind of thing a module holds, not which: three modules called "files" (a file's names, its
# atomic write, a model string's paths) or a "layers" that could mean the biLM's, the mix setting's or Thinc's
# send a reader to open each one to find out
VAGUE_NAMES = {"files", "layers", "utils", "helpers", "misc", "common", "stuff", "tools"}


def vague_modules(modules: set[str]) -> list[str]:
    """The dotted modules whose own name (the last part) is one of VAGUE_NAMES."""
    return sorted(name for name in modules if name.rsplit(".", 1)[-1] in VAGUE_NAMES)


def test_the_name_check_sees_vague_names_only():
    """Guards the check below: a bare vague name is found, a name that says which thing is not."""
    names = {"pkg.bilm.files", "pkg.spacy.layers", "pkg.bilm.file_names", "pkg.runtime.stored_layers", "pkg.utils"}
    assert vague_modules(names) == ["pkg.bilm.files", "pkg.spacy.layers", "pkg.utils"]


def test_every_module_is_named_for_what_it_holds():
    """No module of the package has a bare generic name (ARCHITECTURE.md, "Modules named for what they hold")."""
    vague = vague_modules(set(MODULES))
    assert not vague, f"name these modules for what they hold: {vague}"
