"""ELMoForManyLangs models exported to ONNX: their own token encoder graph, the dictionaries in the folder, and the
torch-free runner spelling tokens as the torch encoder does (one function, bilm/manylangs_tokens.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX export needs the onnx package (pip install onnx)")
pytest.importorskip("onnxruntime", reason="the ONNX runner needs onnxruntime (pip install onnxruntime)")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spacy_elmo import load_bilm
from spacy_elmo.bilm import manylangs_reader
from spacy_elmo.bilm.manylangs_files import CHAR_DIC, WORD_DIC
from spacy_elmo.onnx import OnnxBiLM, OnnxFolderError
from spacy_elmo.onnx.manifest import GRAPH_FILES, MANIFEST, TOKEN_ENCODER
from spacy_elmo.output.onnx_export import OnnxExport, export_onnx, layer_errors
from tests.bilm.test_manylangs import FIXTURES, KINDS, reference, sentences
from tests.conftest import run_without_torch

TOLERANCE = 1e-5  # of each layer's largest absolute value


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, OnnxExport]:
    """Both ELMoForManyLangs fixtures exported once: with word vectors and char-only."""
    root = tmp_path_factory.mktemp("manylangs_onnx")
    return {kind: export_onnx(FIXTURES / kind, root / kind) for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_the_export_matches_the_torch_path_and_the_reference(exports, kind):
    """The export's own check passed (1e-5 of each layer's scale), and the folder's runner gives the torch path's layers
    and ELMoForManyLangs' own reference activations (its Embedder, tests/fixtures/elmoformanylangs) within 1e-5."""
    done = exports[kind]
    assert done.max_relative_error <= TOLERANCE
    runner = OnnxBiLM(done.folder, token_cache_size=0)
    torch_backend = load_bilm(FIXTURES / kind)
    assert (runner.n_layers, runner.dim, runner.fingerprint) == (
        torch_backend.n_layers,
        torch_backend.dim,
        torch_backend.fingerprint,
    )
    ours = runner.layers(sentences())
    against_torch = layer_errors(ours, torch_backend.embed(sentences()))
    against_reference = layer_errors(ours, reference(kind))
    print(
        f"{kind}: export check {done.max_relative_error:.2g}, vs torch {max(against_torch):.2g}, "
        f"vs ELMoForManyLangs {max(against_reference):.2g} (max error / layer scale)"
    )
    assert max(against_torch) <= TOLERANCE and max(against_reference) <= TOLERANCE


@pytest.mark.parametrize("kind", KINDS)
def test_the_folder_carries_the_dictionaries_and_says_its_tokens(exports, kind):
    folder = exports[kind].folder
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    model = manylangs_reader.load_model(FIXTURES / kind)
    vocabulary = model.token_encoder.vocabulary
    assert manifest["tokens"] == "manylangs" and "characters" not in manifest
    assert manifest["manylangs"] == {
        "max_chars": vocabulary.max_chars,
        "n_characters": len(vocabulary.chars),
        "n_words": len(vocabulary.words or ()),
    }
    dictionaries = [CHAR_DIC, WORD_DIC] if vocabulary.words is not None else [CHAR_DIC]
    assert sorted(p.name for p in folder.iterdir()) == sorted([MANIFEST, *GRAPH_FILES.values(), *dictionaries])
    assert manylangs_reader.read_lexicon(folder / CHAR_DIC, ()) == vocabulary.chars
    tokens = [token for sentence in sentences() for token in sentence] + ["<bos>", "<eos>", "x" * 80]
    runner = OnnxBiLM(folder, token_cache_size=0)
    np.testing.assert_array_equal(runner._spelling.token_ids(tokens), model.token_encoder.token_ids(tokens))


TOKENS = st.text(st.characters(exclude_categories=("Cs",)), max_size=60) | st.sampled_from(["<bos>", "<eos>", "<S>"])


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(batch=st.lists(st.lists(TOKENS, min_size=0, max_size=10), min_size=1, max_size=5))
def test_any_batch_matches_the_torch_path(exports, batch):
    """Random token lists (any characters, the markers as words, empty tokens and sentences, long words) through
    load_bilm of the export (the ONNX runner, its token cache on) and of the model (torch)."""
    ours = load_bilm(exports["word_char"].folder).embed(batch)
    expected = load_bilm(FIXTURES / "word_char").embed(batch)
    assert [a.shape for a in ours] == [a.shape for a in expected]
    pairs = [(a, b) for a, b in zip(ours, expected) if a.shape[1]]
    if pairs:
        assert max(layer_errors(*map(list, zip(*pairs)))) <= TOLERANCE


def test_the_runner_spells_manylangs_tokens_without_torch(exports, tmp_path):
    """In a process where ``import torch`` fails, the runner reads the dictionaries, spells tokens and gives the
    torch path's layers."""
    folder = exports["word_char"].folder
    np.savez(tmp_path / "expected.npz", *load_bilm(FIXTURES / "word_char").embed(sentences()))
    (tmp_path / "sentences.json").write_text(json.dumps(sentences()), encoding="utf-8")
    done = run_without_torch(
        f"""
        import json
        import numpy as np
        from spacy_elmo.onnx import OnnxBiLM
        from spacy_elmo.output.onnx_export import layer_errors

        sentences = json.loads(open({str(tmp_path / "sentences.json")!r}, encoding="utf-8").read())
        ours = OnnxBiLM({str(folder)!r}, threads=1, token_cache_size=100).layers(sentences)
        stored = np.load({str(tmp_path / "expected.npz")!r})
        expected = [stored[f"arr_{{i}}"] for i in range(len(sentences))]
        assert max(layer_errors(ours, expected)) <= {TOLERANCE}
        assert not [m for m in sys.modules if m.split(".")[0] == "torch"]
        print("ok")
        """
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr


def _without_bow(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("".join(f"{line}\n" for line in lines if not line.startswith("<bow>\t")), encoding="utf-8")


def _manifest(change):
    def damage(folder: Path) -> None:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        change(manifest)
        (folder / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")

    return damage


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: (f / WORD_DIC).unlink(), r"dictionary not found: .*word\.dic"),
        (
            lambda f: (f / CHAR_DIC).write_text("a\tb\n", encoding="utf-8"),
            r"char\.dic, line 1: expected 'token<TAB>id'",
        ),
        (lambda f: (f / CHAR_DIC).write_bytes(b"\xff\xfe"), r"char\.dic is not UTF-8 text"),
        (lambda f: _without_bow(f / CHAR_DIC), r"char\.dic has no '<bow>' entry"),
        (lambda f: (f / WORD_DIC).write_text("<oov>\t0\n<pad>\t1\n", encoding="utf-8"), r"word\.dic: 2 entries, where"),
        (_manifest(lambda m: m["manylangs"].update(max_chars=60)), r"takes id rows 51 wide, not 61"),
        (_manifest(lambda m: m.pop("manylangs")), r"manifest\.json: manylangs: missing"),
        (_manifest(lambda m: m["manylangs"].update(n_words=-1)), r"manifest\.json: manylangs\.n_words"),
    ],
)
def test_a_damaged_or_missing_dictionary_is_one_line(exports, tmp_path, damage, message):
    folder = tmp_path / "copy"
    shutil.copytree(exports["word_char"].folder, folder)
    damage(folder)
    with pytest.raises(OnnxFolderError, match=message) as info:
        OnnxBiLM(folder, token_cache_size=0)
    assert "\n" not in str(info.value) and "export the model again" in str(info.value)


def test_an_elmo_export_is_not_read_as_manylangs(exports, fixture_dir, tmp_path):
    """A manifest whose tokens say "manylangs" without its section, or an ELMo folder read as one, is one line."""
    folder = tmp_path / "elmo"
    export_onnx(fixture_dir, folder)
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    assert manifest["tokens"] == "elmo-chars" and "manylangs" not in manifest
    manifest.update(tokens="manylangs", manylangs={"max_chars": 50, "n_characters": 262, "n_words": 0})
    (folder / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(OnnxFolderError, match=r"dictionary not found: .*char\.dic"):
        OnnxBiLM(folder, token_cache_size=0)


def test_an_architecture_the_manifest_cannot_hold_is_refused_in_one_line(tmp_path, monkeypatch):
    """A filter wider than ELMo's 50 characters (ELMoForManyLangs allows up to its max_characters_per_token) cannot be
    written in the manifest's options: the export says so in one line and writes nothing."""
    from spacy_elmo.bilm.manylangs import ManyLangsBiLM, ManyLangsConfig
    from spacy_elmo.output.onnx_export import OnnxExportError
    from spacy_elmo.runtime.embedding import torch_runner

    chars = manylangs_reader.read_lexicon(FIXTURES / "char_only" / CHAR_DIC, ())
    config = ManyLangsConfig(((60, 4),), 4, 0, 1, "relu", 64, 8, 16, 1, None, None)
    monkeypatch.setattr(torch_runner, "load_model_files", lambda *paths: ManyLangsBiLM(config, None, chars).eval())
    with pytest.raises(OnnxExportError, match=r"char_cnn\.filters must be .*: not exported") as info:
        export_onnx(FIXTURES / "char_only", tmp_path / "out")
    assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_the_dictionaries_are_files_of_the_model(exports, tmp_path):
    """What copies a model (a saved spaCy pipeline, the hub) copies model_file_map's files, and the fingerprint reads
    them: a manylangs export's dictionaries are among them, so a copy runs and a changed dictionary is another model."""
    from spacy_elmo.sources.model_paths import fingerprint, model_file_map

    folder = exports["word_char"].folder
    files = model_file_map(folder / MANIFEST, folder / TOKEN_ENCODER)
    assert {CHAR_DIC, WORD_DIC} <= set(files)
    copy = tmp_path / "copy"
    copy.mkdir()
    for name, path in files.items():
        shutil.copyfile(path, copy / name)
    np.testing.assert_array_equal(
        OnnxBiLM(copy, token_cache_size=0).layers(sentences())[1],
        OnnxBiLM(folder, token_cache_size=0).layers(sentences())[1],
    )
    before = fingerprint(copy / MANIFEST, copy / TOKEN_ENCODER)
    (copy / WORD_DIC).write_text((copy / WORD_DIC).read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert fingerprint(copy / MANIFEST, copy / TOKEN_ENCODER) != before
    assert set(model_file_map(exports["char_only"].folder / MANIFEST, exports["char_only"].folder / TOKEN_ENCODER)) == {
        MANIFEST,
        *GRAPH_FILES.values(),
        CHAR_DIC,
    }
