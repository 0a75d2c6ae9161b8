"""The front ends and the shared backend import without torch: torch is the torch runner's
(runtime/embedding/torch_runner.py), imported when a model is opened on it, and the fine-tuning layer's, so that another
runner can serve the same front ends where torch is not installed.

Two checks: every listed module imports in a process that refuses ``torch`` (what really runs), and the modules that
stand between a front end and a runner have no ``import torch`` of their own at module level (where a new one would
first appear).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.architecture.arch_scan import MODULES, PACKAGE
from tests.conftest import REFUSE_TORCH

REPOSITORY = PACKAGE.parent

# what must import without torch: the package, its front ends' entry points, the shared backend and what it stands on
TORCH_FREE = (
    "spacy_elmo",
    "spacy_elmo.sklearn",
    "spacy_elmo.hub",
    "spacy_elmo.similarity",
    "spacy_elmo.spacy",
    "spacy_elmo.spacy.architectures",
    "spacy_elmo.spacy.pipeline_component",
    "spacy_elmo.spacy.hooks",
    "spacy_elmo.spacy.saved_model",
    "spacy_elmo.spacy.mix_layer",
    "spacy_elmo.spacy.extensions",
    "spacy_elmo.spacy.adapt",
    "spacy_elmo.output.embed_file",
    "spacy_elmo.output.cluster",
    "spacy_elmo.runtime.embedding.backend",
    "spacy_elmo.runtime.embedding.runner",
    "spacy_elmo.runtime.embedding.cache",
    "spacy_elmo.runtime.embedding.windows",
    "spacy_elmo.sources.model_paths",
    "spacy_elmo.sources.pinned_model",
    "spacy_elmo.groundwork.fork_safety",
    *sorted(
        name for name in MODULES if name.startswith(("spacy_elmo.runtime.features", "spacy_elmo.runtime.configuration"))
    ),
)

# the modules with no module-level ``import torch`` of their own: the backend and its parts, the runner's Protocol, the
# front ends' entry points
NO_TORCH_IMPORT = (
    "spacy_elmo.runtime.embedding.backend",
    "spacy_elmo.runtime.embedding.windows",
    "spacy_elmo.runtime.embedding.cache",
    "spacy_elmo.runtime.embedding.runner",
    "spacy_elmo.sklearn",
    "spacy_elmo.spacy.pipeline_component",
)

# run in a fresh interpreter: a finder first on the meta path refuses torch (as if it were not installed), then each
# module is imported; prints {module: error} for those that fail
REFUSING_TORCH = (
    REFUSE_TORCH
    + """
import importlib, json, traceback
failed = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException as err:
        frames = traceback.extract_tb(err.__traceback__)
        chain = " > ".join(f"{f.filename}:{f.lineno}" for f in frames if "spacy_elmo" in f.filename)
        failed[name] = f"{type(err).__name__}: {err} ({chain})"
print(json.dumps({"failed": failed, "torch": "torch" in sys.modules}))
"""
)


def imports_without_torch(names: tuple[str, ...], root: Path = REPOSITORY) -> dict[str, object]:
    """``{"failed": {module: error}, "torch": loaded}`` of importing ``names`` from ``root`` where torch is refused."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-c", REFUSING_TORCH, *names], capture_output=True, text=True, cwd=root, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def test_the_refusal_stops_a_module_that_imports_torch():
    """Guards the check below: torch itself, and a module of the package that imports it at the top, fail there."""
    report = imports_without_torch(("torch", "spacy_elmo.runtime.embedding.torch_runner", "json"))
    assert set(report["failed"]) == {"torch", "spacy_elmo.runtime.embedding.torch_runner"}  # type: ignore[arg-type]


@pytest.mark.slow
def test_front_ends_and_backend_import_without_torch():
    """Importing the package, scikit-learn's and spaCy's front ends (the ``elmo`` factory and the registered
    architectures), the backend, its caches and windows, the model paths and runtime's features and configuration
    needs no torch."""
    assert all(name in MODULES for name in TORCH_FREE), [name for name in TORCH_FREE if name not in MODULES]
    report = imports_without_torch(TORCH_FREE)
    assert not report["failed"], report["failed"]
    assert not report["torch"]


def module_level_imports(tree: ast.Module) -> list[ast.stmt]:
    """The import statements run when a module is imported: outside functions and ``if TYPE_CHECKING:`` blocks."""
    found: list[ast.stmt] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(ast.Module(body=[other], type_ignores=[]))
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            visit(child)

    visit(tree)
    return found


def torch_imports(source: str) -> list[int]:
    """Lines of a module's module-level imports of torch (``import torch``, ``from torch import nn``, ...)."""

    def is_torch(name: str) -> bool:
        return name == "torch" or name.startswith("torch.")

    def imports_torch(node: ast.stmt) -> bool:
        if isinstance(node, ast.Import):
            return any(is_torch(alias.name) for alias in node.names)
        return isinstance(node, ast.ImportFrom) and not node.level and is_torch(node.module or "")

    return [node.lineno for node in module_level_imports(ast.parse(source)) if imports_torch(node)]


def test_the_torch_import_scan_sees_module_level_imports():
    """Guards the check below: imports at the top, in a class or a ``try`` are found; those in functions and under
    ``TYPE_CHECKING`` are not."""
    source = """
import numpy, torch
from torch import nn
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import torch.nn
try:
    import torch.cuda
except ImportError:
    pass
def f():
    import torch
class A:
    from torch.nn import functional
from .torch_runner import TorchRunner
"""
    assert torch_imports(source) == [2, 3, 8, 14]


def test_the_backend_and_front_end_entry_points_import_no_torch():
    """No module-level ``import torch`` in the backend, its windows and caches, the runner Protocol, the
    scikit-learn front end and the spaCy component: torch is the torch runner's, chosen in backend.open_runner."""
    found = {name: lines for name in NO_TORCH_IMPORT if (lines := torch_imports(MODULES[name].read_text("utf-8")))}
    assert not found, f"module-level torch imports (line numbers): {found}"
    assert torch_imports(MODULES["spacy_elmo.runtime.embedding.torch_runner"].read_text("utf-8"))  # sees the runner's


# in a process that refuses torch: the backend around a numpy runner (the Protocol's shape, vectors from the tokens'
# lengths) embeds through windows.embed_segments: caches, repeated sentences, an empty one, the retry in halves
NUMPY_RUNNER = (
    REFUSE_TORCH
    + """
from pathlib import Path
import numpy as np
from spacy_elmo.bilm.engine.precisions import precision
from spacy_elmo.runtime.embedding.backend import ElmoBackend
from spacy_elmo.runtime.embedding.windows import embed_segments

class Tokens(dict):
    max_tokens = 100
    def clear(self):
        super().clear()

class NumpyRunner:
    n_layers, dim, device_name, precision = 2, 4, "cpu", precision("float32")
    small_work_threads = 1
    def __init__(self):
        self.token_cache, self.batches = Tokens(), []
    def layers(self, batch):
        self.batches.append(len(batch))
        if len(batch) > 2:
            raise MemoryError("out of memory (a test)")
        return [np.full((3, len(t), 4), len(t[0]), dtype=np.float32) for t in batch]
    def after_fork(self):
        self.token_cache.clear()
    def is_out_of_memory(self, err):
        return isinstance(err, MemoryError)
    def free_memory(self):
        pass
    def describe(self):
        return "kernels: numpy"

model = Path(sys.argv[1])
runner = NumpyRunner()
backend = ElmoBackend.on_runner(runner, model / "options.json", model / "lm_weights.hdf5")
sentences = [["a", "bank"], ["river"], ["a", "bank"], [], ["long", "words", "here"], ["xy"]]
import warnings
with warnings.catch_warnings(record=True):
    warnings.simplefilter("always")
    out = dict(embed_segments(backend, enumerate(sentences)))
assert [out[i].shape for i in range(6)] == [(3, 2, 4), (3, 1, 4), (3, 2, 4), (3, 0, 4), (3, 3, 4), (3, 1, 4)], out
assert out[4][0, 0, 0] == 4 and out[0] is not out[2]
assert runner.batches[0] == 4 and max(runner.batches[1:]) <= 2, runner.batches  # 4 unique sentences, then halves
again = backend.embed([["river"]])  # from the memory cache
assert runner.batches[-1] <= 2 and again[0][0, 0, 0] == 5
assert backend.n_layers == 2 and backend.dim == 4 and backend.fingerprint and "cpu" in repr(backend)
assert "torch" not in sys.modules
print("ok")
"""
)


def test_the_backend_embeds_on_a_runner_without_torch(fixture_dir):
    """The backend's own work (caches, repeated sentences, length batches, halving on out of memory, windows) needs
    nothing of torch: a runner of numpy arrays serves it in a process that refuses torch."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPOSITORY), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-c", NUMPY_RUNNER, str(fixture_dir)],
        capture_output=True,
        text=True,
        cwd=REPOSITORY,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr
