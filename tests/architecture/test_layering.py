"""The package's rooms and their doors: no import circle (lazy imports included), the groups depend one
way, groundwork/ stands below all, bilm/ knows no front end, train/ builds on bilm/ and a listed set (ARCHITECTURE.md,
"Module map")."""

import pytest

from tests.architecture.arch_scan import (
    MODULES,
    find_cycle,
    imported_names,
    internal_graph,
    packages_run_by,
)


def test_the_walk_finds_the_package_and_its_imports():
    """Guards the checks below against passing because they see nothing."""
    graph = internal_graph()
    assert {
        "spacy_elmo",
        "spacy_elmo.bilm.model",
        "spacy_elmo.bilm.inference",
        "spacy_elmo.runtime.embedding.backend",
    } <= set(graph)
    assert "spacy_elmo.bilm.inference" in graph["spacy_elmo.bilm.model"]
    assert "spacy_elmo.bilm.lstm" in graph["spacy_elmo.bilm.inference"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []
    # importing a module of a subpackage runs that subpackage's __init__ first (a lazy circle through it counts)
    assert packages_run_by("spacy_elmo.bilm.cpu_support", "spacy_elmo.bilm.engine.mkl") == {"spacy_elmo.bilm.engine"}
    assert packages_run_by("spacy_elmo.cli", "spacy_elmo.compat.allennlp.util") == {
        "spacy_elmo.compat",
        "spacy_elmo.compat.allennlp",
    }
    assert packages_run_by("spacy_elmo.bilm.engine.registry", "spacy_elmo.bilm.engine.contract") == set()


@pytest.mark.parametrize("in_functions", [False, True], ids=["module level", "also inside functions"])
def test_no_import_circle_inside_the_package(in_functions):
    """A circle means one of its modules is in the wrong room. Type-checking-only imports count too."""
    cycle = find_cycle(internal_graph(in_functions=in_functions))
    assert not cycle, "import circle: " + " -> ".join(cycle)


# the groups below the front ends, lowest first: each imports only groups before it (groundwork/ none of them)
GROUP_LAYERS = ("groundwork", "bilm", "onnx", "sources", "runtime", "output")


def group_of(name: str) -> str:
    """``spacy_elmo.<group>.x`` -> ``<group>``; a module directly in spacy_elmo/ -> its own name (a front end), but
    ``about`` (the version, importing nothing): the ground floor, which every group may read."""
    if name == "spacy_elmo.about":
        return "groundwork"
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "spacy_elmo"


def test_the_groups_depend_one_way():
    """ARCHITECTURE.md's order: groundwork/ <- bilm/ <- onnx/ <- sources/ <- runtime/ <- output/ <- the front ends
    (spacy/, compat/, sklearn, dask, hub, similarity) <- cli. A group imports only the groups before it (lazy imports
    included)."""
    wrong = []
    graph = internal_graph(in_functions=True)
    assert "spacy_elmo.bilm.weights" in graph["spacy_elmo.sources.model_paths"]  # the check sees group edges
    assert "spacy_elmo.groundwork.file_names" in graph["spacy_elmo.bilm.weights"]
    for name in MODULES:
        group = group_of(name)
        if group not in GROUP_LAYERS:
            continue
        allowed = set(GROUP_LAYERS[: GROUP_LAYERS.index(group) + 1])
        for dependency in graph[name]:
            if group_of(dependency) not in allowed:
                wrong.append(f"{name} imports {dependency}")
    assert not wrong, wrong
    assert group_of("spacy_elmo.runtime.embedding.backend") == "runtime" and group_of("spacy_elmo.cli") == "cli"


# runtime/'s rooms, lowest first: what a user gives (defaults, checks), sentences -> layers (the backend, its caches,
# windows), what a front end asks of the layers (mix, pooling, rows, stored layers, the shared settings)
RUNTIME_LAYERS = ("configuration", "embedding", "features")


def test_runtime_rooms_depend_one_way():
    """Inside runtime/, a subpackage imports only those before it in RUNTIME_LAYERS (lazy imports included), and every
    runtime module lives in one of them (ARCHITECTURE.md's module map)."""
    graph = internal_graph(in_functions=True)
    runtime = [name for name in MODULES if name.startswith("spacy_elmo.runtime.")]
    homeless = [name for name in runtime if name.split(".")[2] not in RUNTIME_LAYERS]
    assert not homeless, f"put these in one of runtime/'s rooms {RUNTIME_LAYERS}: {homeless}"
    assert "spacy_elmo.runtime.configuration.defaults" in graph["spacy_elmo.runtime.embedding.windows"]  # sees edges
    wrong = []
    for name in runtime:
        allowed = set(RUNTIME_LAYERS[: RUNTIME_LAYERS.index(name.split(".")[2]) + 1])
        for dependency in graph[name]:
            parts = dependency.split(".")
            if parts[:2] == ["spacy_elmo", "runtime"] and len(parts) > 2 and parts[2] not in allowed:
                wrong.append(f"{name} imports {dependency}")
    assert not wrong, wrong


def test_bilm_imports_no_front_end():
    """bilm/ is the model alone: nothing from the rest of spacy_elmo but the ground floor (groundwork/), nor spaCy,
    Thinc or scikit-learn, even lazily."""
    for name in MODULES:
        if name == "spacy_elmo.bilm" or name.startswith("spacy_elmo.bilm."):
            for imported in imported_names(name, in_functions=True):
                top = imported.split(".")[0]
                outside = top == "spacy_elmo" and not imported.startswith(("spacy_elmo.bilm", "spacy_elmo.groundwork"))
                assert not outside and top not in ("spacy", "thinc", "sklearn"), f"{name} imports {imported}"


# what train/ builds on besides bilm/, groundwork/ and itself: the tokenizers, windows' length batching, what a model
# string means (--init-from, evaluate; model_names: looked for before torch is imported), the version recorded in a
# prepared corpus; never the backend or a front end
TRAIN_USES = {
    "spacy_elmo.runtime.features.tokenize",
    "spacy_elmo.runtime.embedding.windows",
    "spacy_elmo.sources.model_paths",
    "spacy_elmo.sources.model_names",
    "spacy_elmo.about",
}


def test_train_builds_on_bilm_and_the_listed_pieces_only():
    """train/ imports, even lazily, nothing of spacy_elmo outside train/, bilm/ and groundwork/ but TRAIN_USES
    (ARCHITECTURE.md's module map); every listed piece is still used, so the list stays the truth."""
    used = set()
    for name in MODULES:
        if name.startswith("spacy_elmo.train"):
            for imported in imported_names(name, in_functions=True):
                if imported.startswith(("spacy_elmo.train", "spacy_elmo.bilm", "spacy_elmo.groundwork")):
                    continue
                if imported.split(".")[0] == "spacy_elmo":
                    assert imported in TRAIN_USES, f"{name} imports {imported}: train/ builds on bilm/ and TRAIN_USES"
                    used.add(imported)
    assert used == TRAIN_USES, f"TRAIN_USES lists pieces train/ no longer uses: {sorted(TRAIN_USES - used)}"
