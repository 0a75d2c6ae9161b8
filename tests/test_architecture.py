"""The rules of ARCHITECTURE.md that a machine can check, so the map stays true.

No import circles, bilm/ knows no front end, train/ builds on bilm/ and a listed set, threads in one place, size
thresholds where a table says, nothing unpickled, every file written whole, fork-safe locks, front ends through
embed_segments, file names in one place, the module map complete, no process-wide state changes in library code,
precision chosen by the engines, one embed call's order. Each check first proves on a broken input (or a known hit)
that it sees what it looks for, so none can pass because it sees nothing.
"""

import ast
import fnmatch
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


# the groups below the front ends, lowest first: each imports only groups before it (bilm/ none of them)
GROUP_LAYERS = ("bilm", "sources", "runtime", "output")


def group_of(name: str) -> str:
    """``spacy_elmo.<group>.x`` -> ``<group>``; a module directly in spacy_elmo/ -> its own name (a front end)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "spacy_elmo"


def test_the_groups_depend_one_way():
    """ARCHITECTURE.md's order: bilm/ <- sources/ <- runtime/ <- output/ <- the front ends (spacy/, compat/, sklearn,
    dask, hub, similarity) <- cli. A group imports only the groups before it (lazy imports included)."""
    wrong = []
    graph = internal_graph(in_functions=True)
    assert "spacy_elmo.bilm.weights" in graph["spacy_elmo.sources.model_files"]  # the check sees group edges
    for name in MODULES:
        group = group_of(name)
        if group not in GROUP_LAYERS:
            continue
        allowed = set(GROUP_LAYERS[: GROUP_LAYERS.index(group) + 1])
        for dependency in graph[name]:
            if group_of(dependency) not in allowed:
                wrong.append(f"{name} imports {dependency}")
    assert not wrong, wrong
    assert group_of("spacy_elmo.runtime.backend") == "runtime" and group_of("spacy_elmo.cli") == "cli"


def test_bilm_imports_no_front_end():
    """bilm/ is the model alone: nothing from the rest of spacy_elmo, spaCy, Thinc or scikit-learn, even lazily."""
    for name in MODULES:
        if name == "spacy_elmo.bilm" or name.startswith("spacy_elmo.bilm."):
            for imported in imported_names(name, in_functions=True):
                top = imported.split(".")[0]
                outside = top == "spacy_elmo" and not imported.startswith("spacy_elmo.bilm")
                assert not outside and top not in ("spacy", "thinc", "sklearn"), f"{name} imports {imported}"


# what train/ builds on besides bilm/ and itself: the tokenizers, windows' length batching, what a model string means
# (--init-from, evaluate), the version recorded in a prepared corpus; never the backend or a front end
TRAIN_USES = {
    "spacy_elmo.runtime.tokenize",
    "spacy_elmo.runtime.windows",
    "spacy_elmo.sources.model_files",
    "spacy_elmo.about",
}


def test_train_builds_on_bilm_and_the_listed_pieces_only():
    """train/ imports, even lazily, nothing of spacy_elmo outside train/ and bilm/ but TRAIN_USES (ARCHITECTURE.md's
    module map); every listed piece is still used, so the list stays the truth."""
    used = set()
    for name in MODULES:
        if name.startswith("spacy_elmo.train"):
            for imported in imported_names(name, in_functions=True):
                if imported.startswith(("spacy_elmo.train", "spacy_elmo.bilm")):
                    continue
                if imported.split(".")[0] == "spacy_elmo":
                    assert imported in TRAIN_USES, f"{name} imports {imported}: train/ builds on bilm/ and TRAIN_USES"
                    used.add(imported)
    assert used == TRAIN_USES, f"TRAIN_USES lists pieces train/ no longer uses: {sorted(TRAIN_USES - used)}"


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


# -- size thresholds ---------------------------------------------------------------------------------

# a module-level number whose name says it bounds a size: per-step multiply-adds, rows, weight elements, a split
SIZE_THRESHOLD = re.compile(r"_?(SPLIT_\w+|\w+_(MACS|ROWS|ELEMENTS))")
# of those, the ones that decide threads (a split onto the pool, a team of one): bilm/threads.py's only
THREAD_THRESHOLD = re.compile(r"\w*(THREAD|SPLIT|SMALL_WORK)\w*")
# where each size threshold may live: module pattern (fnmatch) -> the constants allowed there, ANY for any. The
# engines' files may hold any (which kernel takes a product of how many rows is each engine's cost model); the
# encoder's row below is memory blocking, not a kernel choice
ANY = frozenset({"*"})
SIZE_THRESHOLDS: dict[str, frozenset[str]] = {
    # when work is split onto the pool or run on one thread
    "spacy_elmo.bilm.threads": frozenset({"SMALL_WORK_MACS", "DIRECTION_THREADS_MIN_MACS", "SPLIT_TOKENS"}),
    "spacy_elmo.bilm.engine.*": ANY,  # each family's own, in its file (test_each_engine_family_keeps_its_...)
    # the char CNN's memory blocking (tokens per length bucket, window scores per block): no thread or kernel choice
    "spacy_elmo.bilm.encoder": frozenset({"BUCKET_ROWS", "MATMUL_CONV_ELEMENTS"}),
    # the training softmax's memory blocking (rows of logits per cache-sized block): no thread or kernel choice
    "spacy_elmo.train.target_log_prob": frozenset({"BLOCK_ELEMENTS"}),
}


def size_thresholds(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` of each module-level numeric constant in ``source`` whose name is a size threshold's."""
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        numeric = all(
            isinstance(n, (ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop))
            or (isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool))
            for n in ast.walk(value)
        )
        for target in targets:
            if numeric and isinstance(target, ast.Name) and SIZE_THRESHOLD.fullmatch(target.id):
                found.append((node.lineno, target.id))
    return found


def test_the_threshold_scan_sees_size_constants():
    """Guards the check below: numeric size constants are found, other names and non-numbers are not."""
    source = "A_MACS = 2_000\nB_MAX_ROWS: int = 1 << 8\nSPLIT_X = 64\nMAX_LAYERS = 64\nC_ROWS = f()\nD_ROWS = 'x'\n"
    assert size_thresholds(source) == [(1, "A_MACS"), (2, "B_MAX_ROWS"), (3, "SPLIT_X")]
    assert THREAD_THRESHOLD.fullmatch("DIRECTION_THREADS_MIN_MACS") and not THREAD_THRESHOLD.fullmatch("BF16_MAX_ROWS")


def test_size_thresholds_live_where_the_table_says():
    """Thread thresholds live in bilm/threads.py only; the engines' row-count and weight-size thresholds in
    bilm/engine/; the char CNN's memory blocking in encoder.py; nowhere else."""
    seen: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        for line, constant in size_thresholds(path.read_text(encoding="utf-8")):
            where = f"{name}:{line} {constant}"
            if THREAD_THRESHOLD.fullmatch(constant):
                assert name == "spacy_elmo.bilm.threads", f"{where} decides threads: it belongs in bilm/threads.py"
            places = [names for pattern, names in SIZE_THRESHOLDS.items() if fnmatch.fnmatchcase(name, pattern)]
            assert any(names == ANY or constant in names for names in places), (
                f"{where} is a size threshold outside its place: bilm/threads.py (threads) or bilm/engine/ (kernels); "
                "see SIZE_THRESHOLDS"
            )
            seen.setdefault(name, set()).add(constant)
    for pattern, names in SIZE_THRESHOLDS.items():
        if names != ANY:
            assert names <= seen.get(pattern, set()), f"SIZE_THRESHOLDS lists {sorted(names)} in {pattern}: update it"


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


# -- files appear whole ----------------------------------------------------------------------------

# modules that write files outside ``bilm.files.atomic_path`` blocks, each with why the file still appears whole (or
# is not one a reader may take for complete): they rename by themselves, or write what their own rename publishes
WRITES_ALLOWED = {
    # the helper itself: the one rename of atomic_path
    "spacy_elmo.bilm.files": "atomic_path's own rename",
    # the resumable .part (appended to, under a file lock, checked against its record before its rename), the
    # download records beside it and the unpacked-archive folders (renamed once complete, marked .complete)
    "spacy_elmo.sources.fetch": "the download store's .part files, records and archive folders",
    # the guarded HDF5 output: written under a hidden .partial name through write_guard, renamed once closed and
    # checked, removed on SIGTERM / Ctrl-C by its handler
    "spacy_elmo.output.embed_file": "the embedding file, written under a .partial name and renamed once complete",
    "spacy_elmo.output.write_guard": "opens embed_file's .partial file for it",
}
# functions that write to temporary paths handed to them by a caller's atomic_path(s) block (their docstrings say
# so); every call to them must itself sit in such a block, which the scan checks as it checks a write
WRITES_TO_A_GIVEN_TEMPORARY = {"write_weights_file", "write_model_files"}
# the calls that write a file: ``open``/``Path.open`` for writing, Path's writers, figure / HDF5 / torch / numpy /
# safetensors / srsly / json writers, and file copies (their second argument is the target)
WRITING_METHODS = {"write_text", "write_bytes", "savefig", "touch", "tofile"}
WRITING_CALLS = {
    "h5py.File",
    "torch.save",
    "numpy.save",
    "numpy.savez",
    "numpy.savez_compressed",
    "numpy.savetxt",
    "safetensors.torch.save_file",
    "safetensors.numpy.save_file",
    "json.dump",
    "shutil.copy",
    "shutil.copy2",
    "shutil.copyfile",
    "shutil.copytree",
    "shutil.move",
    "os.rename",
    "os.replace",
}
READ_ONLY_MODES = ("r", "rb", "rt", "br", "tr", "r:*", "r:gz")


def _mode(call: ast.Call, position: int) -> object:
    """The ``mode`` of an ``open``-like call: its keyword, else its ``position``-th argument (``"r"`` if absent)."""
    for keyword in call.keywords:
        if keyword.arg == "mode":
            return keyword.value.value if isinstance(keyword.value, ast.Constant) else None
    if len(call.args) > position:
        arg = call.args[position]
        return arg.value if isinstance(arg, ast.Constant) else None
    return "r"


def _writes(call: ast.Call, aliases: dict[str, str]) -> str:
    """What ``call`` writes a file with ("" when it writes none); an ``open`` whose mode is not a constant counts."""
    func = call.func
    name = _dotted(func, aliases)
    if name in WRITING_CALLS or name.startswith("srsly.write_"):
        if name == "h5py.File" and _mode(call, 1) in READ_ONLY_MODES:
            return ""
        return name
    if isinstance(func, ast.Name) and func.id in WRITES_TO_A_GIVEN_TEMPORARY:
        return func.id
    if (isinstance(func, ast.Name) and func.id == "open") or name in ("io.open", "os.fdopen"):
        return "" if _mode(call, 1) in READ_ONLY_MODES else "open"
    if isinstance(func, ast.Attribute):
        if func.attr in WRITING_METHODS:
            return func.attr
        if func.attr == "open" and name not in ("tarfile.open", "zipfile.ZipFile.open"):
            # Path.open(mode) or a ZipFile's open(member[, mode])
            position = 0 if not call.args or isinstance(call.args[0], ast.Constant) else 1
            return "" if _mode(call, position) in READ_ONLY_MODES else "open"
    return ""


def _is_atomic(expr: ast.AST, aliases: dict[str, str]) -> bool:
    """Whether ``expr`` calls ``atomic_path`` / ``atomic_paths`` (also ``stack.enter_context(atomic_path(p))``)."""
    return any(
        isinstance(node, ast.Call) and _dotted(node.func, aliases).rpartition(".")[2] in ("atomic_path", "atomic_paths")
        for node in ast.walk(expr)
    )


def _in_memory(expr: ast.AST, aliases: dict[str, str]) -> bool:
    return isinstance(expr, ast.Call) and _dotted(expr.func, aliases) in ("io.BytesIO", "io.StringIO")


def unguarded_writes(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each file write in ``source`` that ``atomic_path`` does not guard.

    A write is guarded inside a ``with atomic_path(...)`` / ``with atomic_paths(...)`` block (or a later item of
    the same ``with``), when it writes to a name its function bound from ``atomic_path`` (``tmp =
    stack.enter_context(atomic_path(p))``), inside a function of :data:`WRITES_TO_A_GIVEN_TEMPORARY`, or when
    it writes to a buffer in memory (a name bound to ``io.BytesIO()``)."""
    tree = ast.parse(source)
    aliases = _aliases(tree)
    found = []

    def visit(node: ast.AST, guarded: bool, temporaries: set[str], buffers: set[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            temporaries, buffers = set(), set()
            for inner in ast.walk(node):
                if isinstance(inner, ast.Assign):
                    names = {t.id for t in inner.targets if isinstance(t, ast.Name)}
                    if _is_atomic(inner.value, aliases):
                        temporaries |= names
                    elif _in_memory(inner.value, aliases):
                        buffers |= names
            guarded = guarded or node.name in WRITES_TO_A_GIVEN_TEMPORARY
        if isinstance(node, (ast.With, ast.AsyncWith)):
            inner = guarded
            for item in node.items:
                visit(item.context_expr, inner, temporaries, buffers)
                inner = inner or _is_atomic(item.context_expr, aliases)
            for statement in node.body:
                visit(statement, inner, temporaries, buffers)
            return
        if isinstance(node, ast.Call) and not guarded:
            what = _writes(node, aliases)
            operands = [*node.args, *(k.value for k in node.keywords)]
            if isinstance(node.func, ast.Attribute):
                operands.append(node.func.value)
            named = {n.id for operand in operands for n in ast.walk(operand) if isinstance(n, ast.Name)}
            if what and not named & (temporaries | buffers):
                found.append((node.lineno, what))
        for child in ast.iter_child_nodes(node):
            visit(child, guarded, temporaries, buffers)

    visit(tree, False, set(), set())
    return found


def test_the_write_scan_sees_unguarded_writes():
    """Guards the check below: each kind of write is found through any import spelling, guarded ones are not."""
    broken = """
import json, shutil, srsly, torch, h5py
import numpy as np
from pathlib import Path
from safetensors.torch import save_file
def save(path, figure, data, model):
    figure.savefig(path, dpi=120)
    path.write_text("x")
    Path(path).write_bytes(b"x")
    with open(path, "w") as handle:
        json.dump(data, handle)
    with path.open("ab") as handle:
        pass
    srsly.write_json(path, data)
    h5py.File(path, "w")
    torch.save(data, path)
    np.save(path, data)
    save_file(data, str(path))
    shutil.copyfile(path, path)
    write_weights_file(model, path, path)
"""
    assert [what for _, what in unguarded_writes(broken)] == [
        "savefig",
        "write_text",
        "write_bytes",
        "open",
        "json.dump",
        "open",
        "srsly.write_json",
        "h5py.File",
        "torch.save",
        "numpy.save",
        "safetensors.torch.save_file",
        "shutil.copyfile",
        "write_weights_file",
    ]
    guarded = """
import io, json, h5py
from contextlib import ExitStack
from ..bilm.files import atomic_path, atomic_paths
def save(path, figure, data):
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png")
    with atomic_path(path) as tmp, open(tmp, "w") as handle:
        json.dump(data, handle)
    with atomic_paths(path, path) as (a, b):
        a.write_text("x")
        write_model_files(data, a, b, path)
    stack = ExitStack()
    tmp = stack.enter_context(atomic_path(path))
    handle = stack.enter_context(open(tmp, "wb"))
    image = io.BytesIO()
    h5py.File(image, "w")
    with open(path, "rb") as handle, h5py.File(path, "r") as data:
        pass
def write_weights_file(model, target, shown_as):
    Path(target).write_bytes(b"x")
"""
    assert unguarded_writes(guarded) == []


def test_files_appear_whole_through_one_helper():
    """Every file the package writes goes through ``bilm.files.atomic_path`` (ARCHITECTURE.md, "Files appear whole"):
    no other module writes, copies or renames a file outside its blocks, except where WRITES_ALLOWED says why."""
    seen_allowed = set()
    for name, path in MODULES.items():
        for line, what in unguarded_writes(path.read_text(encoding="utf-8")):
            if name in WRITES_ALLOWED:
                seen_allowed.add(name)
                continue
            pytest.fail(f"{name}:{line} writes a file with {what} outside bilm.files.atomic_path: write through it")
    assert seen_allowed == set(WRITES_ALLOWED), f"allowed but writing nothing now: {set(WRITES_ALLOWED) - seen_allowed}"


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
    "spacy_elmo.output.cluster",
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


# -- file names in one place -----------------------------------------------------------------------

# a string that is a file name (or a name pattern, ``shard-{index:05d}.txt``): a bare name, no folder, no leading dot
# (".json" is a suffix, ".lock" the download cache's bookkeeping), no glob ("*.txt" matches a user's files)
FILE_NAME = re.compile(
    r"[\w{][\w.{}:-]*\.(json|jsonl|hdf5|h5|txt|tsv|csv|safetensors|pkl|pt|pth|npy|npz|md|sqlite|sqlite3|db|dic|cfg"
    r"|yaml|yml|msgpack|bin|zip|tgz|gz|png|svg|pdf)"
)
# names a foreign format gives its files, spelled by the one module that reads that format
FOREIGN_FILE_NAMES = {
    # ELMoForManyLangs' model folder (its config.json names its architecture file; the .pkl files are its torch-saved
    # state dicts, read only with torch.load(weights_only=True))
    "spacy_elmo.bilm.manylangs_files": {
        "config.json",
        "char.dic",
        "word.dic",
        "token_embedder.pkl",
        "encoder.pkl",
        "cnn_50_100_512_4096_sample.json",
        "cnn_0_100_512_4096_sample.json",
    },
}


def file_name_literals(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` for each string in ``source`` that is a whole file name (an f-string with its fields as
    ``{}``); messages and docstrings that mention a name in a sentence are not names."""
    found = []
    parts_of_fstrings = set()
    for node in ast.walk(ast.parse(source)):  # breadth first: an f-string before its parts
        text = None
        if isinstance(node, ast.JoinedStr):
            parts_of_fstrings.update(id(value) for value in node.values)
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts_of_fstrings:
            text = node.value
        if text is not None and FILE_NAME.fullmatch(text):
            found.append((node.lineno, text))
    return found


def test_the_file_name_scan_sees_names_not_prose():
    """Guards the check below: names are found as constants and f-strings; suffixes, globs, paths, prose are not."""
    source = """
META = "model.json"
def shard(i, stem, url):
    \"\"\"Reads corpus.json.\"\"\"
    return f"shard-{i:05d}.txt", stem + ".hdf5", "*.txt", f"{url}/elmo_options.json", "see options.json", ".lock"
"""
    names = [name for _, name in file_name_literals(source)]
    assert sorted(names) == ["model.json", "shard-{}.txt"]


def test_file_names_are_spelled_in_one_place():
    """The names of the files this package writes or reads in its folders (a model folder, a training run, a prepared
    corpus, an adaptation, the spaCy component's saved model, the disk cache) are constants of bilm/files.py; code
    elsewhere names them through those constants (messages and docstrings may mention them). A foreign format's
    names stay with the one module that reads it (FOREIGN_FILE_NAMES)."""
    own = {name for _, name in file_name_literals(MODULES["spacy_elmo.bilm.files"].read_text(encoding="utf-8"))}
    assert {"options.json", "model.json", "README.md", "corpus.json", "shard-{index:05d}.txt"} <= own  # sees them
    seen_foreign = {}
    for name, path in MODULES.items():
        if name == "spacy_elmo.bilm.files":
            continue
        for line, literal in file_name_literals(path.read_text(encoding="utf-8")):
            if literal in FOREIGN_FILE_NAMES.get(name, set()) and literal not in own:
                seen_foreign.setdefault(name, set()).add(literal)
                continue
            pytest.fail(f"{name}:{line} spells the file name {literal!r}: name it in bilm/files.py and use that")
    assert seen_foreign == FOREIGN_FILE_NAMES, "FOREIGN_FILE_NAMES lists names no module spells any more"


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
    # full float32 (no TF32 on CUDA, no oneDNN bf16 / TF32 on CPU) while the package's own products run (counted
    # across threads), put back by the last to leave
    "spacy_elmo.bilm.exact": {
        "torch.backends.cuda.matmul.fp32_precision",
        "torch.backends.cudnn.conv.fp32_precision",
        "torch.backends.cuda.matmul.allow_tf32",
        "torch.backends.cudnn.allow_tf32",
        "torch.backends.mkldnn.matmul.fp32_precision",
        "torch.backends.mkldnn.conv.fp32_precision",
        "torch.set_float32_matmul_precision",
    },
    # glibc's malloc keeps freed memory for reuse: called only by the train and adapt commands in their own processes
    "spacy_elmo.train.allocator": {"mallopt"},
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
            elif name.split(".")[-1] == "mallopt":  # the C library's allocator settings, through ctypes
                found.append((node.lineno, "mallopt"))
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        while any(isinstance(target, (ast.Tuple, ast.List)) for target in targets):  # a, b = ...: each one
            targets = [e for t in targets for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])]
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
import ctypes, os, warnings, multiprocessing
import numpy as np
import torch
from warnings import filterwarnings
def predict():
    if multiprocessing.parent_process() is not None:
        warnings.filterwarnings("ignore", message="W109")
    filterwarnings("ignore")
    np.seterr(all="ignore")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32, x = True, 1
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-4, 0)
"""
    assert [what for _, what in process_wide_changes(broken)] == [
        "warnings.filterwarnings",
        "warnings.filterwarnings",
        "numpy.seterr",
        "torch.backends.cudnn.benchmark",
        "torch.backends.cuda.matmul.allow_tf32",
        "os.environ",
        "torch.set_num_threads",
        "mallopt",
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


# -- one embed call ---------------------------------------------------------------------------------


def test_one_embed_call_looks_up_computes_and_writes_a_repeated_sentence_once(fixture_dir, tmp_path):
    """ARCHITECTURE.md's "One embed call" in its order: the memory cache for each sentence, the misses grouped by
    their tokens (so dedup comes before the disk), one disk lookup of the unique misses, each unique sentence
    computed once, then written once to the memory and disk caches; every position gets its own array."""
    import shutil

    import numpy as np

    from spacy_elmo import load_bilm

    shutil.copytree(fixture_dir, tmp_path / "model")  # a backend of its own, with empty caches
    backend = load_bilm(tmp_path / "model").configure_cache(cache_dir=tmp_path / "cache")
    calls: list[tuple[str, list[tuple[str, ...]]]] = []
    memory_get, disk_get, disk_put, embed_batch = (
        backend.memory_cache.get,
        backend.disk_cache.get_many,
        backend.disk_cache.put_many,
        backend._embed_batch,
    )

    def looked_up_in_memory(key):
        calls.append(("memory", [key]))
        return memory_get(key)

    def looked_up_on_disk(fingerprint, keys, *shape):
        calls.append(("disk get", list(keys)))
        return disk_get(fingerprint, keys, *shape)

    def written_to_disk(fingerprint, items):
        items = list(items)
        calls.append(("disk put", [key for key, _ in items]))
        return disk_put(fingerprint, items)

    def computed(batch):
        calls.append(("computed", [tuple(s) for s in batch]))
        return embed_batch(batch)

    backend.memory_cache.get = looked_up_in_memory
    backend.disk_cache.get_many = looked_up_on_disk
    backend.disk_cache.put_many = written_to_disk
    backend._embed_batch = computed
    bank, river = ("The", "bank", "will", "pay", "."), ("a", "river")

    out = backend.embed([list(bank), list(river), list(bank), [], list(bank)])
    # computed longest first, one batch; the empty sentence touches no cache
    assert calls == [
        ("memory", [bank]),
        ("memory", [river]),
        ("memory", [bank]),
        ("memory", [bank]),
        ("disk get", [bank, river]),
        ("computed", [bank, river]),
        ("disk put", [bank, river]),
    ]
    assert out[3].shape == (backend.n_layers + 1, 0, backend.dim)
    assert out[0] is not out[2] and out[2] is not out[4] and out[0].flags.writeable
    np.testing.assert_array_equal(out[0], out[2])
    np.testing.assert_array_equal(out[0], out[4])
    assert backend.memory_cache.get(bank) is not None  # results went into the memory cache

    backend.clear_cache()  # memory only: the disk cache keeps both sentences
    calls.clear()
    again = backend.embed([list(bank), list(bank), ["new", "words"]])
    assert calls == [
        ("memory", [bank]),
        ("memory", [bank]),
        ("memory", [("new", "words")]),
        ("disk get", [bank, ("new", "words")]),  # a disk hit is not computed, nor written again
        ("computed", [("new", "words")]),
        ("disk put", [("new", "words")]),
    ]
    np.testing.assert_array_equal(again[1], out[0])


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
    "spacy_elmo.bilm.engine.onednn": {
        "MIN_ELEMENTS",
        "MAX_ROWS",
        "FLOAT32_MAX_ROWS",
        "FLOAT32_STATE_MIN_ROWS",
        "_PACK_FOR_ROWS",
    },
    "spacy_elmo.bilm.engine.int8": {"gate_chunk_elements"},
    "spacy_elmo.bilm.engine.base": {"gate_chunk_elements"},  # the default every engine inherits
}
# sizes that choose no kernel: the char CNN's memory blocking, the same under every engine
BLOCKING_SIZES = {"spacy_elmo.bilm.encoder": {"BUCKET_ROWS", "MATMUL_CONV_ELEMENTS"}}
THRESHOLD_NAME = re.compile(r"(^|_)(ROWS|ELEMENTS)($|_)|_elements$|_rows$")


def family_size_thresholds(path: Path) -> set[str]:
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
    # the check sees them
    assert family_size_thresholds(MODULES["spacy_elmo.bilm.engine.mkl"]) >= {"MIN_ROWS", "MAX_ROWS"}
    for name, path in MODULES.items():
        if name.startswith("spacy_elmo.bilm"):
            expected = FAMILY_THRESHOLDS.get(name, set()) | BLOCKING_SIZES.get(name, set())
            assert family_size_thresholds(path) == expected, name
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
