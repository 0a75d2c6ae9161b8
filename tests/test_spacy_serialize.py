"""Saving and loading: DocBin, Doc bytes, nlp.to_disk/to_bytes, a fresh process, config assembly."""
import json
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

from spacy_elmo.spacy import set_hooks

from numerics import assert_recomputed_close

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
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


def test_docbin_round_trip(nlp):
    docs = list(nlp.pipe(TEXTS))
    data = DocBin(docs=docs, store_user_data=True).to_bytes()
    restored = list(DocBin(store_user_data=True).from_bytes(data).get_docs(spacy.blank("en").vocab))
    for doc, expected in zip(restored, docs):
        assert_same_vectors(doc, expected)  # the stored mix (list weights + gamma) is applied, not the default
        assert doc._.elmo_layers.dtype == np.float32
    set_hooks(restored)
    np.testing.assert_allclose(restored[0][1].vector, docs[0][1].vector, atol=1e-6)
    assert restored[0][1].similarity(restored[1][4]) == pytest.approx(docs[0][1].similarity(docs[1][4]), abs=1e-6)


def test_doc_bytes_round_trip(nlp):
    doc = nlp(TEXTS[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # spaCy's W109: hooks are not serialised (set_hooks puts them back)
        data = doc.to_bytes()
    restored = Doc(spacy.blank("en").vocab).from_bytes(data)
    assert_same_vectors(restored, doc)
    assert not restored.user_token_hooks
    set_hooks(restored)
    np.testing.assert_allclose(restored.vector, doc.vector, atol=1e-6)


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
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from numerics import assert_recomputed_close\n"
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
    assert json.loads((path / "elmo" / "model" / "model.json").read_text())["fingerprint"] == nlp.get_pipe("elmo").backend.fingerprint
    import h5py

    with h5py.File(path / "elmo" / "model" / "weights.hdf5", "a") as f:
        f["CNN_proj/b_proj"][0] += 1.0
    with pytest.raises(Exception, match="fingerprint"):
        spacy.load(path)


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
    assert component.model_ref.path != "/nonexistent/elmo" and component.backend.fingerprint == nlp.get_pipe("elmo").backend.fingerprint
    for text in TEXTS:
        assert_same_vectors(fresh(text), nlp(text), recomputed=True)


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
    cli = [sys.executable, "-m", "spacy", "assemble", str(EXAMPLES / "config.cfg"), str(out), "--paths.elmo", str(fixture_dir)]
    result = subprocess.run(cli, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (out / "elmo" / "model" / "weights.hdf5").is_file()
    nlp = spacy.load(out)
    assert nlp.pipe_names == ["sentencizer", "elmo"] and nlp("A bank .")._.elmo_layers.shape == (3, 3, 32)
    monkeypatch.setattr(sys, "argv", ["bank.py", str(fixture_dir)])
    runpy.run_path(str(EXAMPLES / "bank.py"), run_name="__main__")
    printed = capsys.readouterr().out
    assert "doc._.elmo_layers: (3, 9, 32)" in printed and "cosine similarity of the two 'bank' vectors: 0." in printed
