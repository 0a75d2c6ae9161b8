"""Process-wide state: library code changes none behind its caller's back, module-level locks survive fork,
no module-keyed registry, the quantized engine setting touched in one place (ARCHITECTURE.md, "No process-wide
state changes in library code", "Locks survive fork")."""

import ast

import pytest

from tests.architecture.arch_scan import (
    MODULES,
    dotted_name,
    import_aliases,
    used_names,
)

LOCK_FACTORIES = {"threading.Lock", "threading.RLock"}


def hand_made_locks(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each lock a module keeps by hand: a ``threading.Lock()`` / ``RLock()`` bound to a module
    name (at module level, or through ``global`` in a function such as an ``@at_fork_in_child`` renewal). Locks
    made per object (``self._lock = threading.Lock()``) are not module-level."""
    tree = ast.parse(source)
    aliases = import_aliases(tree)
    found = []

    def makes_lock(value: ast.AST) -> bool:
        return any(isinstance(n, ast.Call) and dotted_name(n.func, aliases) in LOCK_FACTORIES for n in ast.walk(value))

    def scan(statements: list[ast.stmt], module_names: set[str]) -> None:
        for node in statements:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and makes_lock(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                if names & module_names:
                    found.append((node.lineno, ", ".join(sorted(names & module_names))))

    scan(tree.body, {n.id for node in tree.body for n in ast.walk(node) if isinstance(n, ast.Name)})
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            declared = {name for n in ast.walk(function) if isinstance(n, ast.Global) for name in n.names}
            scan([n for n in ast.walk(function) if isinstance(n, ast.stmt)], declared)
    return found


def test_the_lock_scan_sees_hand_made_module_locks():
    """Guards the check below: a module-level lock and one renewed by hand after fork are found, per-object and
    fork-safe locks are not."""
    broken = """
import threading
from threading import RLock
_lock = threading.Lock()
_other: object = RLock()
@at_fork_in_child
def _renew():
    global _pool, _lock
    _pool, _lock = None, threading.Lock()
"""
    assert hand_made_locks(broken) == [(4, "_lock"), (5, "_other"), (9, "_lock, _pool")]
    fine = """
import threading
_lock = ForkSafeLock()
_rlock = ForkSafeLock(threading.RLock)
class Cache:
    def __init__(self):
        self._lock = threading.Lock()
"""
    assert hand_made_locks(fine) == []


def test_module_locks_are_fork_safe_locks():
    """Module-level locks are ``bilm.threads.ForkSafeLock`` (renewed, unlocked, in a forked child): no module keeps
    a ``threading.Lock`` of its own at module level or renews one after fork by hand."""
    for name, path in MODULES.items():
        for line, what in hand_made_locks(path.read_text(encoding="utf-8")):
            pytest.fail(f"{name}:{line} keeps a plain lock ({what}) at module level: use bilm.threads.ForkSafeLock")


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
    # threads.set_process_threads, the one setter of torch's thread count: called only by the commands in their own
    # processes (`--threads N`, training's cores shared out: tests/architecture/test_threads_and_sizes.py)
    "spacy_elmo.bilm.threads": {"torch.set_num_threads"},
    # the training run's --seed: dropout and the data order draw from torch's global generator (train() is the run)
    "spacy_elmo.train.run.trainer": {"torch.manual_seed", "torch.set_rng_state"},
    # SIGTERM / Ctrl-C remove the partial output file while it is written; set only where the default is in
    # force, in the main thread, and put back in a finally
    "spacy_elmo.output.embed_file": {"signal.signal"},
    # the quantized engine, which torch reads only when packing: set for one pack, under a lock, and put back
    "spacy_elmo.bilm.engine.int8": {"torch.backends.quantized.engine"},
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


def process_wide_changes(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each process-wide state change in ``source`` (:data:`PROCESS_WIDE_CALLS`, assignments to
    :data:`PROCESS_WIDE_TARGETS`); warning filters inside a ``with warnings.catch_warnings()`` block are scoped, and a
    call used as a ``with`` item (``with torch.set_grad_enabled(False):``) is too."""
    tree = ast.parse(source)
    aliases = import_aliases(tree)
    found = []

    def visit(node: ast.AST, scoped_warnings: bool) -> None:
        if isinstance(node, (ast.With, ast.AsyncWith)):
            items = [
                dotted_name(item.context_expr.func, aliases)
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
            name = dotted_name(node.func, aliases)
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
            name = dotted_name(target, aliases)
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


def test_no_registry_keyed_by_module_in_bilm():
    """Packs and engines live with the modules they serve (freed with the model), not in module-keyed globals;
    threads.py's set of objects to renew after fork is the one weak collection."""
    for name, path in MODULES.items():
        if name.startswith("spacy_elmo.bilm") and name != "spacy_elmo.bilm.threads":
            found = used_names(path) & {"WeakKeyDictionary", "WeakSet", "WeakValueDictionary"}
            assert not found, f"{name} keeps {sorted(found)}: hold state on the module (bilm/engine)"


def test_the_quantized_engine_setting_is_touched_in_one_place():
    """``torch.backends.quantized.engine`` is process-wide: only bilm/engine/int8.prepack sets it (where it must
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
    assert set(setters) == {"spacy_elmo.bilm.engine.int8"}, setters
