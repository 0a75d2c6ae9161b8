"""The inference engines: precision and kernels chosen only by them, one time loop, one attribute on a module
(ARCHITECTURE.md, "Inference engines", "One chooser", "What the CPU runs natively is probed in one place")."""

import ast
from pathlib import Path

from tests.architecture.arch_scan import (
    MODULES,
    dotted_name,
    import_aliases,
    used_names,
)

PRECISION_BLIND = (
    "spacy_elmo.bilm.inference",
    "spacy_elmo.bilm.model",
    "spacy_elmo.bilm.lstm",
    "spacy_elmo.bilm.encoder",
    "spacy_elmo.bilm.vocab_cache",
    "spacy_elmo.bilm.engine.step_loop",
    "spacy_elmo.bilm.engine.contract",
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
    pack's kind per product. (cpu_support reports what this CPU runs; the engines choose: see below.)"""
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


# the kernel libraries a product may run on (torch's quantized engines, float32's GEMMs), by the names a choice
# between them spells, and the torch operators and settings that pack or multiply through one of them
KERNEL_NAMES = {"fbgemm", "onednn", "qnnpack", "x86", "mkl", "mkldnn"}
KERNEL_APIS = ("torch.ops.quantized", "torch.ops.mkldnn", "torch.ops.mkl", "torch.backends.quantized")


def kernel_uses(source: str) -> list[int]:
    """Lines of ``source`` that name a kernel library as a value (``"fbgemm"``, ``== "onednn"``) or pack / multiply
    through one (``torch.ops.quantized.*``, ``torch.ops.mkldnn.*``, ``torch.ops.mkl.*``,
    ``torch.backends.quantized.*``): what choosing kernels, or running a chosen one, looks like. A setting's name
    that only contains one (``"ONEDNN_MAX_CPU_ISA"``, oneDNN's own bf16 query through ``probe.feature``) is no
    choice."""
    tree = ast.parse(source)
    aliases = import_aliases(tree)
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower() in KERNEL_NAMES:
            lines.add(node.lineno)
        elif isinstance(node, ast.Attribute):
            name = dotted_name(node, aliases)
            if any(name == api or name.startswith(api + ".") for api in KERNEL_APIS):
                lines.add(node.lineno)
    return sorted(lines)


def test_the_kernel_scan_sees_choices_and_kernel_calls():
    source = """
import os
import torch
ENGINE = "fbgemm"
def choose(vendor):
    return "onednn" if vendor == "AuthenticAMD" else "mkl"
def pack(w):
    return torch.ops.mkldnn._reorder_linear_weight(w, 32)
def probe():
    torch.backends.quantized.engine = ENGINE
def facts():
    return os.environ.get("ONEDNN_MAX_CPU_ISA"), torch.backends.mkldnn.is_available(), feature(torch, "ops.mkldnn.q")
"""
    assert kernel_uses(source) == [4, 6, 8, 10]


def test_only_the_engines_choose_kernels():
    """Which library serves which product (int8's fbgemm or oneDNN per role, float32's oneDNN or MKL, the packs
    training takes) is chosen, and run, only in the engine families' files (bilm/engine/): every other module of the
    package, cpu_support included (it reports what this CPU runs, never which kernel takes a product), names no
    kernel library and calls none of torch's kernel-specific operators; it asks the family."""
    assert kernel_uses(MODULES["spacy_elmo.bilm.engine.int8"].read_text(encoding="utf-8"))  # it sees the families
    outside = {
        name: found
        for name, path in MODULES.items()
        if not name.startswith("spacy_elmo.bilm.engine") and (found := kernel_uses(path.read_text(encoding="utf-8")))
    }
    assert not outside, f"modules that choose or run kernels outside bilm/engine (module: lines): {outside}"


# -- the engines: one time loop, each family's cost model in its own file, one attribute on a module ---------

ENGINE_MODULES = sorted(name for name in MODULES if name.startswith("spacy_elmo.bilm.engine"))
GATE_MATH = {"cell_step", "cell_update", "sigmoid", "sigmoid_", "tanh", "tanh_"}  # what a step of an LSTM computes


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


def test_the_engines_keep_one_attribute_on_a_module():
    """Engine, int8 mark and released packs live in one ``ModuleState`` (``engine/contract.py``): no other module of
    the package reads or writes a module's ``__dict__``."""
    touching = {
        name
        for name, path in MODULES.items()
        if any(
            isinstance(node, ast.Attribute) and node.attr == "__dict__"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )
    }
    assert touching == {"spacy_elmo.bilm.engine.contract"}, touching


# the functions that compute an LSTM cell's gates and cell, each with why it is its own copy (written beside it):
# the reference, the inference loop's in-place / TorchScript form, training's form that stores its derivatives
CELL_ARITHMETIC = {
    ("spacy_elmo.bilm.lstm", "cell_step"),  # the reference: every other copy is tested equal to it
    ("spacy_elmo.bilm.engine.step_loop", "cell_update"),
    ("spacy_elmo.train.network.packed_lstm", "_forward"),
}


def cell_arithmetic(source: str) -> list[str]:
    """The functions of ``source`` that call both a sigmoid and a tanh (in any spelling: ``torch.tanh``,
    ``sigmoid_``, a helper named for either): an LSTM cell's gate math. A helper named for tanh (tanh through a
    sigmoid) is not."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and "tanh" not in function.name:
            called = {
                node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                for node in ast.walk(function)
                if isinstance(node, ast.Call)
            }
            sigmoid = any("sigmoid" in name and "tanh" not in name for name in called)
            if sigmoid and any("tanh" in name for name in called):
                found.append(function.name)
    return found


def test_the_cell_scan_sees_gate_math():
    source = """
def step(g, c):
    return torch.sigmoid(g) * _tanh_from_sigmoid_(c)
def gate(x):
    return torch.sigmoid(x)
def choose(x):
    return use_sigmoid_tanh(x.device)
def _tanh(x):
    return _tanh_from_sigmoid_(torch.mul(x, 2).sigmoid_())
"""
    assert cell_arithmetic(source) == ["step"]


def test_the_cell_arithmetic_has_one_reference_and_two_tested_copies():
    """lstm.cell_step is the cell's arithmetic; the inference loop's and training's copies (CELL_ARITHMETIC) are
    tested equal to it (tests/bilm/test_inference_path.py, tests/train/test_train_packed_lstm.py); no other function
    computes gates, so a new path calls one of them."""
    found = {(name, function) for name, path in MODULES.items() for function in cell_arithmetic(path.read_text())}
    assert found == CELL_ARITHMETIC


# what deciding between the reference and the inference path reads: only bilm/model.py's needs_autograd may
AUTOGRAD_QUESTIONS = {"needs_autograd", "is_grad_enabled", "is_inference_mode_enabled", "requires_grad", "grad_fn"}
BELOW_THE_CHOOSER = ("spacy_elmo.bilm.lstm", "spacy_elmo.bilm.encoder", "spacy_elmo.bilm.inference")


def test_one_chooser_between_the_reference_and_the_inference_path():
    """Only bilm/model.py asks whether autograd is needed: the reference path (lstm.py, encoder.py), the inference
    path and the engines below it never look (a keyword such as ``requires_grad=False`` is no question)."""
    assert used_names(MODULES["spacy_elmo.bilm.model"]) & AUTOGRAD_QUESTIONS  # the check sees what it looks for
    for name in [*BELOW_THE_CHOOSER, *ENGINE_MODULES]:
        asked = used_names(MODULES[name]) & AUTOGRAD_QUESTIONS
        assert not asked, f"{name} asks {sorted(asked)}: bilm/model.py is the one chooser"


# -- the runtimes: ONNX known in one room ------------------------------------------------------------------------

ONNX_LIBRARIES = {"onnx", "onnxruntime"}


def onnx_imports(source: str) -> list[int]:
    """Lines of ``source`` that import ONNX's libraries (``onnx``, ``onnxruntime``, any submodule), lazy ones too."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if any(name.split(".")[0] in ONNX_LIBRARIES for name in names):
            lines.append(node.lineno)
    return lines


def test_only_the_onnx_room_knows_onnx():
    """ONNX is one runtime among the backend's runners: only spacy_elmo/onnx/ (the graphs, the manifest, the runner)
    imports ``onnx`` or ``onnxruntime``; the export (output/), the backend's runner choice and the front ends ask
    it, so another runtime is another room and one branch of ``backend.open_runner``."""
    assert onnx_imports("def f():\n    import onnxruntime as ort\n    from onnx import helper\n") == [2, 3]
    assert onnx_imports(MODULES["spacy_elmo.onnx.runner"].read_text(encoding="utf-8"))  # it sees the room's
    outside = {
        name: found
        for name, path in MODULES.items()
        if not name.startswith("spacy_elmo.onnx") and (found := onnx_imports(path.read_text(encoding="utf-8")))
    }
    assert not outside, f"modules outside spacy_elmo/onnx/ that import ONNX's libraries (module: lines): {outside}"
