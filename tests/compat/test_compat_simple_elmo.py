"""spacy_elmo.compat.simple_elmo.ElmoModel: simple_elmo 0.9.2's API and numbers; NLPL zips everywhere a model is named.

Reference outputs: ``tests/fixtures/simple_elmo/make_reference.py`` (simple_elmo itself, TensorFlow),
for an NLPL-style zip of the shared AllenNLP test biLM with ``max_batch_size=2`` (chunks of 2, 2, 1).
"""

import importlib.util
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

import spacy_elmo
from spacy_elmo.compat.simple_elmo import ElmoModel

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "simple_elmo"
TOLERANCE = 1e-5  # of each layer's scale


def _script():
    spec = importlib.util.spec_from_file_location("make_simple_elmo_reference", HERE / "make_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _script()
TEXTS = json.loads((HERE / "texts.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def nlpl_zip(fixture_dir, tmp_path_factory):
    return SCRIPT.nlpl_zip(fixture_dir, tmp_path_factory.mktemp("nlpl") / "model.zip")


@pytest.fixture(scope="module")
def model(nlpl_zip, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("SPACY_ELMO_HOME", str(tmp_path_factory.mktemp("home")))  # the zip unpacks into the cache
    loaded = ElmoModel()
    assert loaded.load(str(nlpl_zip), max_batch_size=SCRIPT.MAX_BATCH_SIZE) == "The model is now loaded."
    yield loaded
    mp.undo()


def relative_error(got, expected, layers):
    """Max |got - expected| over each layer's max |expected|; the largest over layers."""
    if layers != "all":
        return float(np.abs(got - expected).max() / np.abs(expected).max())
    axis = 1  # (n, n_layers, ...) in both methods
    return max(
        float(
            np.abs(np.take(got, k, axis) - np.take(expected, k, axis)).max() / np.abs(np.take(expected, k, axis)).max()
        )
        for k in range(expected.shape[axis])
    )


@pytest.mark.parametrize("method, layers, warmup", SCRIPT.CALLS)
def test_equals_simple_elmo(model, method, layers, warmup):
    with np.load(HERE / "reference.npz", allow_pickle=False) as data:
        expected = data[f"{method}_{layers}_{'warmup' if warmup else 'nowarmup'}"]
    got = getattr(model, method)(TEXTS, warmup=warmup, layers=layers)
    assert got.dtype == np.float64 and got.shape == expected.shape
    error = relative_error(got, expected, layers)
    print(f"{method}(layers={layers!r}, warmup={warmup}): max error / layer scale {error:.1e}")
    assert error <= TOLERANCE
    stateless = getattr(model, method)(TEXTS, warmup=warmup, layers=layers, stateless=True)
    assert relative_error(stateless, expected, layers) > 1e-3  # the carried state and padding do show


def test_attributes_after_load(model):
    assert (model.batch_size, model.vector_size, model.n_layers, model.max_chars) == (2, 32, 3, 50)


def test_stateless_vectors_are_the_backends_and_batch_invariant(model, nlpl_zip):
    vectors = model.get_elmo_vectors(TEXTS, layers="all", stateless=True)
    backend = model.backend
    for row, text in enumerate(TEXTS):
        np.testing.assert_allclose(vectors[row, :, : len(text)], backend.embed([text])[0], atol=1e-6)
        assert not vectors[row, :, len(text) :].any()  # padding is zero here
    other = ElmoModel()
    other.load(str(nlpl_zip), max_batch_size=1)
    np.testing.assert_allclose(
        other.get_elmo_vector_average(TEXTS, stateless=True),
        model.get_elmo_vector_average(TEXTS, stateless=True),
        atol=1e-6,
    )


def test_the_readme_usage_runs_with_only_the_import_changed(nlpl_zip, fixture_dir, tmp_path):
    """simple_elmo's README: load a zip or a directory, get_elmo_vectors, get_elmo_vector_average."""
    with zipfile.ZipFile(nlpl_zip) as archive:
        archive.extractall(tmp_path / "model")
    sentences = [["This", "is", "a", "test"], ["Another", "sentence"]]
    model = ElmoModel()
    model.load(str(tmp_path / "model"))
    vectors = model.get_elmo_vectors(sentences)
    assert vectors.shape == (2, 4, 32)
    averaged = model.get_elmo_vector_average(sentences)
    assert averaged.shape == (2, 32) and np.allclose(np.linalg.norm(averaged, axis=1), 1)
    assert model.get_elmo_vectors(sentences, layers="all").shape == (2, 3, 4, 32)


def test_nlpl_zip_loads_everywhere_a_model_is_named(nlpl_zip, fixture_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("SPACY_ELMO_HOME", str(tmp_path))
    from spacy_elmo import ElmoVectorizer

    expected = spacy_elmo.load_bilm(fixture_dir).embed([TEXTS[0]])[0]
    np.testing.assert_allclose(spacy_elmo.load_bilm(nlpl_zip).embed([TEXTS[0]])[0], expected, atol=1e-6)
    rows = ElmoVectorizer(model=str(nlpl_zip), layers="top", pooling="mean").fit_transform([" ".join(TEXTS[0])])
    np.testing.assert_allclose(rows[0], expected[-1].mean(axis=0), atol=1e-6)


def test_what_is_refused(nlpl_zip, tmp_path):
    model = ElmoModel()
    with pytest.raises(RuntimeError, match="no model loaded"):
        model.get_elmo_vectors(TEXTS)
    with pytest.raises(ValueError, match="full=True"):
        model.load(str(nlpl_zip), full=True)
    with pytest.raises(FileNotFoundError, match="ELMo model not found"):
        model.load(str(tmp_path / "missing.zip"))
    model.load(str(nlpl_zip))
    with pytest.raises(ValueError, match=r"layers='bottom': expected one of 'average', 'top', 'all'"):
        model.get_elmo_vectors(TEXTS, layers="bottom")


def test_plain_strings_and_non_str_tokens_are_refused_as_the_backend_refuses_them(model):
    """A list of untokenized strings would be split into characters; a non-str token has no characters."""
    for method in ("get_elmo_vectors", "get_elmo_vector_average"):
        for stateless in (False, True):
            with pytest.raises(TypeError, match=r"sentence 0 is a str, not a sequence of token strings \(tokenize"):
                getattr(model, method)(["the cat sat .", "they saw money ."], stateless=stateless)
            with pytest.raises(TypeError, match=r"sentence 1, token 2: expected str, got int \(7\)"):
                getattr(model, method)([["a"], ["b", "c", 7]], stateless=stateless)


def _own_average(layers, choice):
    """The stateless average, computed independently: the text's own tokens, each layer's mean, unit length."""
    n_layers = layers.shape[0]
    if choice == "top":
        means = layers[-1:].mean(axis=1)
    elif choice == "average":  # softmax of equal logits: the plain mean of the layers
        means = (layers.sum(axis=0) / n_layers).mean(axis=0, keepdims=True)
    else:
        means = layers.mean(axis=1)
    means = means.astype(np.float64) / np.linalg.norm(means.astype(np.float64), axis=1, keepdims=True)
    return means if choice == "all" else means[0]


@pytest.mark.parametrize("layers", ["average", "top", "all"])
def test_stateless_averages_are_the_same_in_any_company(model, layers):
    """Each text alone, and among texts of other lengths in one chunk, gives its own tokens' average."""
    alone = np.stack([model.get_elmo_vector_average([text], layers=layers, stateless=True)[0] for text in TEXTS])
    together = model.get_elmo_vector_average(TEXTS, layers=layers, stateless=True)
    reversed_ = model.get_elmo_vector_average(TEXTS[::-1], layers=layers, stateless=True)[::-1]
    for row, text in enumerate(TEXTS):
        expected = _own_average(model.backend.embed([text])[0], layers)
        # unit vectors from float32 activations: 1e-6 is float32 rounding after another batch shape
        np.testing.assert_allclose(alone[row], expected, atol=1e-6)
        np.testing.assert_allclose(together[row], expected, atol=1e-6)
        np.testing.assert_allclose(reversed_[row], expected, atol=1e-6)
    if layers == "all":
        np.testing.assert_allclose(
            together[:, -1], model.get_elmo_vector_average(TEXTS, layers="top", stateless=True), atol=1e-6
        )


@pytest.mark.parametrize("stateless", [False, True])
@pytest.mark.parametrize("layers", ["average", "top", "all"])
def test_an_empty_text_gives_a_zero_average_not_nan(model, layers, stateless):
    """simple_elmo divides 0 by 0 where a text's average is zero; here that row is zeros, without warnings."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "invalid value encountered in divide" would fail here
        alone = model.get_elmo_vector_average([[]], layers=layers, stateless=stateless)
        mixed = model.get_elmo_vector_average([["x", "y"], []], layers=layers, stateless=stateless)
    assert np.isfinite(alone).all() and np.isfinite(mixed).all()
    assert not alone.any()
    assert np.linalg.norm(mixed[0]) > 0.5
    if stateless:  # the empty text's own tokens: none
        assert not mixed[1].any()
