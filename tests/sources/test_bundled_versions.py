"""Bundled model versions: a version name (``"default-v1"``) names its bundled model whatever ``"default"`` names
later, and pipelines and vectorizers made with the default keep their vectors after it changes (or fail saying what
to do).

"The default changed" is simulated as a real change is made: a newer model (today's default with one weight
changed) becomes ``"default"`` through the version table and ``DEFAULT_MODEL_DIR``, while today's default keeps its
version name (``TODAY``). The tests speak of today's default by its name in the table, so they hold whichever
version is the default.
"""

import json
import logging
import pickle
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import spacy
from typer.testing import CliRunner

import spacy_elmo
from spacy_elmo import WeightFileError, __version__, load_bilm
from spacy_elmo.cli import app
from spacy_elmo.sklearn import ElmoVectorizer
from spacy_elmo.sources import bundled_versions, model_paths
from spacy_elmo.sources.bundled_versions import DEFAULT_VERSION, UNRECORDED_VERSION, VERSIONS, BundledVersion
from spacy_elmo.sources.model_paths import DEFAULT_MODEL_DIR, fingerprint, resolve_model_files
from spacy_elmo.spacy.fine_tune import _base_mismatch
from tests.numerics import assert_recomputed_close

pytestmark = pytest.mark.skipif(
    not (DEFAULT_MODEL_DIR / "options.json").is_file(), reason="the bundled default model is not in this checkout"
)

TEXTS = ["The bank approved the loan.", "They sat on the bank of the river. It was cold."]
TODAY = DEFAULT_VERSION  # the version "default" names in this release
NEXT = "default-next"  # the simulated newer default


@pytest.fixture(scope="module")
def next_dir(tmp_path_factory):
    """A stand-in for a newer default: the bundled model's files with one weight changed."""
    directory = tmp_path_factory.mktemp("models") / "default"
    shutil.copytree(DEFAULT_MODEL_DIR, directory)
    with h5py.File(directory / "weights.hdf5", "a") as f:
        f["CNN_proj/b_proj"][0] += 1.0
    return directory


def swap_default(monkeypatch, directory, keep_today=True):
    """Make ``directory`` the bundled default (``NEXT``), as a later release will; ``keep_today=False``: a
    release that no longer bundles today's default."""
    newer = BundledVersion(NEXT, directory, fingerprint(*resolve_model_files(directory)), "a newer model")
    versions = {**VERSIONS, newer.name: newer} if keep_today else {newer.name: newer}
    monkeypatch.setattr(bundled_versions, "VERSIONS", versions)
    monkeypatch.setattr(bundled_versions, "DEFAULT_VERSION", newer.name)
    monkeypatch.setattr(model_paths, "DEFAULT_MODEL_DIR", directory)


def layers(nlp):
    return [nlp(text)._.elmo_layers for text in TEXTS]


def assert_same(actual, expected):
    for a, b in zip(actual, expected):
        np.testing.assert_array_equal(a, b)


def followed(caplog, version=TODAY):
    """The spacy_elmo log messages that name bundled version ``version``."""
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("spacy_elmo")]
    return [m for m in messages if version in m]


# -- the table ---------------------------------------------------------------------------------


def test_each_versions_fingerprint_is_that_of_its_files():
    for version in VERSIONS.values():
        assert fingerprint(*resolve_model_files(version.directory)) == version.files_fingerprint, version.name
    assert VERSIONS[DEFAULT_VERSION].directory == DEFAULT_MODEL_DIR  # "default" is the version the table says
    assert load_bilm().files_fingerprint == VERSIONS[DEFAULT_VERSION].files_fingerprint


def test_each_versions_files_are_declared_package_data():
    """A wheel ships every bundled version's files: each folder is a package-data entry of pyproject.toml listing
    every file in it (a version folder left out would install a spacy-elmo whose version names fail)."""
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11's tomllib")
    root = Path(spacy_elmo.__file__).resolve().parents[1]
    if not (root / "pyproject.toml").is_file():
        pytest.skip("spacy-elmo is installed without its pyproject.toml (not from a checkout)")
    declared = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for version in VERSIONS.values():
        package = ".".join(version.directory.resolve().relative_to(root).parts)
        files = sorted(p.name for p in version.directory.iterdir() if p.is_file())
        assert package in declared, f"{version.name}: add {package!r} to [tool.setuptools.package-data]"
        assert sorted(declared[package]) == files, f"{version.name}: {package!r} must list {files}"


def test_the_version_name_gives_todays_default_everywhere_a_model_is_named():
    assert load_bilm(TODAY) is load_bilm("default")  # the same files: the same shared backend
    sentences = [text.split() for text in TEXTS]
    assert_same(load_bilm(TODAY).embed(sentences), load_bilm("default").embed(sentences))
    named, default = spacy.blank("en"), spacy.blank("en")
    named.add_pipe("elmo", config={"model": TODAY})
    default.add_pipe("elmo")
    assert_same(layers(named), layers(default))
    np.testing.assert_array_equal(
        ElmoVectorizer(model=TODAY).fit_transform(TEXTS), ElmoVectorizer().fit_transform(TEXTS)
    )
    runner = CliRunner()
    listing = runner.invoke(app, ["models"])
    assert listing.exit_code == 0 and any(line.startswith(f"{TODAY} ") for line in listing.output.splitlines())
    info = runner.invoke(app, ["info", TODAY])
    assert info.exit_code == 0 and str(DEFAULT_MODEL_DIR) in info.output


def test_the_swap_changes_the_default(monkeypatch, next_dir):
    """The simulation is real: after it, "default" gives other vectors and today's version name today's."""
    sentence = [TEXTS[0].split()]
    before = load_bilm().embed(sentence)[0]
    swap_default(monkeypatch, next_dir)
    assert load_bilm().files_fingerprint != VERSIONS[TODAY].files_fingerprint
    assert not np.array_equal(load_bilm().embed(sentence)[0], before)
    np.testing.assert_array_equal(load_bilm(TODAY).embed(sentence)[0], before)


# -- saved pipelines -----------------------------------------------------------------------------


@pytest.mark.parametrize("embedded_before_saving", [True, False])
def test_a_pipeline_saved_with_the_default_keeps_its_vectors_after_the_default_changes(
    monkeypatch, next_dir, tmp_path, caplog, embedded_before_saving
):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    expected = layers(nlp) if embedded_before_saving else None
    nlp.to_disk(tmp_path / "pipeline")  # not embedded yet: the table's fingerprint is saved, nothing loaded
    data = nlp.to_bytes()
    expected = expected or layers(nlp)
    saved = json.loads((tmp_path / "pipeline" / "elmo" / "model" / "model.json").read_text())
    assert saved["source"] == "default" and saved["files_fingerprint"] == VERSIONS[TODAY].files_fingerprint

    swap_default(monkeypatch, next_dir)
    with caplog.at_level(logging.INFO, logger="spacy_elmo"):
        from_disk = spacy.load(tmp_path / "pipeline")
    assert any(f"saved with the bundled model {TODAY}" in m and "loading it" in m for m in followed(caplog))
    assert from_disk.get_pipe("elmo").model_ref.path == TODAY
    assert_same(layers(from_disk), expected)

    from_bytes = spacy.blank("en")
    from_bytes.add_pipe("elmo")
    from_bytes.from_bytes(data)
    assert_same(layers(from_bytes), expected)

    fresh = spacy.blank("en")  # a new pipeline on "default" gets the new default
    fresh.add_pipe("elmo")
    assert not np.array_equal(layers(fresh)[0], expected[0])

    from_disk.to_disk(tmp_path / "again")  # saved again: it names its version, and loads it
    again = json.loads((tmp_path / "again" / "elmo" / "model" / "model.json").read_text())
    assert again["source"] == "default" and again["model"] == TODAY
    assert_same(layers(spacy.load(tmp_path / "again")), expected)


def test_a_saved_default_that_no_bundled_version_has_says_what_to_do(monkeypatch, next_dir, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    expected = layers(nlp)
    nlp.to_disk(tmp_path / "pipeline")
    data = nlp.to_bytes()
    today_copy = tmp_path / "today-files"
    shutil.copytree(DEFAULT_MODEL_DIR, today_copy)

    swap_default(monkeypatch, next_dir, keep_today=False)  # a release that no longer bundles today's default
    today = VERSIONS[TODAY].files_fingerprint
    newer = bundled_versions.VERSIONS[NEXT].files_fingerprint
    phrases = [
        f"component 'elmo': it was saved with the bundled ELMo model 'default' whose files had fingerprint {today}, "
        f"but 'default' here has {newer}",
        "no longer bundles the model it was saved with",
        f"install the spacy-elmo version it was saved with (pip install 'spacy-elmo=={__version__}')",
        'spacy.load(PATH, config={"components.elmo.model.path": FOLDER})',
        "FOLDER being the folder spacy_elmo/models/default of that version (or a published name",
        "train the pipeline's components that follow 'elmo' again on this version's default",
    ]
    with pytest.raises(WeightFileError) as raised:
        spacy.load(tmp_path / "pipeline")
    for phrase in phrases:
        assert phrase in str(raised.value)
    fresh = spacy.blank("en")
    fresh.add_pipe("elmo")
    with pytest.raises(WeightFileError, match="no longer bundles the model it was saved with"):
        fresh.from_bytes(data)

    # the second choice works as the message says: the folder of the files it was saved with
    loaded = spacy.load(tmp_path / "pipeline", config={"components.elmo.model.path": str(today_copy)})
    for a, b in zip(layers(loaded), expected):
        assert_recomputed_close(a, b)  # another backend object (another folder): equal to float32 rounding
    other = tmp_path / "other-files"
    shutil.copytree(next_dir, other)  # other files than those it was saved with: refused, as any saved model's
    with pytest.raises(WeightFileError, match="fingerprint"):
        spacy.load(tmp_path / "pipeline", config={"components.elmo.model.path": str(other)})


def test_a_saved_default_with_a_fingerprint_of_no_version_says_what_to_do(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    nlp.to_disk(tmp_path / "pipeline")
    meta_path = tmp_path / "pipeline" / "elmo" / "model" / "model.json"
    meta = json.loads(meta_path.read_text())
    meta.update(files_fingerprint="0" * 32, fingerprint="0" * 32, spacy_elmo_version="0.1.0")
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(WeightFileError) as raised:
        spacy.load(tmp_path / "pipeline")
    message = str(raised.value)
    assert f"fingerprint {'0' * 32}" in message and VERSIONS[DEFAULT_VERSION].files_fingerprint in message
    assert "pip install 'spacy-elmo==0.1.0'" in message and "no longer bundles" in message


@pytest.mark.filterwarnings("ignore::spacy_elmo.bilm.cpu_support.SlowPrecisionWarning")  # emulated bfloat16: fine
def test_a_pipeline_saved_before_files_fingerprints_follows_its_precision_fingerprint(monkeypatch, next_dir, tmp_path):
    """Pipelines saved before the files fingerprint was recorded hold only the vectors' (precision-specific) one."""
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"dtype": "bfloat16"})
    expected = layers(nlp)
    nlp.to_disk(tmp_path / "pipeline")
    meta_path = tmp_path / "pipeline" / "elmo" / "model" / "model.json"
    meta = json.loads(meta_path.read_text())
    assert meta["fingerprint"] != meta["files_fingerprint"] == VERSIONS[TODAY].files_fingerprint
    meta_path.write_text(json.dumps({"source": "default", "fingerprint": meta["fingerprint"]}))  # the old form
    swap_default(monkeypatch, next_dir)
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("elmo").model_ref.path == TODAY
    assert_same(layers(loaded), expected)


def test_a_pipeline_saved_with_no_fingerprint_loads_the_model_every_earlier_version_bundled(
    monkeypatch, next_dir, tmp_path, caplog
):
    """spacy-elmo 0.2.0 saved a pipeline not embedded yet as a bare reference: "default" then meant default-v1."""
    assert UNRECORDED_VERSION == "default-v1"
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    nlp.to_disk(tmp_path / "pipeline")
    meta_path = tmp_path / "pipeline" / "elmo" / "model" / "model.json"
    meta_path.write_text(json.dumps({"source": "default", "fingerprint": None, "files_fingerprint": None}))
    then = spacy.blank("en")
    then.add_pipe("elmo", config={"model": UNRECORDED_VERSION})
    expected = layers(then)
    swap_default(monkeypatch, next_dir)
    with caplog.at_level(logging.INFO, logger="spacy_elmo"):
        loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("elmo").model_ref.path == UNRECORDED_VERSION
    assert any(f"saved with the bundled model {UNRECORDED_VERSION}" in m for m in followed(caplog, UNRECORDED_VERSION))
    assert_same(layers(loaded), expected)
    # a save by this version always records its fingerprint: a bare reference of its own stays "default"
    meta_path.write_text(json.dumps({"source": "default", "fingerprint": None, "spacy_elmo_version": __version__}))
    assert spacy.load(tmp_path / "pipeline").get_pipe("elmo").model_ref.path == "default"


def test_a_pipeline_saved_with_a_version_name_loads_it(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": TODAY})
    expected = layers(nlp)
    nlp.to_disk(tmp_path / "pipeline")
    saved = json.loads((tmp_path / "pipeline" / "elmo" / "model" / "model.json").read_text())
    assert saved["model"] == TODAY and saved["files_fingerprint"] == VERSIONS[TODAY].files_fingerprint
    assert [p.name for p in (tmp_path / "pipeline" / "elmo" / "model").iterdir()] == ["model.json"]  # no copy
    assert_same(layers(spacy.load(tmp_path / "pipeline")), expected)


def test_a_version_whose_folder_this_installation_lacks_says_so(monkeypatch, tmp_path):
    gone = BundledVersion("default-gone", tmp_path / "default-gone", "0" * 32, "a trimmed installation's model")
    monkeypatch.setattr(bundled_versions, "VERSIONS", {**VERSIONS, gone.name: gone})
    with pytest.raises(WeightFileError, match=r"bundled model 'default-gone' is not part of this installation \(no "):
        load_bilm("default-gone")


# -- ElmoVectorizer --------------------------------------------------------------------------------


def test_a_fitted_vectorizer_keeps_its_vectors_after_the_default_changes(monkeypatch, next_dir, caplog):
    vectorizer = ElmoVectorizer().fit(TEXTS)
    expected = vectorizer.transform(TEXTS)
    pickled = pickle.dumps(vectorizer)
    older = pickle.loads(pickled)  # as earlier versions pickled it: a fingerprint and a cached resolution, no pin
    del older.__dict__["model_pin_"]
    older.__dict__["_resolved_model"] = (("default", older.model_fingerprint_, None), "default")
    legacy = pickle.dumps(older)

    swap_default(monkeypatch, next_dir)
    for restored in (pickle.loads(pickled), pickle.loads(legacy)):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="spacy_elmo"):
            np.testing.assert_array_equal(restored.transform(TEXTS), expected)
        assert any(f"ElmoVectorizer was fitted with the bundled model {TODAY}" in m for m in followed(caplog))
        assert restored.get_params()["model"] == "default"  # the parameter is the user's, untouched
        assert restored.model_pin_.name == "default" and not hasattr(restored, "_resolved_model")
        assert list(restored.get_feature_names_out())[:2] == ["elmo0", "elmo1"]
    refitted = pickle.loads(pickled).fit(TEXTS)  # fit again: the new default
    assert refitted.model_fingerprint_ == bundled_versions.VERSIONS[NEXT].files_fingerprint
    assert not np.array_equal(refitted.transform(TEXTS), expected)


def test_a_fitted_vectorizer_whose_version_is_gone_says_what_to_do(monkeypatch, next_dir):
    vectorizer = ElmoVectorizer().fit(TEXTS)
    swap_default(monkeypatch, next_dir, keep_today=False)
    with pytest.raises(WeightFileError) as raised:
        vectorizer.transform(TEXTS)
    message = str(raised.value)
    assert message.startswith("ElmoVectorizer(model='default'): it was fitted with the bundled ELMo model 'default'")
    for phrase in ("no longer bundles", "pip install 'spacy-elmo==", "set_params(model=FOLDER)", "fit the vectorizer"):
        assert phrase in message


def test_a_vectorizer_whose_model_changed_since_fit_loads_what_it_names(fixture_dir):
    vectorizer = ElmoVectorizer(model=str(fixture_dir)).fit(TEXTS)
    vectorizer.set_params(model="default")  # the fitted fingerprint is another model's: not a bundled version's
    np.testing.assert_array_equal(vectorizer.transform(TEXTS), ElmoVectorizer().transform(TEXTS))


# -- ElmoFineTune --------------------------------------------------------------------------------


def test_the_fine_tune_base_error_names_the_bundled_version(fixture_dir):
    message = _base_mismatch(VERSIONS[TODAY].files_fingerprint, load_bilm(fixture_dir), "elmo")
    assert f"set the elmo component's model to '{TODAY}'" in message
    assert "use the model it was trained from" in _base_mismatch("0" * 32, load_bilm(fixture_dir), "elmo")


# -- the pinned model itself ---------------------------------------------------------------------


def test_a_pin_of_a_folder_or_published_name_resolves_to_it_untouched(fixture_dir):
    from spacy_elmo.sources.pinned_model import PinnedModel

    for name in (str(fixture_dir), "original"):
        pin = PinnedModel(name, files_fingerprint="0" * 32)
        assert pin.resolve("x was saved", "x", installed=__version__, set_model="s", redo="r") == name


def test_a_pin_finds_todays_bundled_version_by_name_or_by_fingerprint(monkeypatch, next_dir, caplog):
    from spacy_elmo.sources.pinned_model import PinnedModel

    today = VERSIONS[TODAY].files_fingerprint
    assert PinnedModel("default", today).bundled("x was saved") == "default"
    assert PinnedModel("default", None, None, saved_by=None).recorded == VERSIONS[UNRECORDED_VERSION].files_fingerprint
    assert PinnedModel("default", None, None, saved_by="0.2.0").recorded is None  # recorded nothing, said so
    swap_default(monkeypatch, next_dir)
    with caplog.at_level(logging.INFO, logger="spacy_elmo"):
        assert PinnedModel("default", today).bundled("x was saved") == TODAY
    assert any(f"x was saved with the bundled model {TODAY}" in m for m in followed(caplog))
    gone = PinnedModel("default", "0" * 32, saved_by="0.1.0")
    with pytest.raises(WeightFileError, match=r"^x: it was saved with .*pip install 'spacy-elmo==0.1.0'.*\(3\) r$"):
        gone.resolve("x was saved", "x", installed=__version__, set_model="s", redo="r")
    assert gone.resolve("x was saved", "x", installed=__version__, set_model="s", redo="r", fallback="here") == "here"
