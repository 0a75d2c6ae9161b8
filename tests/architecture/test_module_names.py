"""Modules are named for what they hold: no bare generic name."""

from tests.architecture.arch_scan import MODULES

# names that say what kind of thing a module holds, not which: three modules called "files" (a file's names, its
# atomic write, a model string's paths) or a "layers" that could mean the biLM's, the mix setting's or Thinc's
# send a reader to open each one to find out
VAGUE_NAMES = {
    "files",
    "layers",
    "utils",
    "util",
    "helpers",
    "misc",
    "common",
    "stuff",
    "tools",
    "base",
    "checks",
    "settings",
}
# a drop-in API keeps the module names of the library it stands in for (AllenNLP's allennlp.nn.util)
MIRRORED = {"spacy_elmo.compat.allennlp.util"}


def vague_modules(modules: set[str]) -> list[str]:
    """The dotted modules whose own name (the last part) is one of VAGUE_NAMES."""
    return sorted(name for name in modules if name.rsplit(".", 1)[-1] in VAGUE_NAMES)


def test_the_name_check_sees_vague_names_only():
    """Guards the check below: a bare vague name is found, a name that says which thing is not."""
    names = {"pkg.bilm.files", "pkg.spacy.layers", "pkg.bilm.file_names", "pkg.runtime.stored_layers", "pkg.utils"}
    assert vague_modules(names) == ["pkg.bilm.files", "pkg.spacy.layers", "pkg.utils"]


def test_every_module_is_named_for_what_it_holds():
    """No module of the package has a bare generic name (ARCHITECTURE.md, "Modules named for what they hold")."""
    vague = vague_modules(set(MODULES) - MIRRORED)
    assert not vague, f"name these modules for what they hold: {vague}"
