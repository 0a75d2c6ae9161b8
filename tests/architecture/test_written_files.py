"""Files: nothing unpickled, every file written whole through one helper, file names spelled in one place
(ARCHITECTURE.md, "Nothing unpickled", "Files appear whole", "One source per setting")."""

import ast
import re

import pytest

from tests.architecture.arch_scan import (
    MODULES,
    dotted_name,
    import_aliases,
    imported_names,
)

TORCH_LOAD_ALLOWED = {"spacy_elmo.bilm.manylangs_reader"}


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

# modules that write files outside ``groundwork.atomic_write.atomic_path`` blocks, each with why the file still appears
# whole (or is not one a reader may take for complete): they rename by themselves, or write what their own rename
# publishes
WRITES_ALLOWED = {
    # the helper itself: the one rename of atomic_path
    "spacy_elmo.groundwork.atomic_write": "atomic_path's own rename",
    # the resumable .part (appended to, under a file lock, checked against its record before its rename), the
    # download records beside it and the unpacked-archive folders (renamed once complete, marked .complete)
    "spacy_elmo.sources.fetch": "the download store's .part files, records and archive folders",
    # the guarded HDF5 output: written under a hidden .partial name through write_guard, renamed once closed and
    # checked, removed on SIGTERM / Ctrl-C by its handler
    "spacy_elmo.output.embed_file": "the embedding file, written under a .partial name and renamed once complete",
    "spacy_elmo.output.write_guard": "opens embed_file's .partial file for it",
    # onnxruntime's quantizer reads and writes paths only: the graph goes through a private temporary folder that
    # nobody else reads and that is removed with it; the export writes the result through atomic_path
    "spacy_elmo.onnx.quantize": "the quantizer's input and output in its own temporary folder",
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
    name = dotted_name(func, aliases)
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
        isinstance(node, ast.Call)
        and dotted_name(node.func, aliases).rpartition(".")[2] in ("atomic_path", "atomic_paths")
        for node in ast.walk(expr)
    )


def _in_memory(expr: ast.AST, aliases: dict[str, str]) -> bool:
    return isinstance(expr, ast.Call) and dotted_name(expr.func, aliases) in ("io.BytesIO", "io.StringIO")


def unguarded_writes(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each file write in ``source`` that ``atomic_path`` does not guard.

    A write is guarded inside a ``with atomic_path(...)`` / ``with atomic_paths(...)`` block (or a later item of
    the same ``with``), when it writes to a name its function bound from ``atomic_path`` (``tmp =
    stack.enter_context(atomic_path(p))``), inside a function of :data:`WRITES_TO_A_GIVEN_TEMPORARY`, or when
    it writes to a buffer in memory (a name bound to ``io.BytesIO()``)."""
    tree = ast.parse(source)
    aliases = import_aliases(tree)
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
from ..groundwork.atomic_write import atomic_path, atomic_paths
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
    """Every file the package writes goes through ``groundwork.atomic_write.atomic_path`` (ARCHITECTURE.md, "Files
    appear whole"): no other module writes, copies or renames a file outside its blocks, except where WRITES_ALLOWED
    says why."""
    seen_allowed = set()
    for name, path in MODULES.items():
        for line, what in unguarded_writes(path.read_text(encoding="utf-8")):
            if name in WRITES_ALLOWED:
                seen_allowed.add(name)
                continue
            pytest.fail(f"{name}:{line} writes a file with {what} outside atomic_write.atomic_path: write through it")
    assert seen_allowed == set(WRITES_ALLOWED), f"allowed but writing nothing now: {set(WRITES_ALLOWED) - seen_allowed}"


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
    # state dicts, read only with torch.load(weights_only=True)): the folder's names in manylangs_files (torch-free,
    # for path resolution), the sample architectures in the reader
    "spacy_elmo.bilm.manylangs_files": {
        "config.json",
        "char.dic",
        "word.dic",
        "token_embedder.pkl",
        "encoder.pkl",
    },
    "spacy_elmo.bilm.manylangs_reader": {
        "cnn_50_100_512_4096_sample.json",
        "cnn_0_100_512_4096_sample.json",
    },
}
# names of a folder that one module owns, spelled by that module (the folders the package shares: file_names.py)
OWNED_FILE_NAMES = {
    "spacy_elmo.spacy.saved_model": {"model.json"},  # the spaCy component's saved model folder
    "spacy_elmo.spacy.adapt": {"adaptation.json", "train.txt", "dev.txt"},  # an adaptation's output folder
    "spacy_elmo.runtime.embedding.cache": {"embeddings.sqlite3"},  # the disk cache's folder
    "spacy_elmo.onnx.manifest": {"manifest.json"},  # an ONNX export folder (its graphs: .onnx, not a file-name pattern)
    "spacy_elmo": {"serving_requirements.txt"},  # the installed package's own folder (SERVING_REQUIREMENTS)
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
    """The names of the files this package writes or reads in the folders it shares (a model folder, a training run, a
    prepared corpus) are constants of groundwork/file_names.py; a folder that one module owns (an adaptation, the spaCy
    component's saved model, the disk cache) has its names spelled there (OWNED_FILE_NAMES); code elsewhere names them
    through those constants (messages and docstrings may mention them). A foreign format's names stay with the one
    module that reads it (FOREIGN_FILE_NAMES)."""
    file_names = MODULES["spacy_elmo.groundwork.file_names"]
    own = {name for _, name in file_name_literals(file_names.read_text(encoding="utf-8"))}
    assert {"options.json", "README.md", "corpus.json", "shard-{index:05d}.txt"} <= own  # sees them
    seen_foreign, seen_owned = {}, {}
    for name, path in MODULES.items():
        if name == "spacy_elmo.groundwork.file_names":
            continue
        for line, literal in file_name_literals(path.read_text(encoding="utf-8")):
            if literal in FOREIGN_FILE_NAMES.get(name, set()) and literal not in own:
                seen_foreign.setdefault(name, set()).add(literal)
                continue
            if literal in OWNED_FILE_NAMES.get(name, set()) and literal not in own:
                seen_owned.setdefault(name, set()).add(literal)
                continue
            pytest.fail(f"{name}:{line} spells the file name {literal!r}: name it in groundwork/file_names.py")
    assert seen_foreign == FOREIGN_FILE_NAMES, "FOREIGN_FILE_NAMES lists names no module spells any more"
    assert seen_owned == OWNED_FILE_NAMES, "OWNED_FILE_NAMES lists names no module spells any more"
