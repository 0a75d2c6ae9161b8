"""Every file format the package reads, damaged at random: each reader gives its format's one error (a ValueError
naming the file, on one line) or reads the file (a documented default, or the damage was harmless), never another
exception.

:data:`FORMATS` is the one list: each format's file, a valid file as the package writes it (or ships it, the bundled
model's), the readers of it, and the error they may give. A damage is one of: a field (at any depth) replaced by a
hostile value (another JSON type, null, NaN, infinity, a huge or negative number, a list or an object) or deleted,
the whole value replaced by one, the text truncated, or text that is not JSON. The rule at the end holds every JSON,
TSV or safetensors-header file name a module spells (``groundwork/file_names.py``, or the module that owns a folder)
to a schema: in ``bilm/file_formats.SCHEMAS`` or its module's ``FILE_SCHEMAS`` (or its ``WRITTEN_ONLY``).
"""

from __future__ import annotations

import ast
import importlib
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spacy_elmo.bilm.file_formats import SCHEMAS
from spacy_elmo.groundwork import file_names
from spacy_elmo.onnx.manifest import MANIFEST as ONNX_MANIFEST
from spacy_elmo.runtime.embedding.backend import DEFAULT_MODEL_DIR
from spacy_elmo.spacy.saved_model import COMPONENT_MODEL
from tests.architecture.arch_scan import MODULES
from tests.architecture.test_written_files import FOREIGN_FILE_NAMES

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "allennlp_elmo"

HOSTILE: list[Any] = [
    None,
    True,
    "x",
    "",
    "many",
    0,
    -1,
    -4,
    1e-30,
    10**30,
    -(10**30),
    1e308,
    math.nan,
    math.inf,
    -math.inf,
    [],
    [1, "a"],
    [{}],
    {},
    {"a": None},
    "w" * 5000,
]


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON value (the root too), as a tuple of keys and indices."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:4]):  # a long list's first items stand for the rest
            found += _paths(item, (*prefix, index))
    return found


def _replaced(value: Any, path: tuple, new: Any, delete: bool) -> Any:
    if not path:
        return new
    value = json.loads(json.dumps(value))  # a copy
    parent = value
    for key in path[:-1]:
        parent = parent[key]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return value


@st.composite
def damaged(draw: st.DrawFn, text: str) -> str:
    """``text`` (a JSON file's) damaged one way."""
    how = draw(st.sampled_from(["field", "field", "field", "delete", "truncate", "not json"]))
    if how == "truncate":
        return text[: draw(st.integers(0, len(text) - 1))]
    if how == "not json":
        return draw(st.sampled_from(["", "{", "[1, 2", "nul", "{'a': 1}", '{"a": 1}}', "\x00\x01", "[" * 5000]))
    value = json.loads(text)
    path = draw(st.sampled_from(_paths(value)))
    return json.dumps(_replaced(value, path, draw(st.sampled_from(HOSTILE)), how == "delete"), allow_nan=True)


@st.composite
def damaged_lines(draw: st.DrawFn, text: str) -> str:
    """``text`` (a TSV file's) with a line damaged, or truncated."""
    lines = text.splitlines(keepends=True)
    if draw(st.booleans()):
        return text[: draw(st.integers(0, len(text) - 1))]
    index = draw(st.integers(0, len(lines) - 1))
    word, _, count = lines[index].rstrip("\n").partition("\t")
    broken = [f"{word}\n", f"{word}\t\n", f"\t{count}\n", f"{word}\t-1\n", f"{word}\t1.5\n", f"{word}\t²\n"]
    broken += [f"{word}\t{'9' * 5000}\n", f"{word}\t{count} {count}\n", f"{word} {count}\n"]
    lines[index] = draw(st.sampled_from(broken))
    return "".join(lines)


# -- the formats: a valid file, its readers ------------------------------------------------------------------------


@dataclass
class Format:
    name: str  # the file's name (groundwork/file_names.py, or the module that owns its folder)
    make: Callable[[Path], Path]  # writes a valid file (and what its readers need beside it) into a folder
    damage: Callable[[str], st.SearchStrategy[str]]  # damages its text (a header's JSON part for safetensors)
    read: Callable[[Path], None]  # every reader, in turn, of the folder's file
    errors: tuple[type[Exception], ...] = (ValueError,)
    header: bool = False  # the JSON part of a safetensors file's header


def _model_folder(folder: Path) -> None:
    shutil.copyfile(FIXTURE / "options.json", folder / "options.json")
    shutil.copyfile(FIXTURE / "lm_weights.hdf5", folder / "lm_weights.hdf5")


def _make_metrics(folder: Path) -> Path:
    _model_folder(folder)
    return Path(shutil.copyfile(DEFAULT_MODEL_DIR / "metrics.json", folder / "metrics.json"))


def _read_metrics(path: Path) -> None:
    from spacy_elmo.cli import model_table
    from spacy_elmo.cli.model_info import describe
    from spacy_elmo.train.output_folder import model_card, stages
    from spacy_elmo.train.run import init_from
    from spacy_elmo.train.run.evaluation import trained_max_length

    folder = path.parent
    text = describe(folder / "options.json", folder / "lm_weights.hdf5")  # informational: never fails on it
    assert "architecture:" in text
    model_table._metrics(path)  # the models table: the row says less
    for reader in (
        lambda: stages.earlier_stages(folder),
        lambda: init_from.previous_training(folder),
        lambda: trained_max_length(folder),
        lambda: model_card.check_card_metrics(model_card.read_metrics(path), path),
    ):
        _reads_or_names(reader, path)


def _make_softmax(folder: Path) -> Path:
    import torch

    from spacy_elmo.train.output_folder.storage import save_softmax

    torch.manual_seed(0)
    save_softmax(torch.nn.AdaptiveLogSoftmaxWithLoss(8, 20, [5, 10], div_value=2.0), folder / "softmax.safetensors")
    return folder / "softmax.safetensors"


def _read_softmax(path: Path) -> None:
    import torch

    from spacy_elmo.train.output_folder.storage import load_softmax, load_softmax_into

    saved = load_softmax(path)
    saved.check_fits(path, 20, 8)  # the model's vocabulary and width, as evaluate and --init-from check them
    module = torch.nn.AdaptiveLogSoftmaxWithLoss(8, 20, saved.cutoffs, div_value=saved.div_value)
    load_softmax_into(module, saved, path)


def _make_checkpoint(folder: Path) -> Path:
    import torch

    from spacy_elmo.train.output_folder.storage import save_checkpoint

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    info = {
        "config": {"lr": 0.001},
        "vocab": ["<S>", "</S>", "<UNK>", "the"],
        "state": {"step": 1, "epoch": 0, "batch_in_epoch": 1, "words_seen": 5, "train_seconds": 0.5},
        "metrics": {"corpus": {}, "evaluations": [], "epochs": []},
        "best_valid": None,
    }
    path = folder / "checkpoint.safetensors"
    save_checkpoint(path, model.state_dict(), optimizer.state_dict(), torch.get_rng_state(), info)
    return path


def _read_checkpoint(path: Path) -> None:
    from spacy_elmo.train.output_folder.storage import load_checkpoint

    load_checkpoint(path)


def _make_corpus(folder: Path) -> Path:
    from spacy_elmo.train.corpus.prepare import SourceSpec, prepare_corpus

    text = folder.parent / f"{folder.name}-text.txt"
    text.write_text("the cat sat .\nthe dog ran on the mat .\na cat .\n" * 3, encoding="utf-8")
    prepare_corpus(folder, [SourceSpec(text)], shard_sentences=4, progress=False)
    return folder / "corpus.json"


def _read_corpus(path: Path) -> None:
    from spacy_elmo.train.corpus.shards import PreparedCorpus

    corpus = PreparedCorpus([path.parent])
    list(corpus.word_counts())
    corpus.sources()


def _make_counts(folder: Path) -> Path:
    return _make_corpus(folder).parent / "counts.tsv"


def _make_source_info(folder: Path) -> Path:
    path = folder / "source-info.json"
    path.write_text(json.dumps({"repository": "https://example.org/text", "licence": "CC0", "commit": "abc"}))
    return path


def _read_source_info(path: Path) -> None:
    from spacy_elmo.train.corpus.prepare import read_source_info

    read_source_info(path, path.parent)


def _make_component_model(folder: Path) -> Path:
    path = folder / "model.json"
    saved = {"source": "remote", "model": "https://example.org/elmo.tar.gz", "fingerprint": "ab"}
    path.write_text(json.dumps({**saved, "files_fingerprint": "cd", "spacy_elmo_version": "1.0"}))
    return path


class _Component:
    """What loading a saved component's model description needs of the component: its name and use_model."""

    name = "elmo"

    def use_model(self, path: str, pin: Any) -> None:
        assert isinstance(path, str)


def _read_component_model(path: Path) -> None:
    from spacy_elmo.spacy.saved_model import load_model_dir

    load_model_dir(_Component(), path.parent)  # type: ignore[arg-type]


def _make_options(folder: Path) -> Path:
    return Path(shutil.copyfile(DEFAULT_MODEL_DIR / "options.json", folder / "options.json"))


def _read_options(path: Path) -> None:
    from spacy_elmo.bilm.weights import read_options
    from spacy_elmo.train.network.presets import build_options

    for reader in (lambda: read_options(path), lambda: build_options(path)):  # a model's, and train --arch FILE
        _reads_or_names(reader, path)


def _make_onnx_manifest(folder: Path) -> Path:
    """An ONNX export of the fixture biLM (its manifest.json; the graphs beside it)."""
    pytest.importorskip("onnx", reason="the ONNX export needs the onnx package (pip install onnx)")
    pytest.importorskip("onnxruntime", reason="the ONNX runner needs onnxruntime (pip install onnxruntime)")
    from spacy_elmo.output.onnx_export import export_onnx

    folder.rmdir()  # the export writes the folder whole
    export_onnx(FIXTURE, folder)
    return folder / ONNX_MANIFEST


def _read_onnx_manifest(path: Path) -> None:
    from spacy_elmo.onnx import OnnxBiLM

    _reads_or_names(lambda: OnnxBiLM(path.parent, token_cache_size=0), path)


FORMATS = [
    Format(file_names.OPTIONS, _make_options, damaged, _read_options),
    Format(file_names.METRICS, _make_metrics, damaged, _read_metrics),
    Format(file_names.SOFTMAX, _make_softmax, damaged, _read_softmax, header=True),
    Format(file_names.CHECKPOINT, _make_checkpoint, damaged, _read_checkpoint, header=True),
    Format(file_names.CORPUS_MANIFEST, _make_corpus, damaged, _read_corpus),
    Format(file_names.CORPUS_COUNTS, _make_counts, damaged_lines, _read_corpus),
    Format(file_names.SOURCE_INFO, _make_source_info, damaged, _read_source_info),
    Format(COMPONENT_MODEL, _make_component_model, damaged, _read_component_model),
    Format(ONNX_MANIFEST, _make_onnx_manifest, damaged, _read_onnx_manifest),
]


def _reads_or_names(reader: Callable[[], Any], path: Path, errors: tuple[type[Exception], ...] = (ValueError,)) -> None:
    """``reader()`` reads the file, or raises one of ``errors`` whose message is one line naming the file."""
    try:
        reader()
    except errors as err:
        message = str(err)
        assert path.name in message and "\n" not in message, message
        assert len(message) < 600, message


def _header_json(path: Path) -> str:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as handle:
        return handle.metadata()["json"]


def _write_header_json(path: Path, text: str) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(path), "pt") as handle:
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 (safe_open is not iterable)
        metadata = {**handle.metadata(), "json": text}
    save_file(tensors, str(path), metadata=metadata)


@pytest.mark.parametrize("form", FORMATS, ids=[f.name for f in FORMATS])
def test_every_reader_names_a_damaged_file_or_reads_it(form: Format, tmp_path_factory):
    folder = tmp_path_factory.mktemp("valid") / "folder"
    folder.mkdir()
    path = form.make(folder)
    valid = _header_json(path) if form.header else path.read_text(encoding="utf-8")
    form.read(path)  # the valid file reads without an error

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        text = data.draw(form.damage(valid))
        if form.header:
            _write_header_json(path, text)
        else:
            path.write_text(text, encoding="utf-8")
        _reads_or_names(lambda: form.read(path), path, form.errors)

    check()


STRUCTURED = (".json", ".tsv", ".safetensors")


def spelled_file_names(source: str) -> set[str]:
    """The file names a module spells as its own constants (``NAME = "model.json"``, at module level)."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id.isupper() for t in targets) and isinstance(node.value.value, str):
                names.add(node.value.value)
    return names


def test_the_file_name_scan_sees_module_constants():
    """Guards the rule below: a module's constant is found, a local, a lowercase name or an f-string is not."""
    source = 'META = "model.json"\nKIND: str = "counts.tsv"\nother = "x.json"\ndef f():\n    LOCAL = "y.json"\n'
    assert spelled_file_names(source) == {"model.json", "counts.tsv"}


def test_every_file_the_package_reads_has_a_schema():
    """A new JSON, TSV or safetensors file name cannot skip a schema (nor a written-only one be left unsaid), in
    groundwork/file_names.py or in any module that names its own folder's files."""
    schemas, written_only, structured = dict(SCHEMAS), set(), set()
    for name, path in MODULES.items():
        names = {
            n
            for n in spelled_file_names(path.read_text(encoding="utf-8"))
            if n.endswith(STRUCTURED) and "/" not in n and n not in FOREIGN_FILE_NAMES.get(name, set())
        }
        if not names:
            continue
        structured |= names
        module = importlib.import_module(name)
        schemas.update(getattr(module, "FILE_SCHEMAS", {}))
        written_only |= getattr(module, "WRITTEN_ONLY", frozenset())
    assert {file_names.OPTIONS, file_names.CHECKPOINT, COMPONENT_MODEL} <= structured  # the scan sees them
    hint = "add the format's schema to bilm/file_formats.SCHEMAS or its module's FILE_SCHEMAS"
    assert structured - written_only == set(schemas), hint
    assert structured >= written_only
    assert {form.name for form in FORMATS} == set(schemas), "add the format to FORMATS, with its readers"
