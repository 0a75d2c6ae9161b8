"""Threads in one place, and every size threshold where its table says: thread thresholds in bilm/threads.py,
each engine family's cost model in its own file (ARCHITECTURE.md, "Threads only in bilm/threads.py", "Size
thresholds where the table says")."""

import ast
import fnmatch
import re
from pathlib import Path

from tests.architecture.arch_scan import (
    MODULES,
    used_names,
)

# names that start, limit or read threads: pools, thread-count settings, and the thread count itself (a choice
# made from it, e.g. tanh's form or a split onto the pool, is a thread decision)
THREAD_NAMES = {
    "ThreadPoolExecutor",
    "set_num_threads",
    "set_num_interop_threads",
    "get_num_threads",
    "omp_set_num_threads",
    "MKL_Set_Num_Threads_Local",
    "set_process_threads",  # threads.py's one setter of torch's process-wide count
}
# module pattern (fnmatch) -> the thread names it may use, and why
THREADS_ALLOWED = {
    "spacy_elmo.bilm.threads": THREAD_NAMES,
    # the one pool class (started on first use, anew in a forked child), torch-free so that the ONNX runner's second
    # direction thread starts from it too; bilm/threads.py decides torch's pools and counts
    "spacy_elmo.groundwork.fork_safety": {"ThreadPoolExecutor"},
    # the commands' own processes set the count through threads.set_process_threads, never torch's call itself:
    "spacy_elmo.cli.vector_commands": {"set_process_threads"},  # `embed --threads N`: the user asked for it
    "spacy_elmo.cli.train_commands": {"set_process_threads"},  # `adapt --threads N`: the user asked for it
    # `spacy-elmo train`'s runner, in the command's own processes: --threads, or the cores shared out between them
    "spacy_elmo.train.run.launch": {"set_process_threads"},
    # an engine's cost model may depend on the thread count (which rows MKL's packs serve): kernels are its choice
    "spacy_elmo.bilm.engine.*": {"get_num_threads"},
}


def misplaced_thread_names(name: str, names: set[str]) -> set[str]:
    """The thread names of ``names`` that module ``name`` may not use."""
    allowed = set().union(*(a for pattern, a in THREADS_ALLOWED.items() if fnmatch.fnmatchcase(name, pattern)))
    return (names & THREAD_NAMES) - allowed


def test_the_thread_scan_sees_misplaced_thread_names():
    """Guards the check below: reading the thread count outside threads.py and the engines is found."""
    assert misplaced_thread_names("spacy_elmo.bilm.inference", {"torch", "get_num_threads"}) == {"get_num_threads"}
    assert misplaced_thread_names("spacy_elmo.bilm.engine.mkl", {"get_num_threads"}) == set()
    assert misplaced_thread_names("spacy_elmo.cli.vector_commands", {"set_process_threads", "ThreadPoolExecutor"}) == {
        "ThreadPoolExecutor"
    }
    # a second place that sets torch's count itself, beside threads.set_process_threads, is found
    assert misplaced_thread_names("spacy_elmo.train.run.launch", {"torch", "set_num_threads"}) == {"set_num_threads"}
    assert misplaced_thread_names("spacy_elmo.runtime.embedding.backend", {"set_process_threads"}) == {
        "set_process_threads"
    }


def test_threads_are_started_limited_and_read_only_in_bilm_threads():
    """Thread pools, thread-count settings and choices made from the thread count live in bilm/threads.py; only the
    commands' own processes (cli/'s commands, train/run/launch.py) set torch's process-wide count, through its one
    setter (threads.set_process_threads), and the engines may read it for their cost models."""
    assert THREAD_NAMES & used_names(MODULES["spacy_elmo.bilm.threads"])  # the check sees what it looks for
    for name, path in MODULES.items():
        misplaced = misplaced_thread_names(name, used_names(path))
        assert not misplaced, (
            f"{name} uses {sorted(misplaced)}: thread pools, limits and counts belong in bilm/threads.py"
        )


def test_torchs_thread_count_is_set_in_one_place():
    """torch's process-wide thread count has one setter (bilm/threads.set_process_threads: one call of
    ``torch.set_num_threads``, none of ``set_num_interop_threads``); the commands call it, no module beside it."""
    setters = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called in ("set_num_threads", "set_num_interop_threads"):
                    setters.append(f"{name}:{node.lineno}")
    assert len(setters) == 1 and setters[0].startswith("spacy_elmo.bilm.threads:"), (
        f"torch's thread count is set at {setters}: only bilm/threads.set_process_threads sets it"
    )


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
    # the ONNX runner's char CNN in length buckets, as the encoder's (torch-free, so it cannot import that one)
    "spacy_elmo.onnx.runner": frozenset({"BUCKET_ROWS"}),
    # the training softmax's memory blocking (rows of logits per cache-sized block): no thread or kernel choice
    "spacy_elmo.train.network.target_log_prob": frozenset({"BLOCK_ELEMENTS"}),
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
    "spacy_elmo.bilm.engine.contract": {"gate_chunk_elements"},  # the default every engine inherits
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
