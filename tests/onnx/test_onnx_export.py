"""The ONNX export and its torch-free runner: the same layers as the torch float32 path, whatever the batch."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX export needs the onnx package (pip install onnx)")
pytest.importorskip("onnxruntime", reason="the ONNX runner needs onnxruntime (pip install onnxruntime)")

import h5py
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spacy_elmo import load_bilm
from spacy_elmo.onnx import OnnxBiLM, OnnxFolderError
from spacy_elmo.onnx import graph as onnx_graph
from spacy_elmo.onnx.manifest import GRAPH_FILES, MANIFEST, TOKEN_ENCODER
from spacy_elmo.output.onnx_export import OnnxExportError, export_onnx, layer_errors
from tests.conftest import run_without_torch

TOLERANCE = 1e-5  # of each layer's largest absolute value

SENTENCES = [
    text.split(" ")
    for text in (
        "The cat sat on the mat .",
        "Hi",
        "Colourless green ideas sleep furiously , said Chomsky in 1957 !",
        "Supercalifragilisticexpialidocious-and-then-some-more-characters-than-fifty-bytes ok",
        "Ça va ? Très bien , merci — und Ihnen ?",
        "a , b ; c : d ( e ) f [ g ] h ' i \" j",
        "repeat repeat repeat repeat repeat repeat repeat repeat",
        "a token spelled <S> or </S> is the sentence marker , as on the torch path",
    )
]


@pytest.fixture(scope="module")
def exports(tmp_path_factory, fixture_dir) -> dict[str, Path]:
    """Both test models exported once: the bundled default model and the AllenNLP fixture."""
    root = tmp_path_factory.mktemp("onnx")
    folders = {"default": root / "default", "fixture": root / "fixture"}
    export_onnx("default", folders["default"])
    export_onnx(fixture_dir, folders["fixture"])
    return folders


@pytest.fixture(scope="module")
def torch_backends(fixture_dir):
    """The torch float32 backends, as the process shares them (their settings untouched: other tests rely on them)."""
    return {"default": load_bilm("default"), "fixture": load_bilm(fixture_dir)}


@pytest.mark.parametrize("name", ["default", "fixture"])
def test_layers_match_the_torch_float32_path(exports, torch_backends, name):
    runner = OnnxBiLM(exports[name], token_cache_size=0)
    backend = torch_backends[name]
    assert (runner.n_layers, runner.dim, runner.fingerprint) == (backend.n_layers, backend.dim, backend.fingerprint)
    ours = runner.layers(SENTENCES)
    reference = backend.embed(SENTENCES)
    for array, expected in zip(ours, reference):
        assert array.dtype == np.float32 and array.shape == expected.shape
    errors = layer_errors(ours, reference)
    print(f"{name}: per-layer max error / layer scale {[f'{e:.2g}' for e in errors]}")
    assert max(errors) <= TOLERANCE


TOKENS = st.text(st.characters(exclude_categories=("Cs",)), max_size=60)  # any str (no lone surrogates), long too


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(batch=st.lists(st.lists(TOKENS, min_size=0, max_size=12), min_size=1, max_size=6))
def test_any_batch_matches_the_torch_path(exports, torch_backends, batch):
    """Random token lists (any characters, empty tokens and sentences, words past 48 bytes) on the fixture model."""
    ours = load_bilm(exports["fixture"]).embed(batch)  # the export's backend: the ONNX runner
    reference = torch_backends["fixture"].embed(batch)
    assert [a.shape for a in ours] == [a.shape for a in reference]
    if any(len(s) for s in batch):
        pairs = [(a, b) for a, b in zip(ours, reference) if a.shape[1]]
        assert max(layer_errors(*map(list, zip(*pairs)))) <= TOLERANCE


@pytest.mark.parametrize("name", ["default", "fixture"])
def test_a_sentence_gives_the_same_alone_as_in_a_mixed_batch(exports, name):
    runner = OnnxBiLM(exports[name], token_cache_size=0)
    batch = runner.layers(SENTENCES)
    for sentence, in_batch in zip(SENTENCES, batch):
        alone = runner.layers([sentence])[0]
        np.testing.assert_allclose(in_batch, alone, atol=1e-6 * max(1.0, float(np.abs(alone).max())), rtol=0)


def test_empty_sentences_and_the_token_cache(exports):
    backend = load_bilm(exports["default"], cache_mb=0, token_cache_size=5)
    assert isinstance(backend.runner, OnnxBiLM)
    first = backend.embed([[], ["one", "two", "one"], []])
    assert [a.shape for a in first] == [(3, 0, 256), (3, 3, 256), (3, 0, 256)]
    assert backend.embed([]) == []
    assert len(backend.runner.token_cache) <= 5  # bounded: the markers and the words, the least recent dropped
    again = backend.embed([["one", "two", "one"]])[0]
    np.testing.assert_array_equal(again, first[1])
    many = [f"w{i}" for i in range(12)]  # more new words than the cache holds
    np.testing.assert_allclose(
        backend.embed([many])[0], OnnxBiLM(exports["default"], token_cache_size=0).layers([many])[0], atol=1e-6
    )
    from spacy_elmo.runtime.configuration.defaults import DEFAULT_MEMORY_MB, DEFAULT_TOKEN_CACHE

    backend.configure_cache(cache_mb=DEFAULT_MEMORY_MB, token_cache_size=DEFAULT_TOKEN_CACHE)  # the defaults back


def test_token_lists_are_checked_as_the_backend_checks_them(exports):
    backend = load_bilm(exports["fixture"])
    with pytest.raises(TypeError, match="sentences must be an iterable of token sequences"):
        backend.embed("a sentence")
    with pytest.raises(TypeError, match="sentence 1"):
        backend.embed([["fine"], "not a token list"])


def test_the_fixture_reference_activations(exports, fixture_dir):
    """AllenNLP's reference top layer (bilm-tf), first batch (stateless), on the ONNX path too."""
    groups = json.loads((fixture_dir / "sentences.json").read_text())
    sentences = [groups[k][0].split() for k in range(3)]
    runner = OnnxBiLM(exports["fixture"], token_cache_size=0)
    layers = runner.layers(sentences)
    for k in range(len(sentences)):
        with h5py.File(fixture_dir / f"lm_embeddings_{k}.hdf5", "r") as handle:
            expected = np.concatenate(list(handle["0"][...]), axis=-1)
        np.testing.assert_allclose(layers[k][2], expected, atol=1e-6, rtol=1e-5)
    # and the reference token vectors (elmo_token_embeddings.hdf5) from the token encoder alone
    words = (fixture_dir / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    reference = h5py.File(fixture_dir / "elmo_token_embeddings.hdf5", "r")["embedding"][...]
    np.testing.assert_allclose(runner.encode_tokens(words), reference[: len(words)], atol=1e-6, rtol=1e-5)


def test_the_manifest_says_what_was_exported(exports, torch_backends):
    manifest = json.loads((exports["default"] / MANIFEST).read_text())
    assert manifest["format"] == "spacy-elmo-onnx" and manifest["format_version"] == 1
    assert manifest["fingerprint"] == torch_backends["default"].fingerprint
    assert manifest["opset"] == onnx_graph.OPSET
    assert manifest["characters"]["max_chars_per_token"] == 50
    assert 0 <= manifest["verification"]["max_relative_error"] <= TOLERANCE
    assert {"spacy_elmo", "onnx", "torch"} <= set(manifest["written_by"])
    assert sorted(p.name for p in exports["default"].iterdir()) == sorted([MANIFEST, *GRAPH_FILES.values()])


def test_the_graphs_pass_the_onnx_checker(exports):
    import onnx

    for name in GRAPH_FILES.values():
        model = onnx.load(str(exports["fixture"] / name))
        onnx.checker.check_model(model)
        assert model.opset_import[0].version == onnx_graph.OPSET


def test_an_export_that_disagrees_with_torch_is_refused_and_leaves_nothing(fixture_dir, tmp_path, monkeypatch):
    real = onnx_graph._array
    calls = []

    def corrupted(tensor):
        values = real(tensor)
        calls.append(1)
        if len(calls) == 3:  # one of the char CNN's weights, slightly off
            values = values * np.float32(1.01)
        return values

    monkeypatch.setattr(onnx_graph, "_array", corrupted)
    with pytest.raises(OnnxExportError, match=r"differ from the torch float32 path by .* not exported"):
        export_onnx(fixture_dir, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []  # no folder, no temporary one


def test_another_token_encoder_is_refused_in_one_line(fixture_dir):
    """ELMo's and ELMoForManyLangs' token encoders export (tests/onnx/test_onnx_manylangs.py); another kind of token
    encoder, whose arithmetic the graphs do not know, is one line."""
    from spacy_elmo.bilm.encoder import CharCNNEncoder

    class OtherEncoder(CharCNNEncoder):
        pass

    model = load_bilm(fixture_dir).model
    other = copy.deepcopy(model)
    other.token_encoder.__class__ = OtherEncoder
    with pytest.raises(ValueError, match="ELMo's and ELMoForManyLangs' token encoders, not OtherEncoder") as info:
        onnx_graph.bilm_graphs(other)
    assert "\n" not in str(info.value)


def test_an_existing_folder_is_refused_before_the_model_loads(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("mine")
    with pytest.raises(OnnxExportError, match="exists and is not an empty folder"):
        export_onnx("no-such-model-name-at-all", tmp_path / "out")
    assert (tmp_path / "out" / "x").read_text() == "mine"


def _copy(folder: Path, to: Path) -> Path:
    to.mkdir()
    for path in folder.iterdir():
        (to / path.name).write_bytes(path.read_bytes())
    return to


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda m: m.update(format="other-tool"), r"manifest.json: format: input should be 'spacy-elmo-onnx'"),
        (lambda m: m.pop("fingerprint"), r"manifest.json: fingerprint: missing"),
        (lambda m: m.update(dim="wide"), r"manifest.json: dim: input should be a valid integer"),
        (lambda m: m["characters"].update(padding_char=7), r"characters: .*padding_char 7 \(here 261\)"),
        (lambda m: m["options"]["lstm"].update(n_layers=-1), r"manifest.json: options: .*n_layers"),
    ],
)
def test_a_bad_manifest_is_one_line(exports, tmp_path, damage, message):
    folder = _copy(exports["fixture"], tmp_path / "copy")
    manifest = json.loads((folder / MANIFEST).read_text())
    damage(manifest)
    (folder / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(OnnxFolderError, match=message) as info:
        OnnxBiLM(folder, token_cache_size=0)
    assert "\n" not in str(info.value) and "export the model again" in str(info.value)


def test_missing_files_and_damaged_graphs_are_one_line(exports, tmp_path):
    with pytest.raises(OnnxFolderError, match="no such folder"):
        OnnxBiLM(tmp_path / "nothing", token_cache_size=0)
    folder = _copy(exports["fixture"], tmp_path / "copy")
    (folder / MANIFEST).write_text("{not json")
    with pytest.raises(OnnxFolderError, match="not valid JSON"):
        OnnxBiLM(folder, token_cache_size=0)
    folder = _copy(exports["fixture"], tmp_path / "copy2")
    (folder / GRAPH_FILES["backward"]).unlink()
    with pytest.raises(OnnxFolderError, match=f"no {GRAPH_FILES['backward']}"):
        OnnxBiLM(folder, token_cache_size=0)
    folder = _copy(exports["fixture"], tmp_path / "copy3")
    (folder / TOKEN_ENCODER).write_bytes(b"garbage")
    with pytest.raises(OnnxFolderError, match="ONNX Runtime cannot load it") as info:
        OnnxBiLM(folder, token_cache_size=0)
    assert "\n" not in str(info.value)
    folder = _copy(exports["fixture"], tmp_path / "copy4")  # the graphs swapped: other inputs
    (folder / TOKEN_ENCODER).write_bytes((exports["fixture"] / GRAPH_FILES["forward"]).read_bytes())
    with pytest.raises(OnnxFolderError, match="not the expected"):
        OnnxBiLM(folder, token_cache_size=0)


@pytest.mark.parametrize(("keyword", "value"), [("threads", 0), ("threads", "2"), ("token_cache_size", -1)])
def test_bad_settings_are_refused(exports, keyword, value):
    with pytest.raises(ValueError, match=keyword):
        OnnxBiLM(exports["fixture"], **{"token_cache_size": 0, keyword: value})


def test_a_missing_onnxruntime_says_how_to_install_it(monkeypatch):
    from spacy_elmo.onnx import runner

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails
    with pytest.raises(ImportError, match="pip install onnxruntime"):
        runner.import_onnxruntime()


def test_the_runner_works_without_torch(exports, torch_backends, tmp_path):
    """In a process where ``import torch`` fails, the runner loads and gives the torch path's layers."""
    sentences = SENTENCES[:4]
    expected = torch_backends["default"].embed(sentences)
    np.savez(tmp_path / "expected.npz", *expected)
    (tmp_path / "sentences.json").write_text(json.dumps(sentences))
    done = run_without_torch(
        f"""
        import json
        import numpy as np
        try:
            import torch
        except ImportError:
            pass
        else:
            raise SystemExit("the block did not work")
        from spacy_elmo.onnx import OnnxBiLM
        from spacy_elmo.output.onnx_export import layer_errors

        sentences = json.loads(open({str(tmp_path / "sentences.json")!r}, encoding="utf-8").read())
        ours = OnnxBiLM({str(exports["default"])!r}, threads=1, token_cache_size=0).layers(sentences)
        stored = np.load({str(tmp_path / "expected.npz")!r})
        expected = [stored[f"arr_{{i}}"] for i in range(len(sentences))]
        assert [a.shape for a in ours] == [a.shape for a in expected]
        print("max error", max(layer_errors(ours, expected)))
        assert max(layer_errors(ours, expected)) <= {TOLERANCE}
        assert not [m for m in sys.modules if m.split(".")[0] == "torch"]
        print("ok")
        """
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("ok")


def test_the_export_command(tmp_path, fixture_dir):
    """``spacy-elmo export MODEL FOLDER --format onnx`` writes a folder that load_bilm runs; another format, or a
    folder that holds something, is one error line (exit 2) and writes nothing."""
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    runner = CliRunner()
    done = runner.invoke(app, ["export", str(fixture_dir), str(tmp_path / "out"), "--format", "onnx"])
    assert done.exit_code == 0 and "checked against the torch float32 path" in done.output, done.output
    assert isinstance(load_bilm(tmp_path / "out").runner, OnnxBiLM)
    again = runner.invoke(app, ["export", str(fixture_dir), str(tmp_path / "out")])
    assert again.exit_code == 2 and "is not an empty folder" in again.output, again.output
    other = runner.invoke(app, ["export", str(fixture_dir), str(tmp_path / "other"), "--format", "tflite"])
    assert other.exit_code == 2 and "--format 'tflite': expected one of ['onnx']" in other.output, other.output
    assert not (tmp_path / "other").exists()


def test_an_export_reached_by_any_spelling_takes_only_the_cpu_and_float32(exports, monkeypatch):
    """However the folder is named (its files given as options/weights, or "~/..."), the ONNX runner serves only what
    it computes: another precision or device is one ValueError, never vectors of another precision than asked."""
    folder = exports["fixture"]
    files = {"options": folder / "manifest.json", "weights": folder / TOKEN_ENCODER}
    with pytest.raises(ValueError, match="computes in float32 on ONNX Runtime"):
        load_bilm(**files, precision="bfloat16")
    assert isinstance(load_bilm(**files).runner, OnnxBiLM)
    monkeypatch.setenv("HOME", str(folder.parent))
    with pytest.raises(ValueError, match="computes in float32 on ONNX Runtime"):
        load_bilm(f"~/{folder.name}", precision="int8")
    with pytest.raises(ValueError, match="runs on ONNX Runtime's CPU provider"):
        load_bilm(folder, device="meta")
