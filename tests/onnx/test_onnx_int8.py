"""``spacy-elmo export --precision int8``: quantized graphs, held to int8's bound against the torch float32 path, served
as int8 and only as int8."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX export needs the onnx package (pip install onnx)")
pytest.importorskip("onnxruntime", reason="the ONNX runner needs onnxruntime (pip install onnxruntime)")

import onnx

from spacy_elmo import load_bilm
from spacy_elmo.onnx import OnnxBiLM
from spacy_elmo.onnx import quantize as onnx_quantize
from spacy_elmo.onnx.graph import DIRECTIONS
from spacy_elmo.onnx.manifest import GRAPH_FILES, MANIFEST, TOKEN_ENCODER, exported_precision, read_manifest
from spacy_elmo.onnx.quantize import INT8_TOLERANCE
from spacy_elmo.output.onnx_export import OnnxExportError, export_onnx, layer_errors
from tests.bilm.test_precision import ORDINARY, wikitext_sentences
from tests.conftest import DATA_DIR, run_without_torch

WIKITEXT_TEST = DATA_DIR / "wikitext-2" / "test.txt"


@pytest.fixture(scope="module")
def int8_exports(tmp_path_factory, fixture_dir) -> dict[str, Path]:
    """The bundled default model and the AllenNLP fixture, exported in int8 once."""
    root = tmp_path_factory.mktemp("int8")
    folders = {"default": root / "default", "fixture": root / "fixture"}
    export_onnx("default", folders["default"], precision="int8")
    export_onnx(fixture_dir, folders["fixture"], precision="int8")
    return folders


def _manifest(folder: Path) -> dict:
    return json.loads((folder / MANIFEST).read_text(encoding="utf-8"))


def _ops(graph: onnx.GraphProto) -> set[str]:
    """The operator types of ``graph`` and of the graphs inside its nodes (Scan bodies)."""
    found = set()
    for node in graph.node:
        found.add(node.op_type)
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                found |= _ops(attribute.g)
    return found


@pytest.mark.parametrize("name", ["default", "fixture"])
def test_an_int8_export_loads_as_int8_and_records_it(int8_exports, name):
    folder = int8_exports[name]
    backend = load_bilm(folder)
    assert isinstance(backend.runner, OnnxBiLM) and backend.precision.name == "int8"
    manifest = _manifest(folder)
    assert manifest["precision"] == "int8" == exported_precision(read_manifest(folder)[0])
    check = manifest["verification"]
    assert check["tolerance"] == INT8_TOLERANCE
    assert 1e-4 < check["max_relative_error"] <= INT8_TOLERANCE  # really quantized, within its bound
    # the recurrent products too (inside the Scan bodies, in the Loop bodies); the token encoder stays float32
    # (quantize.KEPT_FLOAT32)
    for direction in DIRECTIONS:
        stack = onnx.load(folder / GRAPH_FILES[direction]).graph
        assert "MatMulInteger" in {n.op_type for n in stack.node}  # the input gates
        scans = [
            inner
            for loop in stack.node
            if loop.op_type == "Loop"
            for inner in loop.attribute[0].g.node
            if inner.op_type == "Scan"
        ]
        assert scans and all("MatMulInteger" in _ops(scan.attribute[0].g) for scan in scans)
    assert "MatMulInteger" not in _ops(onnx.load(folder / TOKEN_ENCODER).graph)
    assert load_bilm(folder, precision="auto") is backend and load_bilm(folder, precision="int8") is backend


def test_a_float32_export_records_float32_and_an_older_manifest_reads_as_float32(tmp_path, fixture_dir):
    folder = export_onnx(fixture_dir, tmp_path / "f32").folder
    manifest = _manifest(folder)
    assert manifest["precision"] == "float32" and manifest["verification"]["tolerance"] == 1e-5
    del manifest["precision"]  # as written before int8
    (folder / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    assert exported_precision(read_manifest(folder)[0]) == "float32"
    assert OnnxBiLM(folder, token_cache_size=0).precision.name == "float32"


def test_the_int8_error_on_real_sentences_is_within_the_documented_bound(int8_exports):
    """The bundled trained model on ordinary and WikiText-2 test sentences: each layer within INT8_TOLERANCE of its
    scale against the torch float32 path (measured about 0.04-0.06: benchmarks/RESULTS.md), and not float32."""
    # ordinary sentences (always there), then WikiText-2's first test sentences where the corpora are
    sentences = [text.split(" ") for text in ORDINARY]
    sentences += wikitext_sentences(WIKITEXT_TEST, 40, longest=60) if WIKITEXT_TEST.is_file() else []
    reference = load_bilm("default").embed(sentences)
    ours = load_bilm(int8_exports["default"]).embed(sentences)
    errors = layer_errors(ours, reference)
    assert errors[0] < 1e-5  # the token encoder is kept in float32
    assert 1e-3 < max(errors) <= INT8_TOLERANCE, errors
    cosines = []  # of the mixed vectors (the layers' mean) to float32's, per token
    for layers, exact in zip(ours, reference):
        a, b = layers.mean(0), exact.mean(0)
        cosines.append(float(((a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))).min()))
    assert min(cosines) > 0.99


def test_another_precision_than_the_folders_is_one_line_saying_what_to_do(int8_exports, tmp_path, fixture_dir):
    int8_folder = int8_exports["fixture"]
    with pytest.raises(ValueError, match=r"computes in int8 on ONNX Runtime; give precision=None \(or 'int8'\)") as err:
        load_bilm(int8_folder, precision="float32")
    assert "\n" not in str(err.value) and "--format onnx)" in str(err.value)
    files = {"options": int8_folder / MANIFEST, "weights": int8_folder / TOKEN_ENCODER}  # by its files, too
    with pytest.raises(ValueError, match="computes in int8"):
        load_bilm(**files, precision="float32")
    assert load_bilm(**files).precision.name == "int8"
    with pytest.raises(ValueError, match=r"computes in int8 .* load the model it was exported from for bfloat16"):
        load_bilm(int8_folder, precision="bfloat16")
    float32_folder = export_onnx(fixture_dir, tmp_path / "f32").folder
    with pytest.raises(ValueError, match=r"computes in float32 .* --precision int8\)") as err:
        load_bilm(float32_folder, precision="int8")
    assert "\n" not in str(err.value)


def test_a_wrongly_quantized_graph_is_refused_and_leaves_nothing(fixture_dir, tmp_path, monkeypatch):
    real = onnx_quantize.quantize_graph

    def off_scale(graph: bytes) -> bytes:
        """The quantized graph with its recurrent products' weight scales 1.5 times too large."""
        model = onnx.load_from_string(real(graph))
        loops = [node for node in model.graph.node if node.op_type == "Loop"]
        for node in (inner for loop in loops for inner in loop.attribute[0].g.node):
            if node.op_type == "Scan":
                for tensor in node.attribute[0].g.initializer:
                    if tensor.name.endswith("_scale"):
                        scaled = onnx.numpy_helper.to_array(tensor) * np.float32(1.5)
                        tensor.CopyFrom(onnx.numpy_helper.from_array(scaled, tensor.name))
        return model.SerializeToString()

    monkeypatch.setattr(onnx_quantize, "quantize_graph", off_scale)
    with pytest.raises(OnnxExportError, match=r"the int8 ONNX graphs differ from the torch float32 path by .* not"):
        export_onnx(fixture_dir, tmp_path / "out", precision="int8")
    assert list(tmp_path.iterdir()) == []


def test_int8_is_refused_at_float32s_bound(fixture_dir, tmp_path):
    """The check compares the quantized graphs, not the float32 ones: held to float32's bound, int8 fails."""
    with pytest.raises(OnnxExportError, match=r"int8 ONNX graphs differ .* more than the 1e-05 allowed"):
        export_onnx(fixture_dir, tmp_path / "out", precision="int8", tolerance=1e-5)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("precision", ["bfloat16", "auto", "double"])
def test_an_export_precision_other_than_float32_or_int8_is_refused_first(tmp_path, precision):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    with pytest.raises(OnnxExportError, match=r"an ONNX export computes in one of \['float32', 'int8'\]"):
        export_onnx("default", tmp_path / "taken", precision=precision)  # before the folder is even looked at


def test_the_export_command_takes_precision_int8(tmp_path, fixture_dir):
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    runner = CliRunner()
    done = runner.invoke(app, ["export", str(fixture_dir), str(tmp_path / "out"), "--precision", "int8"])
    assert done.exit_code == 0 and "(int8): checked against the torch float32 path" in done.output, done.output
    assert load_bilm(tmp_path / "out").precision.name == "int8"
    other = runner.invoke(app, ["export", str(fixture_dir), str(tmp_path / "other"), "--precision", "bfloat16"])
    assert other.exit_code == 2 and "an ONNX export computes in one of" in other.output, other.output
    assert not (tmp_path / "other").exists()


def test_quantizing_and_serving_int8_need_no_torch(int8_exports, tmp_path):
    """quantize_graph (onnx and onnxruntime only) and the int8 folder's runner, in a process where torch is refused."""
    folder = int8_exports["fixture"]
    done = run_without_torch(
        f"""
        import sys
        from pathlib import Path
        from spacy_elmo.onnx.quantize import quantize_graph
        from spacy_elmo import load_bilm
        graph = Path({str(folder / TOKEN_ENCODER)!r}).read_bytes()
        assert len(quantize_graph(graph)) > 0
        backend = load_bilm({str(folder)!r})
        assert backend.precision.name == "int8"
        assert backend.embed([["Hello", "world", "!"]])[0].shape[0] == 3
        assert not [m for m in sys.modules if m.split(".")[0] == "torch"]
        print("ok")
        """
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("ok")


def test_dask_leaves_auto_to_the_workers_for_an_export_folder(int8_exports):
    """A Dask client resolves "auto" on the CPU once for its workers (float32), but an export folder's "auto" is its
    own precision: sent as "auto", each worker loads the int8 folder as int8 instead of refusing float32."""
    pytest.importorskip("dask")
    from spacy_elmo.dask import _client_settings
    from spacy_elmo.runtime.features.front_settings import FrontSettings

    _, settings = _client_settings(str(int8_exports["fixture"]), FrontSettings(precision="auto"))
    assert (
        settings.precision == "auto" and load_bilm(int8_exports["fixture"], precision="auto").precision.name == "int8"
    )
    _, settings = _client_settings("default", FrontSettings(precision="auto"))
    assert settings.precision == "float32"
