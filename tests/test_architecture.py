"""The rules of ARCHITECTURE.md that a machine can check, so the map stays true.

No import circles, bilm/ knows no front end, threads in one place, nothing unpickled, files written whole,
fork-safe locks, front ends through embed_segments, file names in one place, the module map complete, no
process-wide state changes in library code, precision chosen by the engines. Each check first proves on a
broken input (or a known hit) that it sees what it looks for, so none can pass because it sees nothing.
"""

import ast
import re
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
    assert {"spacy_elmo", "spacy_elmo.bilm.model", "spacy_elmo.bilm.inference", "spacy_elmo.runtime.backend"} <= set(
        graph
    )
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
REPLACE_ALLOWED = {"spacy_elmo.bilm.files", "spacy_elmo.sources.download", "spacy_elmo.output.embed_file"}


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
    "spacy_elmo.runtime.text_rows",
    "spacy_elmo.output.embed_file",
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
    """Only windows.py hands token sequences to ``backend.embed``: a front end that did would get no windows and no
    per-call bound."""
    assert embed_calls(MODULES["spacy_elmo.runtime.windows"])  # the check sees what it looks for
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


# -- no process-wide state changes in library code --------------------------------------------------

# calls that change the whole process's behaviour for everyone in it (the user's code and other libraries)
PROCESS_WIDE_CALLS = {
    "warnings.filterwarnings",
    "warnings.simplefilter",
    "warnings.resetwarnings",
    "matplotlib.use",
    "torch.set_num_threads",
    "torch.set_num_interop_threads",
    "torch.set_default_dtype",
    "torch.set_default_device",
    "torch.set_default_tensor_type",
    "torch.set_flush_denormal",
    "torch.set_float32_matmul_precision",
    "torch.use_deterministic_algorithms",
    "torch.set_printoptions",
    "torch.set_grad_enabled",  # as a statement; ``with torch.set_grad_enabled(...)`` is scoped
    "torch.autograd.set_detect_anomaly",
    "torch.manual_seed",
    "torch.seed",
    "torch.set_rng_state",
    "os.environ.setdefault",
    "os.environ.update",
    "os.environ.pop",
    "os.environ.clear",
    "os.putenv",
    "os.unsetenv",
    "os.chdir",
    "os.umask",
    "logging.basicConfig",
    "logging.disable",
    "logging.captureWarnings",
    "sys.setrecursionlimit",
    "sys.setswitchinterval",
    "sys.settrace",
    "sys.setprofile",
    "sys.path.insert",
    "sys.path.append",
    "numpy.seterr",
    "numpy.set_printoptions",
    "numpy.random.seed",
    "random.seed",
    "signal.signal",
    "socket.setdefaulttimeout",
    "locale.setlocale",
    "faulthandler.enable",
    "gc.disable",
    "gc.set_threshold",
}
# attributes whose assignment is process-wide: torch.backends.<anything> = ..., os.environ[...] = ..., sys.stdout = ...
PROCESS_WIDE_TARGETS = (
    "torch.backends.",
    "os.environ",
    "sys.stdout",
    "sys.stderr",
    "sys.excepthook",
    "threading.excepthook",
)

# each with why the process-wide change is the caller's wish or is undone before anyone else can see it
PROCESS_WIDE_ALLOWED = {
    "spacy_elmo.cli": {"torch.set_num_threads"},  # `spacy-elmo ... --threads N`: the user asked for it
    # the training run's --seed: dropout and the data order draw from torch's global generator (train() is the run)
    "spacy_elmo.train.trainer": {"torch.manual_seed", "torch.set_rng_state"},
    # SIGTERM / Ctrl-C remove the partial output file while it is written; set only where the default is in
    # force, in the main thread, and put back in a finally
    "spacy_elmo.output.embed_file": {"signal.signal"},
    # the quantized engine, which torch reads only when packing: set for one pack, under a lock, and put back
    "spacy_elmo.bilm.engine.int8.kernels": {"torch.backends.quantized.engine"},
}


def _aliases(tree: ast.AST) -> dict[str, str]:
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


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str:
    """``np.random.seed`` -> ``numpy.random.seed`` (the root resolved through the imports); "" for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Subscript):  # os.environ["X"]
        return _dotted(node.value, aliases)
    if not isinstance(node, ast.Name):
        return ""
    return ".".join([aliases.get(node.id, node.id), *reversed(parts)])


def process_wide_changes(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each process-wide state change in ``source`` (:data:`PROCESS_WIDE_CALLS`, assignments to
    :data:`PROCESS_WIDE_TARGETS`); warning filters inside a ``with warnings.catch_warnings()`` block are scoped, and a
    call used as a ``with`` item (``with torch.set_grad_enabled(False):``) is too."""
    tree = ast.parse(source)
    aliases = _aliases(tree)
    found = []

    def visit(node: ast.AST, scoped_warnings: bool) -> None:
        if isinstance(node, (ast.With, ast.AsyncWith)):
            items = [
                _dotted(item.context_expr.func, aliases)
                for item in node.items
                if isinstance(item.context_expr, ast.Call)
            ]
            inner = scoped_warnings or "warnings.catch_warnings" in items
            for item in node.items:  # the context manager itself is scoped; its arguments are visited
                expr = item.context_expr
                for child in [*expr.args, *expr.keywords] if isinstance(expr, ast.Call) else [expr]:
                    visit(child, scoped_warnings)
            for statement in node.body:
                visit(statement, inner)
            return
        if isinstance(node, ast.Call):
            name = _dotted(node.func, aliases)
            if name in PROCESS_WIDE_CALLS and not (scoped_warnings and name.startswith("warnings.")):
                found.append((node.lineno, name))
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            name = _dotted(target, aliases)
            if name.startswith(PROCESS_WIDE_TARGETS):
                found.append((node.lineno, name))
        for child in ast.iter_child_nodes(node):
            visit(child, scoped_warnings)

    visit(tree, False)
    return found


def test_the_state_scan_sees_process_wide_changes():
    """Guards the check below: each kind of change is found through any import spelling, scoped ones are not."""
    broken = """
import os, warnings, multiprocessing
import numpy as np
import torch
from warnings import filterwarnings
def predict():
    if multiprocessing.parent_process() is not None:
        warnings.filterwarnings("ignore", message="W109")
    filterwarnings("ignore")
    np.seterr(all="ignore")
    torch.backends.cudnn.benchmark = True
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
"""
    assert [what for _, what in process_wide_changes(broken)] == [
        "warnings.filterwarnings",
        "warnings.filterwarnings",
        "numpy.seterr",
        "torch.backends.cudnn.benchmark",
        "os.environ",
        "torch.set_num_threads",
    ]
    scoped = """
import warnings, torch
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
with torch.set_grad_enabled(False):
    pass
before = torch.backends.quantized.engine
"""
    assert process_wide_changes(scoped) == []


def test_library_code_changes_no_process_wide_state():
    """Importing or using the package leaves warning filters, torch's and numpy's global settings, the environment,
    logging, signals and the interpreter as they were, except where PROCESS_WIDE_ALLOWED says why."""
    seen_allowed = set()
    for name, path in MODULES.items():
        for line, what in process_wide_changes(path.read_text(encoding="utf-8")):
            if what in PROCESS_WIDE_ALLOWED.get(name, set()):
                seen_allowed.add((name, what))
                continue
            pytest.fail(f"{name}:{line} changes process-wide state ({what}): scope it, or leave it to the user")
    expected = {(name, what) for name, whats in PROCESS_WIDE_ALLOWED.items() for what in whats}
    assert seen_allowed == expected, f"allowed but not found (update PROCESS_WIDE_ALLOWED): {expected - seen_allowed}"


# the inference path below BiLM's chooser, outside bilm/engine: it never picks a kernel or precision itself
PRECISION_BLIND = (
    "spacy_elmo.bilm.inference",
    "spacy_elmo.bilm.model",
    "spacy_elmo.bilm.lstm",
    "spacy_elmo.bilm.encoder",
    "spacy_elmo.bilm.vocab_cache",
    "spacy_elmo.bilm.engine.step_loop",
    "spacy_elmo.bilm.engine.packs",
    "spacy_elmo.bilm.engine.int8.kernels",
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
    assert not inference_names & (TORCH_DTYPES | {"mkl", "int8", "bf16", "plain", "step_loop"}), (
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
    """``torch.backends.quantized.engine`` is process-wide: only engine/int8/kernels.prepack sets it (where it must
    differ, under its lock, and puts it back)."""
    setters = {}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    quantized = isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute)
                    if quantized and target.attr == "engine" and target.value.attr == "quantized":
                        setters.setdefault(name, []).append(node.lineno)
    assert set(setters) == {"spacy_elmo.bilm.engine.int8.kernels"}, setters


# -- the engines: one time loop, each family's cost model in its own file, one attribute on a module ---------

ENGINE_MODULES = sorted(name for name in MODULES if name.startswith("spacy_elmo.bilm.engine"))
GATE_MATH = {"cell_update", "sigmoid", "sigmoid_", "tanh", "tanh_"}  # what a step of an LSTM computes


def time_loops(path: Path) -> list[str]:
    """The functions of a module with a loop that computes LSTM gates (calls ``cell_update``, a sigmoid or a tanh)."""
    found = []
    for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for loop in ast.walk(function):
            if not isinstance(loop, (ast.For, ast.While)):
                continue
            calls = {
                node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                for node in ast.walk(loop)
                if isinstance(node, ast.Call)
            }
            if calls & GATE_MATH:
                found.append(function.name)
                break
    return found


def test_one_step_loop_runs_every_engine():
    """The inference path has ONE LSTM time loop, ``step_loop.lstm_steps``: no other engine module nor inference.py
    loops over gate math, and ``cell_update`` is defined once and called only there. (The reference path, lstm.py,
    keeps its own loop: the check sees it.)"""
    assert time_loops(MODULES["spacy_elmo.bilm.lstm"]) == ["run"]  # the check sees what it looks for
    loops = {name: time_loops(MODULES[name]) for name in [*ENGINE_MODULES, "spacy_elmo.bilm.inference"]}
    assert {name: found for name, found in loops.items() if found} == {
        "spacy_elmo.bilm.engine.step_loop": ["lstm_steps"]
    }
    defined, called = [], []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name == "cell_update":
                defined.append(name)
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "cell_update":
                called.append(name)
    assert defined == ["spacy_elmo.bilm.engine.step_loop"] and set(called) == {"spacy_elmo.bilm.engine.step_loop"}


# each engine family's cost model: the row counts and weight sizes that take its kernels, constants of its own file
FAMILY_THRESHOLDS = {
    "spacy_elmo.bilm.engine.plain": {"STACK_MAX_ELEMENTS"},
    "spacy_elmo.bilm.engine.mkl": {"MIN_ROWS", "MAX_ROWS", "MAX_ROWS_THREADED", "MIN_ELEMENTS", "_PACK_FOR_ROWS"},
    "spacy_elmo.bilm.engine.bf16": {"MIN_ELEMENTS", "MAX_ROWS"},
    "spacy_elmo.bilm.engine.int8": {"gate_chunk_elements"},
    "spacy_elmo.bilm.engine.base": {"gate_chunk_elements"},  # the default every engine inherits
}
# sizes that choose no kernel: the char CNN's memory blocking, the same under every engine
BLOCKING_SIZES = {"spacy_elmo.bilm.encoder": {"BUCKET_ROWS", "MATMUL_CONV_ELEMENTS"}}
THRESHOLD_NAME = re.compile(r"(^|_)(ROWS|ELEMENTS)($|_)|_elements$|_rows$")


def size_thresholds(path: Path) -> set[str]:
    """Names of numbers a module defines at module or class level that count rows or elements (``MAX_ROWS = 64``)."""
    found = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    scopes = [tree, *(node for node in ast.walk(tree) if isinstance(node, ast.ClassDef))]
    for scope in scopes:
        for node in scope.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            value = getattr(node, "value", None)
            zero = isinstance(value, ast.Constant) and value.value == 0  # a field's "none" (StepWeight.max_rows)
            numeric = (
                value is not None
                and not zero
                and any(isinstance(n, ast.Constant) and isinstance(n.value, int) for n in ast.walk(value))
            )
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name) and THRESHOLD_NAME.search(name.id) and numeric:
                        found.add(name.id)
    return found


def test_each_engine_family_keeps_its_size_thresholds_in_its_own_file():
    """Every row-count and weight-size threshold of the inference path is a constant of one engine family's file,
    and no other module of bilm/ names it (the inference path and the step loop take the engine's word)."""
    assert size_thresholds(MODULES["spacy_elmo.bilm.engine.mkl"]) >= {"MIN_ROWS", "MAX_ROWS"}  # the check sees them
    for name, path in MODULES.items():
        if name.startswith("spacy_elmo.bilm"):
            expected = FAMILY_THRESHOLDS.get(name, set()) | BLOCKING_SIZES.get(name, set())
            assert size_thresholds(path) == expected, name
    family_names = {n for n in set().union(*FAMILY_THRESHOLDS.values()) if n.isupper()}  # engine.<attr>: asked
    for name, path in MODULES.items():
        if name.startswith("spacy_elmo.bilm") and name not in FAMILY_THRESHOLDS:
            assert not used_names(path) & family_names, f"{name} names an engine's threshold: ask the engine"


def test_the_engines_keep_one_attribute_on_a_module():
    """Engine, int8 mark and released packs live in one ``ModuleState`` (``engine/base.py``): no other module of
    the package reads or writes a module's ``__dict__``."""
    touching = {
        name
        for name, path in MODULES.items()
        if any(
            isinstance(node, ast.Attribute) and node.attr == "__dict__"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )
    }
    assert touching == {"spacy_elmo.bilm.engine.base"}, touching
