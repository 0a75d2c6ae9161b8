"""The rules of ARCHITECTURE.md that a machine can check: no import circles, bilm/ knows no front end, threads in
one place, precision chosen by the engines."""

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "spacy_elmo"


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


def internal_graph(*, in_functions: bool = False) -> dict[str, set[str]]:
    return {
        name: {d for d in imported_names(name, in_functions=in_functions) if d in MODULES and d != name}
        for name in MODULES
    }


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


def test_the_walk_finds_the_package_and_its_imports():
    """Guards the checks below against passing because they see nothing."""
    graph = internal_graph()
    assert {"spacy_elmo", "spacy_elmo.bilm.model", "spacy_elmo.bilm.inference", "spacy_elmo.backend"} <= set(graph)
    assert "spacy_elmo.bilm.inference" in graph["spacy_elmo.bilm.model"]
    assert "spacy_elmo.bilm.lstm" in graph["spacy_elmo.bilm.inference"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("in_functions", [False, True], ids=["module level", "also inside functions"])
def test_no_import_circle_inside_the_package(in_functions):
    """A circle means one of its modules is in the wrong room. Type-checking-only imports count too."""
    cycle = find_cycle(internal_graph(in_functions=in_functions))
    assert not cycle, "import circle: " + " -> ".join(cycle)


def test_bilm_imports_no_front_end():
    """bilm/ is the model alone: nothing from the rest of spacy_elmo, spaCy, Thinc or scikit-learn, even lazily."""
    for name in MODULES:
        if name == "spacy_elmo.bilm" or name.startswith("spacy_elmo.bilm."):
            for imported in imported_names(name, in_functions=True):
                top = imported.split(".")[0]
                outside = top == "spacy_elmo" and not imported.startswith("spacy_elmo.bilm")
                assert not outside and top not in ("spacy", "thinc", "sklearn"), f"{name} imports {imported}"


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


def test_threads_are_started_and_limited_only_in_bilm_threads():
    """Thread pools and thread-count settings live in bilm/threads.py; only the CLI sets torch's process-wide count."""
    watched = {
        "ThreadPoolExecutor",
        "set_num_threads",
        "set_num_interop_threads",
        "omp_set_num_threads",
        "MKL_Set_Num_Threads_Local",
    }
    allowed = {"spacy_elmo.bilm.threads": watched, "spacy_elmo.cli": {"set_num_threads"}}
    assert watched & used_names(MODULES["spacy_elmo.bilm.threads"])  # the check sees what it looks for
    for name, path in MODULES.items():
        misplaced = (used_names(path) & watched) - allowed.get(name, set())
        assert not misplaced, f"{name} uses {sorted(misplaced)}: thread pools and limits belong in bilm/threads.py"


# the one reader of torch-saved files (ELMoForManyLangs' state dicts), and only with weights_only=True
TORCH_LOAD_ALLOWED = {"spacy_elmo.bilm.manylangs_files"}


def _weights_only(call: ast.Call) -> bool:
    return any(
        k.arg == "weights_only" and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords
    )


def test_nothing_is_unpickled():
    """No module imports a pickle-based loader or calls torch.load, except ``torch.load(weights_only=True)``
    (tensors only, nothing runs) in the one module that reads ELMoForManyLangs' torch-saved files."""
    loaders = {"pickle", "cPickle", "dill", "cloudpickle", "joblib", "shelve", "marshal"}
    seen_allowed = 0
    for name, path in MODULES.items():
        imported = {n.split(".")[0] for n in imported_names(name, in_functions=True)}
        assert not imported & loaders, f"{name} imports {sorted(imported & loaders)}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value.id if isinstance(node.func.value, ast.Name) else ""
                if owner == "torch" and node.func.attr == "load":
                    assert name in TORCH_LOAD_ALLOWED and _weights_only(node), f"{name}:{node.lineno} calls torch.load"
                    seen_allowed += 1
                assert node.func.attr != "read_pickle", f"{name}:{node.lineno} calls read_pickle"
                pickles = [
                    k
                    for k in node.keywords
                    if k.arg == "allow_pickle" and not (isinstance(k.value, ast.Constant) and k.value.value is False)
                ]
                assert not pickles, f"{name}:{node.lineno} allows pickle"
    assert seen_allowed == 1  # the check sees the one allowed call


# renames that are not "write a whole file": download.py's resumed .part and unpacked-archive folder (under file
# locks, with their own recovery), embed_file's guarded HDF5 output (removed on SIGTERM by its handler)
REPLACE_ALLOWED = {"spacy_elmo.bilm.files", "spacy_elmo.download", "spacy_elmo.embed_file"}


def test_files_appear_whole_through_one_helper():
    """Every writer replaces its target through ``bilm.files.atomic_path`` (ARCHITECTURE.md, "Files appear whole"):
    no other module calls ``os.replace`` / ``os.rename`` / ``Path.replace`` itself."""
    seen = 0
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("replace", "rename")
            ):
                owner = node.func.value
                if isinstance(owner, ast.Name) and owner.id == "os":
                    seen += name == "spacy_elmo.bilm.files"
                    assert name in REPLACE_ALLOWED, (
                        f"{name}:{node.lineno} renames a file itself: write through bilm.files.atomic_path"
                    )
    assert seen == 1  # the check sees the helper's own rename


def test_module_locks_are_fork_safe_locks():
    """No module renews a lock after fork by hand (a ``threading.Lock()`` rebound in an ``@at_fork_in_child``
    function): module-level locks are ``bilm.threads.ForkSafeLock``."""
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            decorated = any(isinstance(d, ast.Name) and d.id == "at_fork_in_child" for d in node.decorator_list)
            rebinds_lock = any(
                isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("Lock", "RLock")
                for n in ast.walk(node)
            )
            if (
                decorated and rebinds_lock and name != "spacy_elmo.bilm.threads"
            ):  # threads.py renews its pool with its lock
                pytest.fail(f"{name}:{node.lineno} renews a lock after fork by hand: use bilm.threads.ForkSafeLock")


# the front ends: they reach the biLM only through windows.embed_segments / fold_segments (windows, token bound)
FRONT_ENDS = (
    "spacy_elmo.hub",
    "spacy_elmo.similarity",
    "spacy_elmo.dask",
    "spacy_elmo.sklearn",
    "spacy_elmo.text_rows",
    "spacy_elmo.embed_file",
    "spacy_elmo.spacy.pipeline_component",
)


def embed_calls(path: Path) -> list[int]:
    """Line numbers of every ``<something>.embed(...)`` call in a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "embed"
    ]


def test_front_ends_never_call_backend_embed():
    """Only windows.py hands token sequences to ``backend.embed``; a front end that did would get no windows and no
    per-call bound."""
    assert embed_calls(MODULES["spacy_elmo.windows"])  # the check sees what it looks for
    for name in FRONT_ENDS:
        assert name in MODULES, f"{name} is gone: update FRONT_ENDS"
        assert not embed_calls(MODULES[name]), (
            f"{name} calls .embed() at lines {embed_calls(MODULES[name])}: use windows.embed_segments"
        )


FILE_NAMES = {
    "options.json",
    "weights.hdf5",
    "lm_weights.hdf5",
    "model.hdf5",
    "vocab.txt",
    "metrics.json",
    "checkpoint.safetensors",
    "softmax.safetensors",
}


def test_file_names_are_spelled_in_one_place():
    """A model folder's and a training run's file names are constants of bilm/files.py; code elsewhere names them
    through those constants (messages and docstrings may mention them)."""
    seen = set()
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in FILE_NAMES:
                if name == "spacy_elmo.bilm.files":
                    seen.add(node.value)
                else:
                    pytest.fail(f"{name}:{node.lineno} spells {node.value!r}: use the constant of bilm/files.py")
    assert seen == FILE_NAMES  # the check sees every name where it belongs


# the inference path below BiLM's chooser, outside bilm/engine: it never picks a kernel or precision itself
PRECISION_BLIND = (
    "spacy_elmo.bilm.inference",
    "spacy_elmo.bilm.model",
    "spacy_elmo.bilm.lstm",
    "spacy_elmo.bilm.encoder",
    "spacy_elmo.bilm.vocab_cache",
    "spacy_elmo.bilm.mkl_prepacked",
    "spacy_elmo.bilm.compiled_steps",
    "spacy_elmo.bilm.low_precision",
)
TORCH_DTYPES = {"float32", "float64", "bfloat16", "float16", "half", "int8", "qint8", "quint8"}


def precision_checks(path: Path) -> list[int]:
    """Lines that compare a dtype (``x.dtype == ...``, ``... is torch.bfloat16``) or a pack's ``kind``."""

    def names_precision(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute) and node.attr in ("dtype", "kind"):
            return True
        return (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "torch"
            and node.attr in TORCH_DTYPES
        )

    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Compare) and any(names_precision(n) for n in [node.left, *node.comparators])
    ]


def test_precision_is_chosen_only_by_the_engines():
    """Below BiLM's one reference-vs-inference switch, kernels and precisions are chosen once per module and
    target by bilm/engine (``engine_of``): the inference path and the kernel modules never test a dtype or a
    pack's kind per product. (cpu_support decides what this process runs; the engines ask it.)"""
    assert precision_checks(MODULES["spacy_elmo.bilm.engine.mkl"])  # the check sees what it looks for
    for name in PRECISION_BLIND:
        assert not precision_checks(MODULES[name]), (
            f"{name} tests a dtype or pack kind at lines {precision_checks(MODULES[name])}: "
            "that choice belongs to an engine in bilm/engine"
        )
    inference_names = used_names(MODULES["spacy_elmo.bilm.inference"])
    assert not inference_names & (TORCH_DTYPES | {"low_precision", "mkl_prepacked", "compiled_steps"}), (
        "inference.py names a precision or a kernel module: it asks the engine"
    )


def test_no_registry_keyed_by_module_in_bilm():
    """Packs and engines live with the modules they serve (freed with the model), not in module-keyed globals;
    threads.py's set of objects to renew after fork is the one weak collection."""
    for name, path in MODULES.items():
        if name.startswith("spacy_elmo.bilm") and name != "spacy_elmo.bilm.threads":
            found = used_names(path) & {"WeakKeyDictionary", "WeakSet", "WeakValueDictionary"}
            assert not found, f"{name} keeps {sorted(found)}: hold state on the module (bilm/engine)"


def test_the_quantized_engine_setting_is_touched_in_one_place():
    """``torch.backends.quantized.engine`` is process-wide: only int8_ops.prepack sets it (where it must differ,
    under its lock, and puts it back)."""
    setters = {}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    quantized = isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute)
                    if quantized and target.attr == "engine" and target.value.attr == "quantized":
                        setters.setdefault(name, []).append(node.lineno)
    assert set(setters) == {"spacy_elmo.bilm.int8_ops"}, setters
