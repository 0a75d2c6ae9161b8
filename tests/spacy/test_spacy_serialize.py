"""Saving and loading: DocBin, Doc bytes, nlp.to_disk/to_bytes, a fresh process, config assembly."""

import json
import re
import runpy
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import spacy
from spacy.tokens import Doc, DocBin
from spacy.util import load_config, load_model_from_config

from spacy_elmo import WeightFileError
from spacy_elmo.spacy import NoElmoLayersWarning, set_hooks
from tests.numerics import assert_recomputed_close

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TEXTS = ["The bank will approve your loan.", "They sat on the bank of the river. It was cold.", "", "  "]


@pytest.fixture(scope="module")
def nlp(fixture_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(fixture_dir), "layers": [0.5, 1.0, -1.0], "gamma": 2.0})
    return nlp


def assert_same_vectors(doc, expected, recomputed=False):
    """Stored arrays must round-trip exactly; vectors recomputed by another backend object agree to rounding."""
    if recomputed:
        assert_recomputed_close(doc._.elmo_layers, expected._.elmo_layers)
        assert_recomputed_close(doc._.elmo, expected._.elmo)
    else:
        np.testing.assert_array_equal(doc._.elmo_layers, expected._.elmo_layers)
        np.testing.assert_array_equal(doc._.elmo, expected._.elmo)  # the stored mix on the same stored layers
    assert doc._.elmo_model == expected._.elmo_model


def assert_vectors_survived(doc, expected):
    """``.vector`` & co of a doc that came back from bytes, with no call by the user, match the original's."""
    for token, exp in zip(doc, expected):
        np.testing.assert_array_equal(token.vector, exp.vector)  # the tensor row is the mixed vector
        hooks = bool(doc.user_token_hooks)  # else spaCy's fallback: every tensor row is a vector, whitespace too
        assert token.has_vector == (exp.has_vector or (exp.is_space and not hooks))
    if len(doc) and not any(t.is_space for t in doc):  # span/doc means agree when no whitespace token is averaged
        np.testing.assert_allclose(doc.vector, expected.vector, atol=1e-6)
        np.testing.assert_allclose(doc[1:3].vector, expected[1:3].vector, atol=1e-6)
        assert doc.has_vector and doc[1:3].has_vector
        assert doc[1].similarity(doc[-2]) == pytest.approx(expected[1].similarity(expected[-2]), abs=1e-6)
        assert doc[0:2].similarity(doc[2:4]) == pytest.approx(expected[0:2].similarity(expected[2:4]), abs=1e-6)


def test_docbin_round_trip(nlp):
    docs = list(nlp.pipe(TEXTS))
    data = DocBin(docs=docs, store_user_data=True).to_bytes()
    restored = list(DocBin(store_user_data=True).from_bytes(data).get_docs(spacy.blank("en").vocab))
    for doc, expected in zip(restored, docs):
        assert_same_vectors(doc, expected)  # the stored mix (list weights + gamma) is applied, not the default
        assert doc._.elmo_layers.dtype == np.float32
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoElmoLayersWarning)  # every doc has its layers: no warning
        set_hooks(restored)  # a DocBin keeps neither hooks nor doc.tensor: the stored layers give both back
    for doc, expected in zip(restored, docs):
        assert_vectors_survived(doc, expected)
    assert restored[0][1].similarity(restored[1][4]) == pytest.approx(docs[0][1].similarity(docs[1][4]), abs=1e-6)
    assert not restored[3].has_vector and not restored[3][0].has_vector  # whitespace only: hooks say no vector


def test_docbin_without_user_data_keeps_no_elmo_data(nlp):
    docs = list(nlp.pipe(TEXTS[:2]))
    restored = list(DocBin(docs=docs).from_bytes(DocBin(docs=docs).to_bytes()).get_docs(spacy.blank("en").vocab))
    for doc in restored:
        assert doc._.elmo_layers is None and doc._.elmo is None
        assert doc.tensor.size == 0
        assert not doc.has_vector and not doc[0].has_vector and doc[0].vector.shape == (0,)
    with pytest.warns(NoElmoLayersWarning, match=r"set_hooks: 2 of 2 docs have no ELMo layers.*store_user_data=True"):
        set_hooks(restored)  # nothing to restore: the hooks must not pretend, and the call says so
    assert not restored[0].has_vector and not restored[0][1:3].has_vector and not restored[0][0].has_vector
    assert restored[0][0].vector.shape == (0,) and restored[0].vector.shape == (0,)


def test_doc_bytes_round_trip(nlp):
    for text in [*TEXTS[:2], "The bank", "a  b"]:
        doc = nlp(text)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # spaCy's W109: hooks are not serialised
            data = doc.to_bytes()
        restored = Doc(spacy.blank("en").vocab).from_bytes(data)
        assert_same_vectors(restored, doc)
        assert not restored.user_token_hooks
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # spaCy's W007: similarity from doc.tensor
            assert_vectors_survived(restored, doc)  # no set_hooks: doc.tensor carries the mix
        np.testing.assert_array_equal(restored.tensor, doc._.elmo)


def test_set_vectors_false_leaves_vectors_and_tensor_alone(fixture_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(fixture_dir), "set_vectors": False})
    doc = nlp("The bank")
    assert doc._.elmo.shape == (2, 32)
    assert doc.tensor.size == 0 and not doc.user_token_hooks and not doc.has_vector


def saved_pipeline(fixture_dir, tmp_path, **config):
    """A pipeline on a private copy of the fixture model, saved to tmp_path / 'pipeline'."""
    model_dir = tmp_path / "elmo_model"
    shutil.copytree(fixture_dir, model_dir)
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"model": str(model_dir), **config})
    nlp.to_disk(tmp_path / "pipeline")
    return nlp, model_dir, tmp_path / "pipeline"


def test_to_disk_then_spacy_load_in_fresh_process(fixture_dir, tmp_path):
    nlp, model_dir, path = saved_pipeline(fixture_dir, tmp_path, layers="top")
    assert sorted(p.name for p in (path / "elmo" / "model").iterdir()) == ["model.json", "options.json", "weights.hdf5"]
    expected = nlp(TEXTS[1])
    np.save(tmp_path / "expected.npy", expected._.elmo_layers)
    shutil.rmtree(model_dir)  # the saved pipeline must not need the original files
    script = (
        "import sys, numpy as np, spacy\n"
        "assert 'spacy_elmo' not in sys.modules\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
        "from tests.numerics import assert_recomputed_close\n"
        f"nlp = spacy.load({str(path)!r})\n"  # finds the factory through the spacy_factories entry point
        f"doc = nlp({TEXTS[1]!r})\n"
        f"assert_recomputed_close(doc._.elmo_layers, np.load({str(tmp_path / 'expected.npy')!r}))\n"
        "np.testing.assert_array_equal(doc[4].vector, doc._.elmo_layers[-1, 4])\n"
        "print(nlp.pipe_names, nlp.get_pipe('elmo').layers, doc._.elmo_layers.shape)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "['sentencizer', 'elmo'] top (3, 13, 32)" in result.stdout


def test_saved_weights_are_checked(fixture_dir, tmp_path):
    nlp, _, path = saved_pipeline(fixture_dir, tmp_path)  # saved before any doc: the model is loaded to save it
    assert (
        json.loads((path / "elmo" / "model" / "model.json").read_text())["fingerprint"]
        == nlp.get_pipe("elmo").backend.fingerprint
    )
    import h5py

    with h5py.File(path / "elmo" / "model" / "weights.hdf5", "a") as f:
        f["CNN_proj/b_proj"][0] += 1.0
    with pytest.raises(Exception, match="fingerprint"):
        spacy.load(path)


def assert_no_save(nlp, message: str, *folders: Path) -> None:
    """``nlp.to_bytes()`` and ``nlp.to_disk`` into each folder refuse with a WeightFileError matching ``message``."""
    with pytest.raises(WeightFileError, match=message):
        nlp.to_bytes()
    for folder in folders:
        with pytest.raises(WeightFileError, match=message):
            nlp.to_disk(folder)


def test_saving_after_the_model_folder_was_deleted_says_what_happened(fixture_dir, tmp_path):
    """to_bytes said "ELMo model directory not found", as if the loaded model had never existed."""
    import shutil

    folder = tmp_path / "my-elmo"
    shutil.copytree(fixture_dir, folder)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(folder)})
    before = nlp("The bank").tensor
    shutil.rmtree(folder)
    message = (
        rf"component 'elmo': cannot save the model: it was loaded from {folder}, whose files are gone since "
        r"\(ELMo model directory not found: .*\)\. The loaded model still embeds, but a saved pipeline holds a copy"
    )
    assert_no_save(nlp, message, tmp_path / "pipeline")
    np.testing.assert_array_equal(nlp("The bank").tensor, before)  # the loaded model still embeds


def test_saving_weights_changed_on_disk_since_loading_is_refused(model_folder, tmp_path):
    """A pipeline whose model files changed on disk after it loaded them saved the new weights under the loaded
    model's fingerprint: a save that could never load. to_disk and to_bytes refuse in one line, writing nothing of
    the component; a previous save in the folder stays whole and loads."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(model_folder.path)})
    expected = nlp(TEXTS[0])
    loaded = nlp.get_pipe("elmo").backend.files_fingerprint
    previous = tmp_path / "previous"
    nlp.to_disk(previous)  # the files as loaded: saved
    saved = {p.name: p.read_bytes() for p in (previous / "elmo" / "model").iterdir()}

    model_folder.replace_weights()
    message = (
        rf"^component 'elmo': cannot save the model: the ELMo model files in {re.escape(str(model_folder.path))} "
        rf"changed on disk since the pipeline loaded them \(fingerprint {loaded} then, [0-9a-f]{{32}} now\): a save "
        r"would pair them with the loaded model's fingerprint\. Put back the files it loaded, or make the pipeline "
        r"again on these files [^\n]+$"
    )
    assert_no_save(nlp, message, tmp_path / "fresh", previous)
    assert not (tmp_path / "fresh" / "elmo").exists()  # spaCy writes its own parts first; nothing of the component
    assert {p.name: p.read_bytes() for p in (previous / "elmo" / "model").iterdir()} == saved
    assert_same_vectors(spacy.load(previous)(TEXTS[0]), expected, recomputed=True)

    model_folder.put_back()  # what the message says: the files it loaded back in place, and it saves again
    nlp.to_disk(tmp_path / "again")
    assert_same_vectors(spacy.load(tmp_path / "again")(TEXTS[0]), expected, recomputed=True)
    fresh = spacy.blank("en")
    fresh.add_pipe("elmo", config={"model": "/nonexistent/elmo"})
    assert_same_vectors(fresh.from_bytes(nlp.to_bytes())(TEXTS[0]), expected, recomputed=True)


def test_a_failed_save_leaves_the_previous_one_whole(fixture_dir, tmp_path, monkeypatch):
    """The component's model files and model.json are replaced as one set: a save that fails half-way (here while
    writing model.json, after the copies) leaves the folder's previous save byte for byte, and no temporary files."""
    nlp, _, pipeline = saved_pipeline(fixture_dir, tmp_path)
    saved = pipeline / "elmo" / "model"
    before = {p.name: p.read_bytes() for p in saved.iterdir()}
    assert set(before) == {"model.json", "options.json", "weights.hdf5"}

    def half_written(path, data, **kwargs):
        Path(path).write_text('{"source": "fi')
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("spacy_elmo.spacy.pipeline_component.srsly.write_json", half_written)
    with pytest.raises(OSError, match=r"cannot write .*model\.json: no space left on device"):
        nlp.get_pipe("elmo").to_disk(pipeline / "elmo")  # (nlp.to_disk writes its own meta.json with srsly first)
    assert {p.name: p.read_bytes() for p in saved.iterdir()} == before


def test_default_model_is_saved_as_a_reference(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")  # the bundled default: nothing is loaded until the first doc
    nlp.to_disk(tmp_path / "p")
    saved = tmp_path / "p" / "elmo" / "model"
    assert [p.name for p in saved.iterdir()] == ["model.json"]
    assert json.loads((saved / "model.json").read_text())["source"] == "default"
    assert spacy.util.load_config(tmp_path / "p" / "config.cfg")["components"]["elmo"]["model"]["path"] == "default"


def test_nlp_to_bytes_from_bytes(nlp):
    data = nlp.to_bytes()
    fresh = spacy.blank("en")
    fresh.add_pipe("elmo", config={"model": "/nonexistent/elmo", "layers": [0.5, 1.0, -1.0], "gamma": 2.0})
    fresh.from_bytes(data)
    component = fresh.get_pipe("elmo")
    assert (
        component.model_ref.path != "/nonexistent/elmo"
        and component.backend.fingerprint == nlp.get_pipe("elmo").backend.fingerprint
    )
    for text in TEXTS:
        assert_same_vectors(fresh(text), nlp(text), recomputed=True)


def test_from_bytes_again_reuses_one_copy_of_the_model_files(nlp, fixture_dir):
    """A server reloading a pipeline from bytes must not fill the disk with one copy of the weights per load."""
    data = nlp.to_bytes()
    loaded = []
    for _ in range(3):
        fresh = spacy.blank("en")
        fresh.add_pipe("elmo", config={"model": "/nonexistent/elmo", "layers": [0.5, 1.0, -1.0], "gamma": 2.0})
        loaded.append(fresh.from_bytes(data).get_pipe("elmo"))
    (directory,) = {Path(c.model_ref.path) for c in loaded}
    assert len({id(c.backend) for c in loaded}) == 1  # the backend cache finds the one loaded model
    assert sorted(p.name for p in directory.iterdir()) == ["options.json", "weights.hdf5"]
    for name, source in (("options.json", "options.json"), ("weights.hdf5", "lm_weights.hdf5")):
        assert (directory / name).read_bytes() == (Path(fixture_dir) / source).read_bytes()


def test_config_assembles_from_example(fixture_dir, backend):
    config = load_config(EXAMPLES / "config.cfg", overrides={"paths.elmo": str(fixture_dir)})
    nlp = load_model_from_config(config, auto_fill=True)
    assert nlp.pipe_names == ["sentencizer", "elmo"]
    assert nlp.get_pipe("elmo").backend is backend
    doc = nlp(TEXTS[1])
    expected = backend.embed([[t.text for t in s] for s in doc.sents])
    assert_recomputed_close(doc._.elmo_layers, np.concatenate(expected, axis=1))
    assert nlp.config["components"]["elmo"]["model"]["@misc"] == "spacy_elmo.ElmoBiLM.v1"
    assert nlp.config.interpolate()["components"]["elmo"]["model"]["path"] == str(fixture_dir)


@pytest.mark.slow
def test_spacy_assemble_cli_and_bank_example(fixture_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "assembled"
    cli = [
        sys.executable,
        "-m",
        "spacy",
        "assemble",
        str(EXAMPLES / "config.cfg"),
        str(out),
        "--paths.elmo",
        str(fixture_dir),
    ]
    result = subprocess.run(cli, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (out / "elmo" / "model" / "weights.hdf5").is_file()
    nlp = spacy.load(out)
    assert nlp.pipe_names == ["sentencizer", "elmo"] and nlp("A bank .")._.elmo_layers.shape == (3, 3, 32)
    monkeypatch.setattr(sys, "argv", ["bank.py", str(fixture_dir)])
    runpy.run_path(str(EXAMPLES / "bank.py"), run_name="__main__")
    printed = capsys.readouterr().out
    assert "doc._.elmo_layers: (3, 9, 32)" in printed and "cosine similarity of the two 'bank' vectors: 0." in printed
