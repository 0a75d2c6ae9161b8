"""ElmoVectorizer: values against the backend by hand, scikit-learn conventions, pipelines, Doc reuse, errors."""

import os
import pickle
import re
import runpy
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import spacy
from sklearn import utils as sklearn_utils
from sklearn.base import clone
from sklearn.compose import ColumnTransformer
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import FeatureUnion, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils import estimator_checks
from spacy.tokens import Doc

from spacy_elmo import ElmoVectorizer, WeightFileError, load_bilm
from spacy_elmo.groundwork.probe import feature
from spacy_elmo.runtime.configuration.defaults import DEFAULT_MAX_LENGTH, DEFAULT_OVERLAP
from spacy_elmo.runtime.embedding.windows import embed_segments
from spacy_elmo.sklearn import EmptyTextWarning
from tests.numerics import assert_recomputed_close

TEXTS = ["The bank approved the loan .", "I sat on the river bank .", "", "Birds  fly\n south ."]


@pytest.fixture(scope="module")
def vec(fixture_dir):
    return ElmoVectorizer(model=str(fixture_dir))


@pytest.fixture(scope="module")
def blank_en():
    return spacy.blank("en")


@pytest.fixture
def embed_spy(backend, monkeypatch):
    """Record the sentences every backend.embed call receives (the backend is the shared cached object). The class's
    method is replaced, not the object's: pytest 7.0's monkeypatch puts an object's attribute back as the bound
    method, which would then hide the class's from every later test that spies on it."""
    calls = []
    real = type(backend).embed

    def spy(self, sentences, **kwargs):
        if self is backend:
            sentences = [list(s) for s in sentences]
            calls.append(sentences)
        return real(self, sentences, **kwargs)

    monkeypatch.setattr(type(backend), "embed", spy)
    return calls


def by_hand(acts, layer_w, pooling):
    """Independent reference: weighted layer sum, then numpy mean/max over tokens."""
    mixed = np.einsum("l,ltd->td", np.asarray(layer_w, dtype=np.float64), acts.astype(np.float64))
    if mixed.shape[0] == 0:
        return np.zeros(mixed.shape[1] * len(pooling.split("+")))
    blocks = {"mean": mixed.mean(axis=0), "max": mixed.max(axis=0)}
    return np.concatenate([blocks[p] for p in pooling.split("+")])


@pytest.fixture(scope="module")
def reference(backend, fixture_sentences, blank_en):
    """Texts and their activations, each sentence embedded alone from its spaCy tokens without whitespace."""
    texts = [" ".join(s) for s in fixture_sentences[:8]] + TEXTS
    return texts, [backend.embed([[t.text for t in blank_en(text) if not t.is_space]])[0] for text in texts]


@pytest.mark.parametrize(
    "layers, weights, pooling",
    [
        ("average", [1 / 3] * 3, "mean"),
        ("top", [0, 0, 1], "max"),
        (1, [0, 1, 0], "mean+max"),
        (-3, [1, 0, 0], "mean"),
        ([0.0, np.log(2.0), np.log(5.0)], [1 / 8, 2 / 8, 5 / 8], "max"),
        ("average", [1 / 3] * 3, "mean+max"),
    ],
)
def test_values_equal_pooled_backend_embed(fixture_dir, backend, reference, layers, weights, pooling):
    texts, activations = reference
    X = ElmoVectorizer(model=str(fixture_dir), layers=layers, pooling=pooling).fit_transform(texts)
    assert X.dtype == np.float32 and X.shape == (len(texts), backend.dim * len(pooling.split("+")))
    for row, acts in zip(X, activations):
        assert_recomputed_close(row, by_hand(acts, weights, pooling))


def test_token_lists_whitespace_and_empty_rows(vec, backend):
    X_text = vec.transform(["Birds  fly\n south .", "", "   "])
    X_tok = vec.transform([["Birds", " ", "fly", "\n ", "south", "."], [], ["  "]])
    np.testing.assert_array_equal(X_text, X_tok)
    expected = backend.embed([["Birds", "fly", "south", "."]])[0].mean(axis=0).mean(axis=0)
    assert_recomputed_close(X_text[0], expected)
    assert not X_text[1:].any() and X_text[0].any()  # empty / whitespace-only text -> zero row
    assert vec.transform(np.array([["a", "b"], ["c", "d"]], dtype=object).tolist()).shape == (2, backend.dim)


def test_samples_without_tokens_warn_once_and_keep_their_zero_rows(vec, blank_en, backend):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's own filter: each warning once per place it is raised from
        X = vec.fit_transform(["", "   "])
        again = vec.transform(["a b", "\n"])
        docs = vec.transform([blank_en(""), blank_en("a b")])
    assert X.shape == (2, backend.dim) and not X.any()  # the documented zero rows, still
    assert not again[1].any() and again[0].any() and not docs[0].any()
    (warning,) = [w for w in caught if issubclass(w.category, EmptyTextWarning)]
    assert "no tokens" in str(warning.message) and "zeros" in str(warning.message)
    for samples in (["", "a"], [blank_en(" ")]):  # each kind of input says it (a fresh filter state each time)
        with pytest.warns(EmptyTextWarning):
            vec.transform(samples)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmptyTextWarning)
        vec.transform(["a b", "c"])  # every sample has tokens: nothing to say


def read_tags(est) -> dict:
    """``est``'s tags as this scikit-learn reads them: ``get_tags`` (1.6+, from ``__sklearn_tags__``), or
    ``BaseEstimator._get_tags`` (before 1.6, from ``_more_tags``)."""
    get_tags = feature(sklearn_utils, "get_tags")
    if get_tags is not None:
        tags = get_tags(est)
        return {
            "string": tags.input_tags.string,
            "two_d_array": tags.input_tags.two_d_array,
            "requires_fit": tags.requires_fit,
            "preserves_dtype": [np.dtype(d) for d in tags.transformer_tags.preserves_dtype],
        }
    tags = est._get_tags()
    return {
        "string": "string" in tags["X_types"],
        "two_d_array": "2darray" in tags["X_types"],
        "requires_fit": tags["requires_fit"],
        "preserves_dtype": [np.dtype(d) for d in tags["preserves_dtype"]],
    }


def test_tags_state_the_float32_rows(fixture_dir):
    est = ElmoVectorizer(model=str(fixture_dir))
    out = est.fit_transform(TEXTS[:2])
    assert read_tags(est)["preserves_dtype"] == [out.dtype] == [np.float32]


def test_identical_texts_are_embedded_once(vec, embed_spy):
    X = vec.transform(["a b", "c", "a b", "a  b", "c"])
    assert sorted(map(tuple, embed_spy[0])) == [("a", "b"), ("c",)] and len(embed_spy) == 1
    np.testing.assert_array_equal(X[0], X[2])
    np.testing.assert_array_equal(X[0], X[3])


def test_input_containers_give_same_rows(vec):
    expected = vec.transform(TEXTS)
    containers = (
        tuple(TEXTS),
        np.array(TEXTS, dtype=object),
        np.array(TEXTS),
        pd.Series(TEXTS),
        pd.DataFrame({"t": TEXTS}),
        pd.Series(TEXTS, dtype="string"),
        (t for t in TEXTS),
    )
    for X in containers:
        np.testing.assert_array_equal(vec.transform(X), expected)
    assert vec.fit_transform(t for t in TEXTS).shape == expected.shape  # a generator is read once
    assert vec.transform([]).shape == (0, expected.shape[1])


def test_tokenizer_options(fixture_dir, blank_en):
    base = {"model": str(fixture_dir)}
    text = ["Don't stop-gap it, ok?"]
    default = ElmoVectorizer(**base).transform(text)
    np.testing.assert_array_equal(ElmoVectorizer(**base, tokenizer="en").transform(text), default)
    np.testing.assert_array_equal(ElmoVectorizer(**base, tokenizer=blank_en.tokenizer).transform(text), default)
    by_split = ElmoVectorizer(**base, tokenizer=str.split).transform(text)
    np.testing.assert_array_equal(by_split, ElmoVectorizer(**base).transform([text[0].split()]))
    assert not np.allclose(by_split, default)  # spaCy splits "Don't" and "it," differently
    # the names the CLI and training use (spacy_elmo.runtime.features.tokenize.resolve_tokenizer) mean the same here
    np.testing.assert_array_equal(ElmoVectorizer(**base, tokenizer="whitespace").transform(text), by_split)
    np.testing.assert_array_equal(ElmoVectorizer(**base, tokenizer="spacy").transform(text), default)
    with pytest.raises(ValueError, match="tokenizer='zz'"):
        ElmoVectorizer(**base, tokenizer="zz").transform(text)
    with pytest.raises(TypeError, match="tokenizer=3"):
        ElmoVectorizer(**base, tokenizer=3).fit(text)
    with pytest.raises(TypeError, match="sample 0, token 1"):
        ElmoVectorizer(**base, tokenizer=lambda s: ["ok", 7]).transform(text)


@pytest.mark.parametrize(
    "X, error, match",
    [
        (["ok", None], TypeError, r"sample 1 is NoneType .*missing value"),
        (["ok", 3.5], TypeError, r"sample 1 is float \(3.5\)"),
        (pd.Series(["ok", "fine", np.nan]), TypeError, r"sample 2 is float \(nan\).*missing"),
        ([["ok"], ["fine", 2]], TypeError, r"sample 1, token 1: expected a string.*int"),
        ([["ok"], [["nested"]]], TypeError, r"sample 1, token 0: expected a string.*list"),
        (["ok", ["fine"]], TypeError, r"sample 1 is a token list \(list\) but sample 0 is a string"),
        ([b"bytes"], TypeError, r"sample 0 is bytes"),
        ("just one text", TypeError, r"not a single str"),
        (None, TypeError, r"not a single NoneType"),
        (5, TypeError, r"not int"),
        (pd.DataFrame({"a": ["x"], "b": ["y"]}), ValueError, r"X has 2 columns"),
    ],
)
def test_bad_input_names_sample_and_type(vec, X, error, match):
    with pytest.raises(error, match=match):
        vec.transform(X)
    with pytest.raises(error, match=match):
        vec.fit_transform(X)


def test_rows_of_one_whole_text_are_refused_not_read_as_one_token_each(vec):
    df = pd.DataFrame({"text": ["a great movie", "bad plot"]})
    one_word_then_a_text = [["great"], ["bad\tplot " + "x" * 100]]
    for X, where in (
        (df[["text"]].values.tolist(), r"sample 0 is .* one token with several words \('a great movie'\)"),
        (one_word_then_a_text, r"sample 1 is .* one token with several words \('bad\\tplot x{31}\.\.\.'\)"),
    ):
        for call in (vec.fit, vec.transform, vec.fit_transform):
            with pytest.raises(ValueError, match=where + r".*pass the texts as strings \(df\['text'\]") as err:
                call(X)
            assert "\n" not in str(err.value)
    np.testing.assert_array_equal(vec.transform(df[["text"]]), vec.transform(df["text"]))  # the frame is one column
    merged = vec.transform([["New York", "is", "big"]])  # a merged token among others is taken as given
    assert not np.allclose(merged, vec.transform([["New", "York", "is", "big"]]))


@pytest.mark.parametrize(
    "params, error, match",
    [
        ({"pooling": "sum"}, ValueError, "pooling='sum'"),
        ({"layers": "bottom"}, ValueError, "layers='bottom'"),
        ({"layers": 3}, ValueError, "layers=3"),
        ({"layers": [1.0, 2.0]}, ValueError, "exactly 3 weights"),
        ({"batch_size": 0}, ValueError, "batch_size=0"),
        ({"batch_size": True}, ValueError, "batch_size=True"),
        ({"model": 42}, TypeError, "model=42"),
        ({"max_length": 0}, ValueError, "max_length=0"),
        ({"max_length": 10, "window_overlap": 10}, ValueError, "window_overlap=10"),
    ],
)
def test_bad_params_raise_in_fit_not_init(fixture_dir, params, error, match):
    est = ElmoVectorizer(**{"model": str(fixture_dir), **params})  # __init__ never validates
    with pytest.raises(error, match=match):
        est.fit(["a"])
    with pytest.raises(error, match=match):
        est.transform(["a"])


def test_a_layer_spec_the_model_lacks_fails_fit_before_any_fitted_state(fixture_dir):
    est = ElmoVectorizer(model=str(fixture_dir), layers=[1.0, 2.0])
    for call in (est.fit, est.fit_transform):
        with pytest.raises(ValueError, match="exactly 3 weights"):
            call(TEXTS)
        assert not [name for name in vars(est) if name.endswith("_")]


def test_each_call_finds_the_kind_of_its_samples_once(vec, monkeypatch):
    """fit_transform looked at every sample's kind twice: before fitting, and again when pooling."""
    import spacy_elmo.runtime.features.text_rows as text_rows

    seen = []
    kind = text_rows._kind
    monkeypatch.setattr(text_rows, "_kind", lambda sample: seen.append(sample) or kind(sample))
    for call in (vec.fit, vec.transform, vec.fit_transform):
        seen.clear()
        call(TEXTS)
        assert seen == TEXTS, call.__name__


def test_the_public_methods_are_the_ones_scikit_learn_calls():
    """check_settings was public, documented nowhere and called by nothing: gone."""
    own = {name for name, value in vars(ElmoVectorizer).items() if callable(value) and not name.startswith("_")}
    assert own == {"fit", "fit_transform", "transform", "get_feature_names_out"}


def test_missing_model_dir_is_a_weight_file_error(tmp_path):
    with pytest.raises(WeightFileError, match="not found"):
        ElmoVectorizer(model=str(tmp_path / "nope")).fit(["a"])


def test_feature_names_and_pandas_output(fixture_dir, backend):
    est = ElmoVectorizer(model=str(fixture_dir))
    names = est.get_feature_names_out()
    assert list(names) == [f"elmo{i}" for i in range(backend.dim)]
    both = est.set_params(pooling="mean+max").get_feature_names_out()
    assert list(both[:2]) == ["elmo_mean0", "elmo_mean1"] and both[backend.dim] == "elmo_max0"
    assert len(both) == 2 * backend.dim
    series = pd.Series(TEXTS, index=[10, 11, 12, 13], name="text")
    df = est.set_output(transform="pandas").fit_transform(series)
    assert isinstance(df, pd.DataFrame) and list(df.columns) == list(both) and list(df.index) == [10, 11, 12, 13]
    expected = ElmoVectorizer(model=str(fixture_dir), pooling="mean+max").transform(TEXTS)
    np.testing.assert_array_equal(df.to_numpy(), expected)


def test_fit_returns_self_stores_params_untouched_and_is_stateless(fixture_dir, backend):
    layers = [0.0, 1.0, 2.0]
    est = ElmoVectorizer(model=str(fixture_dir), layers=layers, device=None)
    unfitted = est.transform(TEXTS)  # requires_fit=False: transform works before fit
    assert not hasattr(est, "model_fingerprint_")
    assert est.fit(TEXTS) is est
    assert est.layers is layers and est.device is None and est.model == str(fixture_dir)
    assert est.model_fingerprint_ == backend.fingerprint
    np.testing.assert_allclose(est.layer_weights_, np.exp(layers) / np.exp(layers).sum())
    np.testing.assert_array_equal(est.transform(TEXTS), unfitted)
    tags = read_tags(est)
    assert tags["string"] and not tags["two_d_array"] and not tags["requires_fit"]
    assert not hasattr(est, "n_features_in_")  # 1-D text input, as TfidfVectorizer


def test_clone_and_params_round_trip(fixture_dir):
    est = ElmoVectorizer(model=str(fixture_dir), layers=[1.0, 0.0, 0.0], pooling="max", batch_size=2).fit(TEXTS)
    copy = clone(est)
    assert copy.get_params() == est.get_params() and not hasattr(copy, "layer_weights_")
    assert copy.layers == est.layers and copy.layers is not est.layers
    np.testing.assert_array_equal(copy.transform(TEXTS), est.transform(TEXTS))
    changed = clone(est).set_params(layers="top", pooling="mean+max")
    assert changed.get_params()["layers"] == "top"
    assert changed.transform(TEXTS).shape[1] == 2 * est.transform(TEXTS).shape[1]


@pytest.mark.parametrize(
    "name",
    [
        "check_estimator_cloneable",  # scikit-learn 1.6+
        "check_no_attributes_set_in_init",
        "check_parameters_default_constructible",
        "check_get_params_invariance",
        "check_set_params",
        "check_do_not_raise_errors_in_init_or_set_params",  # scikit-learn 1.6+
    ],
)
def test_sklearn_estimator_checks_that_apply_to_text_input(name):
    check = feature(estimator_checks, name)
    if check is None:
        pytest.skip(f"this scikit-learn has no estimator_checks.{name}")
    check("ElmoVectorizer", ElmoVectorizer())


def test_pickle_is_small_and_reloads_the_shared_backend(fixture_dir, backend):
    est = ElmoVectorizer(model=str(fixture_dir), pooling="mean+max").fit(TEXTS)
    before = est.transform(TEXTS)
    blob = pickle.dumps(est)
    assert len(blob) < 2000 < backend.weights_path.stat().st_size  # parameters only, no weights
    assert b"ElmoBackend" not in blob and b"hdf5" not in blob
    restored = pickle.loads(blob)
    assert restored.get_params() == est.get_params() and restored.model_fingerprint_ == est.model_fingerprint_
    np.testing.assert_array_equal(restored.transform(TEXTS), before)
    assert load_bilm(fixture_dir) is backend  # still one model in this process


def _changed_files_message(folder, since, fitted=None):
    """The one line a vectorizer refuses model files with that changed on disk since ``since``."""
    then = re.escape(fitted) if fitted else "[0-9a-f]{32}"
    return (
        rf"^ElmoVectorizer\(model={re.escape(repr(str(folder)))}\): the ELMo model files in {re.escape(str(folder))} "
        rf"changed on disk since {since} \(fingerprint {then} then, [0-9a-f]{{32}} now\): [^\n]+$"
    )


def test_weights_replaced_on_disk_since_fit_are_refused_not_used(model_folder):
    """Weights replaced in a fitted vectorizer's model folder (same shapes) gave other features under the fit's pin,
    in the same process and after unpickling; transform refuses them, naming the folder and both fingerprints."""
    est = ElmoVectorizer(model=str(model_folder.path)).fit(TEXTS)
    before = est.transform(TEXTS)
    blob = pickle.dumps(est)
    np.testing.assert_array_equal(pickle.loads(blob).transform(TEXTS), before)  # files unchanged: as fitted
    fitted = est.model_pin_.files_fingerprint

    model_folder.replace_weights()
    message = _changed_files_message(model_folder.path, "it was fitted", fitted)
    with pytest.raises(WeightFileError, match=message) as err:
        est.transform(TEXTS)
    assert "put back the files it was fitted with, or fit the vectorizer" in str(err.value)
    assert str(err.value).count(fitted) == 1
    with pytest.raises(WeightFileError, match=message):
        pickle.loads(blob).transform(TEXTS)
    refitted = clone(est).fit(TEXTS)  # what the message says: fit again on these files ...
    assert refitted.model_pin_.files_fingerprint != fitted
    assert np.abs(refitted.transform(TEXTS) - before).max() > 1e-3

    model_folder.put_back()  # ... or put the files back
    assert_recomputed_close(est.transform(TEXTS), before)
    assert_recomputed_close(pickle.loads(blob).transform(TEXTS), before)
    with pytest.raises(WeightFileError, match=_changed_files_message(model_folder.path, "it was fitted")):
        refitted.transform(TEXTS)


def test_unchanged_files_are_checked_without_reading_their_weights(model_folder, monkeypatch):
    """transform checks the files against the fit's pin by their size, times and inode: the weights (hundreds of MB
    for a published model) are read again only once they changed."""
    from spacy_elmo.sources import model_paths

    est = ElmoVectorizer(model=str(model_folder.path)).fit(TEXTS)
    reads = []

    def spied_open(file, *args, **kwargs):
        reads.append(Path(file).name)
        return open(file, *args, **kwargs)

    monkeypatch.setattr(model_paths, "open", spied_open, raising=False)
    est.transform(TEXTS)
    est.transform(TEXTS)
    assert reads == []
    model_folder.replace_weights()
    with pytest.raises(WeightFileError, match="changed on disk since it was fitted"):
        est.transform(TEXTS)
    assert reads == ["weights.hdf5"]


def test_files_changed_under_the_loaded_model_with_size_and_mtime_kept_are_refused(model_folder):
    """The process keeps one loaded model per files, size and mtime: weights replaced with both kept (the mtime put
    back) were embedded with the weights loaded before them; the files are checked against the loaded model."""
    ElmoVectorizer(model=str(model_folder.path)).fit(TEXTS)
    stat = model_folder.weights.stat()
    model_folder.replace_weights()
    os.utime(model_folder.weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    message = _changed_files_message(model_folder.path, "this process loaded them")
    with pytest.raises(WeightFileError, match=message) as err:
        ElmoVectorizer(model=str(model_folder.path)).transform(TEXTS)
    assert "put back the files it loaded, or start a new Python process" in str(err.value)
    with pytest.raises(WeightFileError, match=message):
        ElmoVectorizer(model=str(model_folder.path)).fit(TEXTS)


def test_pipeline_featureunion_and_columntransformer(fixture_dir, backend):
    texts = ["good fun film", "a great movie", "bad dull film", "an awful movie"] * 3
    y = [1, 1, 0, 0] * 3
    clf = make_pipeline(ElmoVectorizer(model=str(fixture_dir)), LogisticRegression(max_iter=500)).fit(texts, y)
    predicted = clf.predict(texts)
    # four distinct texts in a 32-wide feature space are linearly separable: the fit gets every one right, and
    # score is the share of predictions equal to the labels, counted here
    assert predicted.tolist() == y
    assert clf.score(texts, y) == np.mean(predicted == np.asarray(y)) == 1.0

    union = FeatureUnion([("tfidf", TfidfVectorizer()), ("elmo", ElmoVectorizer(model=str(fixture_dir)))])
    Z = union.fit_transform(texts)
    n_vocab = len(union.transformer_list[0][1].vocabulary_)
    assert Z.shape == (12, n_vocab + backend.dim)
    assert union.get_feature_names_out()[-1] == f"elmo__elmo{backend.dim - 1}"

    frame = pd.DataFrame({"text": texts, "n": np.arange(12.0)})
    for column in ("text", ["text"]):
        ct = ColumnTransformer([("elmo", ElmoVectorizer(model=str(fixture_dir)), column)], remainder="passthrough")
        out = ct.fit_transform(frame)
        assert out.shape == (12, backend.dim + 1)
        np.testing.assert_array_equal(out[:, : backend.dim], ElmoVectorizer(model=str(fixture_dir)).transform(texts))
        assert ct.get_feature_names_out()[0] == "elmo__elmo0"


@pytest.mark.slow
def test_grid_search_over_pooling_and_layers_in_one_and_two_processes(fixture_dir):
    texts = ["good fun film", "a great movie", "bad dull film", "an awful movie", "fine acting", "poor plot"] * 2
    y = [1, 1, 0, 0, 1, 0] * 2
    pipe = make_pipeline(ElmoVectorizer(model=str(fixture_dir)), LogisticRegression(max_iter=500))
    grid = {"elmovectorizer__pooling": ["mean", "mean+max"], "elmovectorizer__layers": ["average", "top"]}
    scores = {}
    for n_jobs in (1, 2):
        search = GridSearchCV(pipe, grid, cv=2, n_jobs=n_jobs).fit(texts, y)
        scores[n_jobs] = search.cv_results_["mean_test_score"]
        assert search.best_params_["elmovectorizer__pooling"] in ("mean", "mean+max")
    np.testing.assert_allclose(scores[1], scores[2])  # workers reload the same model from the files


# -- spaCy Docs ------------------------------------------------------------------------------


def _ensure_doc_extensions():
    for name in ("elmo_layers", "elmo_model"):
        if not Doc.has_extension(name):
            Doc.set_extension(name, default=None)


def _annotated(blank_en, backend, text):
    doc = blank_en(text)
    doc._.elmo_layers = backend.embed([[t.text for t in doc]])[0]
    doc._.elmo_model = backend.fingerprint
    return doc


def test_doc_with_stored_layers_is_pooled_not_recomputed(fixture_dir, backend, blank_en, embed_spy):
    _ensure_doc_extensions()
    docs = [_annotated(blank_en, backend, t) for t in ("The bank approved it .", "Birds  fly .", "")]
    embed_spy.clear()
    X = ElmoVectorizer(model=str(fixture_dir), pooling="mean+max").fit_transform(docs)
    assert embed_spy == []  # no recompute
    for row, doc in zip(X, docs):
        keep = [t.i for t in doc if not t.is_space]
        expected = by_hand(doc._.elmo_layers[:, keep], [1 / 3] * 3, "mean+max")
        assert_recomputed_close(row, expected)
    docs[0]._.elmo_layers = docs[0]._.elmo_layers * 2  # the stored values are what is read
    doubled = ElmoVectorizer(model=str(fixture_dir)).transform(docs[:1])[0]
    np.testing.assert_allclose(doubled, 2 * X[0, : backend.dim], rtol=1e-5)


def test_docs_without_matching_layers_are_embedded(fixture_dir, backend, blank_en, embed_spy):
    _ensure_doc_extensions()
    plain = blank_en("Birds  fly south .")
    other_model = _annotated(blank_en, backend, "A new day .")
    other_model._.elmo_model = "some-other-model"
    stale = _annotated(blank_en, backend, "It rained .")
    with stale.retokenize() as retokenizer:  # retokenized after the component ran: shape no longer fits
        retokenizer.merge(stale[0:2])
    embed_spy.clear()
    X = ElmoVectorizer(model=str(fixture_dir)).transform([plain, other_model, stale])
    embedded = sorted(map(tuple, embed_spy[0]))
    assert embedded == [("A", "new", "day", "."), ("Birds", "fly", "south", "."), ("It rained", ".")]
    np.testing.assert_array_equal(
        X,
        ElmoVectorizer(model=str(fixture_dir)).transform(
            [["Birds", "fly", "south", "."], ["A", "new", "day", "."], ["It rained", "."]]
        ),
    )


@pytest.mark.slow
def test_import_does_not_import_sklearn():
    code = (
        "import sys, spacy_elmo; assert 'sklearn' not in sys.modules; "
        "spacy_elmo.ElmoVectorizer; assert 'sklearn' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_example_script_says_missing_data_before_loading_the_model(tmp_path, monkeypatch, capsys):
    """Missing data is said at once, with where to get it, not after the model has loaded (half a minute)."""
    import spacy_elmo

    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded before the data was read")

    monkeypatch.setattr(spacy_elmo, "load_bilm", no_loading)
    monkeypatch.setattr(sys, "argv", ["sklearn_classify.py", "--dataset", "trec", "--data-dir", str(tmp_path)])
    script = Path(__file__).resolve().parents[2] / "examples" / "sklearn_classify.py"
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(script), run_name="__main__")
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "trec data not found" in err and str(tmp_path) in err and "--data-dir" in err


def test_example_script_runs_on_the_fixture(fixture_dir, data_dir, monkeypatch, capsys):
    argv = [
        "sklearn_classify.py",
        "--dataset",
        "trec",
        "--model",
        str(fixture_dir),
        "--data-dir",
        str(data_dir),
        "--max-train",
        "60",
        "--max-test",
        "20",
    ]
    monkeypatch.setattr(sys, "argv", argv)
    example = runpy.run_path(
        str(Path(__file__).resolve().parents[2] / "examples" / "sklearn_classify.py"), run_name="__main__"
    )
    out, err = capsys.readouterr()
    assert "trec: 60 train / 20 test" in out
    assert "ELMo: 100%" in err and "60/60" in err and "20/20" in err  # embedding shows its progress
    printed = {
        line.split("test accuracy")[0].strip(): float(line.split("test accuracy")[1].split()[0])
        for line in out.splitlines()
        if "test accuracy" in line
    }

    # the same subsets (seed 0, in file order) and models, fitted here; accuracy counted from the predictions
    (train_x, train_y), (test_x, test_y) = example["load_dataset"]("trec", data_dir)

    def subset(texts, labels, n):
        keep = sorted(np.random.default_rng(0).permutation(len(texts))[:n])
        return [texts[i] for i in keep], [labels[i] for i in keep]

    (train_x, train_y), (test_x, test_y) = subset(train_x, train_y, 60), subset(test_x, test_y, 20)
    elmo = ElmoVectorizer(model=str(fixture_dir), layers="average", pooling="mean", tokenizer=str.split)
    models = {
        "ELMo + LogisticRegression": make_pipeline(elmo, LogisticRegression(C=1.0, max_iter=3000)),
        "TF-IDF + LogisticRegression": make_pipeline(
            TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True), LogisticRegression(C=1.0, max_iter=3000)
        ),
    }
    assert set(printed) == set(models)
    for name, model in models.items():
        predicted = model.fit(train_x, train_y).predict(test_x)
        right = sum(p == t for p, t in zip(predicted, test_y))
        assert printed[name] == pytest.approx(right / 20, abs=1e-4), name  # printed to 4 decimals; one item: 0.05


def test_the_examples_combined_recipe_puts_l2_normalised_elmo_rows_beside_tf_idf(fixture_dir):
    """``--combined``: TF-IDF's rows (unit l2 norm) beside ``ElmoVectorizer(norm="l2")``'s, no StandardScaler (which
    made the ELMo block outweigh TF-IDF's: docs/sklearn.md); the ELMo-alone pipeline takes the rows as they are."""
    import argparse

    example = runpy.run_path(str(Path(__file__).resolve().parents[2] / "examples" / "sklearn_classify.py"))
    args = argparse.Namespace(
        model=str(fixture_dir), layers="average", pooling="mean", batch_size=None, device=None, C=1.0, combined=True
    )
    models = example["build_models"](args)
    union = models["ELMo + TF-IDF + LogisticRegression"].steps[0][1]
    (_, tfidf), (_, elmo) = union.transformer_list
    assert isinstance(tfidf, TfidfVectorizer) and tfidf.norm == "l2"
    assert isinstance(elmo, ElmoVectorizer) and elmo.norm == "l2"
    alone = models["ELMo + LogisticRegression"]
    assert [type(step) for _, step in alone.steps] == [ElmoVectorizer, LogisticRegression]
    assert alone.steps[0][1].norm is None


def test_long_texts_are_embedded_in_windows_like_the_spacy_component(fixture_dir, backend):
    from spacy_elmo.runtime.embedding.windows import window_bounds
    from spacy_elmo.runtime.features.mix import mix_layers

    tokens = [WORDS[i % len(WORDS)] + ("s" if i % 7 == 0 else "") for i in range(230)]
    est = ElmoVectorizer(model=str(fixture_dir), layers="top", max_length=100, window_overlap=20, pooling="max")
    got = est.fit_transform([tokens, tokens[:50]])
    # by hand: three windows of <= 100 tokens, each token's vectors from its own part of a window
    bounds = window_bounds(len(tokens), 100, 20)
    assert len(bounds) == 3 and all(end - start <= 100 for start, end, _, _ in bounds)
    stitched = np.concatenate(
        [backend.embed([tokens[start:end]])[0][:, ks - start : ke - start] for start, end, ks, ke in bounds], axis=1
    )
    assert stitched.shape[1] == len(tokens)
    assert_recomputed_close(got[0], mix_layers(stitched, "top").max(axis=0))
    assert_recomputed_close(got[1], mix_layers(backend.embed([tokens[:50]])[0], "top").max(axis=0))
    # None: one sequence, as before; it differs from the windowed result
    whole = est.set_params(max_length=None).fit_transform([tokens])
    assert_recomputed_close(whole[0], mix_layers(backend.embed([tokens])[0], "top").max(axis=0))
    assert not np.allclose(whole[0], got[0])
    # numpy integers from a parameter grid are accepted
    assert (
        est.set_params(max_length=np.int64(100), window_overlap=np.int64(20)).fit_transform([tokens]).shape
        == got[:1].shape
    )


def test_verbose_shows_a_progress_bar_and_changes_nothing(fixture_dir, capsys):
    quiet = ElmoVectorizer(model=str(fixture_dir)).transform(TEXTS)
    capsys.readouterr()
    loud = ElmoVectorizer(model=str(fixture_dir), verbose=1).transform(TEXTS)
    err = capsys.readouterr().err
    assert "ELMo" in err and "3/3" in err  # the three non-empty texts
    np.testing.assert_array_equal(loud, quiet)  # same texts, same batches: the same computation


def test_by_default_long_work_shows_a_bar_on_a_terminal_only(fixture_dir, monkeypatch, capsys):
    """verbose=None (the default): a bar where stderr is a terminal and the work takes a while (here: all of it, the
    delay set to nothing); verbose=0 none, as scikit-learn's estimators say nothing at 0."""
    import io

    from spacy_elmo.runtime.features import progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    for verbose, shown in [(None, True), (0, False)]:
        terminal = Terminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        ElmoVectorizer(model=str(fixture_dir), **({} if verbose is None else {"verbose": verbose})).transform(TEXTS)
        assert ("ELMo:" in terminal.getvalue()) is shown, verbose
    monkeypatch.undo()
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    ElmoVectorizer(model=str(fixture_dir)).transform(TEXTS)  # stderr captured: not a terminal
    assert capsys.readouterr().err == ""


# -- a long text is pooled window by window, never stitched ---------------------------

WORDS = [
    "the",
    "bank",
    "by",
    "the",
    "river",
    "was",
    "closed",
    "so",
    "we",
    "walked",
    "along",
    "the",
    "water",
    "to",
    "town",
]


@pytest.fixture()
def uncached_model(fixture_dir, tmp_path):
    """A copy of the fixture whose backend keeps no memory cache (so only the embedding itself takes memory)."""
    import shutil

    target = tmp_path / "model"
    shutil.copytree(fixture_dir, target)
    load_bilm(target, cache_mb=0)
    return str(target)


def _peak_mib(call):
    import tracemalloc

    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def test_one_long_text_takes_flat_memory(uncached_model):
    """The (n_layers + 1, n_tokens, dim) array was stitched before pooling: 3 x 80k x 32 float32 = 29 MiB more here."""
    est = ElmoVectorizer(model=uncached_model, pooling="mean+max")
    est.transform([WORDS])  # warm up
    short, long = ([WORDS[i % len(WORDS)] for i in range(n)] for n in (40_000, 120_000))
    growth = _peak_mib(lambda: est.transform([long])) - _peak_mib(lambda: est.transform([short]))
    assert growth < 4, f"peak memory grew by {growth:.1f} MiB for 80k more tokens"


@pytest.mark.parametrize("pooling", ["mean", "max", "mean+max"])
@pytest.mark.parametrize("layers", ["average", "top", 0, [0.2, 0.3, 0.5]])
def test_pooling_window_by_window_equals_pooling_the_stitched_layers(backend, fixture_dir, pooling, layers):
    from spacy_elmo.runtime.embedding.windows import embed_segments
    from spacy_elmo.runtime.features.mix import mix_layers
    from spacy_elmo.runtime.features.pooling import pool

    tokens = tuple(WORDS[(i * 5) % len(WORDS)] + ("s" if i % 11 == 0 else "") for i in range(300))
    est = ElmoVectorizer(model=str(fixture_dir), layers=layers, pooling=pooling, max_length=64, window_overlap=16)
    got = est.fit_transform([list(tokens), list(tokens[:40])])
    for row, sequence in enumerate((tokens, tokens[:40])):
        ((_, stitched),) = embed_segments(backend, [(0, sequence)], max_length=64, overlap=16)
        assert_recomputed_close(got[row], pool(mix_layers(stitched, layers), pooling))


def test_hub_default_rows_alone_skip_the_padded_outputs(uncached_model, backend):
    """``elmo(strings, as_dict=False)`` padded every sentence to the longest: (3, 21, 5000, 32) float32 = 38 MiB
    here."""
    from spacy_elmo import hub

    elmo = hub.load(uncached_model)
    sentences = [" ".join(WORDS[i % len(WORDS)] for i in range(5000))] + ["the bank ."] * 20
    peak = _peak_mib(lambda: elmo(sentences, as_dict=False))
    rows = elmo(sentences, as_dict=False)
    assert peak < 12, f"{peak:.1f} MiB"
    np.testing.assert_array_equal(rows, elmo.signatures["default"](sentences)["default"])
    # windowed as every front end (settings.DEFAULT_MAX_LENGTH): the stitched layers' mean over layers, then tokens
    segments = [(0, sentences[0].split())]
    ((_, stitched),) = embed_segments(backend, segments, max_length=DEFAULT_MAX_LENGTH, overlap=DEFAULT_OVERLAP)
    assert_recomputed_close(rows[0], stitched.mean(axis=0).mean(axis=0))


# -- layers="all": every layer's pooled row side by side ------------------------------------------------------


@pytest.mark.parametrize("pooling", ["mean", "mean+max"])
def test_all_layers_are_each_layers_row_side_by_side(fixture_dir, backend, pooling):
    """``layers="all"`` gives what a FeatureUnion of one vectorizer per layer gives: within each pooling block
    (mean, then max) layer 0's columns, then layer 1's, ...; the feature names say which is which."""
    est = ElmoVectorizer(model=str(fixture_dir), layers="all", pooling=pooling)
    rows = est.fit_transform(TEXTS)
    n_outputs, dim, parts = backend.n_layers + 1, backend.dim, pooling.split("+")
    assert rows.shape == (len(TEXTS), len(parts) * n_outputs * dim) and rows.dtype == np.float32
    per_layer = [
        ElmoVectorizer(model=str(fixture_dir), layers=k, pooling=pooling).transform(TEXTS) for k in range(n_outputs)
    ]
    expected = np.hstack(
        [per_layer[k][:, p * dim : (p + 1) * dim] for p in range(len(parts)) for k in range(n_outputs)]
    )
    np.testing.assert_allclose(rows, expected, rtol=1e-6, atol=1e-7)
    names = est.get_feature_names_out()
    assert len(names) == rows.shape[1] and len(set(names)) == len(names)
    prefix = "elmo" if len(parts) == 1 else "elmo_mean"
    assert names[0] == f"{prefix}_layer0_0" and names[dim] == f"{prefix}_layer1_0"
    assert est.layer_weights_ is None  # nothing mixed


def test_all_layers_in_a_pipeline_and_from_stored_doc_layers(fixture_dir, backend, blank_en):
    est = ElmoVectorizer(model=str(fixture_dir), layers="all")
    clf = make_pipeline(est, StandardScaler(), LogisticRegression(max_iter=200)).fit(TEXTS[:2] + TEXTS[3:], [0, 1, 1])
    assert clf.predict(["The bank ."]).shape == (1,)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": {"path": str(fixture_dir)}})
    docs = [nlp(text) for text in TEXTS[:2]]
    np.testing.assert_allclose(est.transform(docs), est.transform(TEXTS[:2]), rtol=1e-5, atol=1e-6)


def test_feature_names_read_the_options_only(fixture_dir, backend, monkeypatch):
    """``get_feature_names_out`` needs the width alone: the model's options file gives it, the weights stay unread."""
    import spacy_elmo.sklearn as elmo_sklearn

    def refuse(*args, **kwargs):
        raise AssertionError("get_feature_names_out loaded the model")

    monkeypatch.setattr(elmo_sklearn, "load_bilm", refuse)
    names = ElmoVectorizer(model=str(fixture_dir), layers="all", pooling="mean+max").get_feature_names_out()
    assert len(names) == 2 * (backend.n_layers + 1) * backend.dim


def test_transform_leaves_the_fitted_state_as_fit_set_it(fixture_dir):
    est = ElmoVectorizer(model=str(fixture_dir)).fit(TEXTS)
    fitted = dict(vars(est))
    est.transform(TEXTS)
    est.get_feature_names_out()
    assert vars(est) == fitted
    assert est.model_pin_.name == str(fixture_dir) and est.model_pin_.fingerprint == est.model_fingerprint_


# -- norm: each row scaled to unit norm after pooling, as TfidfVectorizer's rows


@pytest.mark.parametrize(("layers", "pooling"), [("average", "mean"), ("all", "mean+max")])
@pytest.mark.parametrize("norm", ["l2", "l1"])
def test_norm_scales_each_whole_row_as_sklearn_normalize(fixture_dir, layers, pooling, norm):
    from sklearn.preprocessing import normalize

    raw = ElmoVectorizer(model=str(fixture_dir), layers=layers, pooling=pooling).fit_transform(TEXTS)
    est = ElmoVectorizer(model=str(fixture_dir), layers=layers, pooling=pooling, norm=norm)
    rows = est.fit_transform(TEXTS)
    assert rows.dtype == np.float32 and rows.shape == raw.shape
    np.testing.assert_allclose(rows, normalize(raw.astype(np.float64), norm=norm), rtol=1e-5, atol=1e-7)
    # by hand: the whole row (with layers="all", every layer's block together) has unit norm, not each block
    wide = raw.astype(np.float64)
    lengths = np.sqrt((wide**2).sum(axis=1)) if norm == "l2" else np.abs(wide).sum(axis=1)
    empty = TEXTS.index("")
    assert lengths[empty] == 0.0 and not rows[empty].any()  # a text with no tokens stays a row of zeros
    kept = np.arange(len(TEXTS)) != empty
    np.testing.assert_allclose(rows[kept], (wide[kept] / lengths[kept, None]).astype(np.float32), rtol=1e-6)
    unit = np.sqrt((rows[kept].astype(np.float64) ** 2).sum(axis=1)) if norm == "l2" else np.abs(rows[kept]).sum(1)
    np.testing.assert_allclose(unit, 1.0, rtol=1e-6)
    if layers == "all":
        block = raw.shape[1] // 2 // 3  # one layer's "mean" block: not of unit norm on its own
        assert not np.allclose(np.linalg.norm(rows[kept, :block], axis=1), 1.0)
    np.testing.assert_allclose(est.transform(TEXTS), rows, rtol=1e-6)


def test_norm_none_is_the_default_and_gives_the_pooled_rows(fixture_dir):
    est = ElmoVectorizer(model=str(fixture_dir))
    assert est.norm is None and est.get_params()["norm"] is None
    np.testing.assert_array_equal(
        ElmoVectorizer(model=str(fixture_dir), norm=None).fit_transform(TEXTS), est.fit_transform(TEXTS)
    )


@pytest.mark.parametrize("norm", ["l3", "L2", "max", 2, ""])
def test_a_bad_norm_is_named_at_fit_and_transform(fixture_dir, norm):
    est = ElmoVectorizer(model=str(fixture_dir), norm=norm)
    for call in (est.fit, est.transform, est.fit_transform):
        with pytest.raises(ValueError, match=re.escape(f"norm={norm!r}: expected one of 'l2', 'l1' or None")):
            call(TEXTS)


def test_norm_through_clone_set_params_and_a_grid_search(fixture_dir):
    est = ElmoVectorizer(model=str(fixture_dir), norm="l2")
    assert clone(est).get_params()["norm"] == "l2"
    changed = clone(est).set_params(norm="l1")
    assert np.abs(changed.fit_transform(TEXTS[:2])).sum(axis=1) == pytest.approx([1.0, 1.0], rel=1e-5)
    texts, labels = ["good fun .", "bad day .", "great fun .", "sad day ."] * 2, [1, 0, 1, 0] * 2
    pipe = make_pipeline(ElmoVectorizer(model=str(fixture_dir)), LogisticRegression(max_iter=200))
    search = GridSearchCV(pipe, {"elmovectorizer__norm": [None, "l2"]}, cv=2).fit(texts, labels)
    assert search.best_params_["elmovectorizer__norm"] in (None, "l2")


def test_a_vectorizer_pickled_before_norm_existed_loads_and_gives_its_rows(fixture_dir):
    """A fitted vectorizer an earlier spacy-elmo pickled has no ``norm`` attribute: it loads with ``norm=None`` and
    gives the rows it gave then (its parameters and get_params too)."""
    est = ElmoVectorizer(model=str(fixture_dir), pooling="mean+max").fit(TEXTS)
    before = est.transform(TEXTS)
    older = pickle.loads(pickle.dumps(est))
    del older.__dict__["norm"]  # as an earlier version pickled it
    blob = pickle.dumps(older)
    assert b"norm" not in blob
    restored = pickle.loads(blob)
    assert restored.norm is None and restored.get_params() == est.get_params()
    np.testing.assert_array_equal(restored.transform(TEXTS), before)
    assert clone(restored).get_params()["norm"] is None


# -- precision=, and dtype= (its name up to 0.2.0, deprecated) ----------------------------------------------------

PICKLES = Path(__file__).resolve().parents[1] / "fixtures" / "sklearn_pickles"


def test_precision_is_the_parameter_and_dtype_its_deprecated_name(fixture_dir):
    """``precision=`` names the biLM's precision; ``dtype=`` (0.2.0's name; a vectorizer's dtype is its output's type
    in scikit-learn's words) still works, with a FutureWarning, and gives the same rows; the parameters after
    ``model`` are keyword-only, as scikit-learn's text vectorizers' are."""
    est = ElmoVectorizer(model=str(fixture_dir), precision="float32")
    rows = est.fit_transform(TEXTS)
    assert est.precision_ == "float32" and est.get_params()["precision"] == "float32"
    assert est.get_params()["dtype"] == "deprecated"
    old = ElmoVectorizer(model=str(fixture_dir), dtype="float32")
    with pytest.warns(FutureWarning, match=r"dtype= is deprecated .* use precision='float32'"):
        np.testing.assert_array_equal(old.fit_transform(TEXTS), rows)
    with pytest.warns(FutureWarning, match="dtype_ is deprecated"):
        assert old.dtype_ == "float32"
    assert clone(old).get_params() == old.get_params()  # clone keeps the parameter as given
    with pytest.raises(ValueError, match="disagree"), pytest.warns(FutureWarning):
        ElmoVectorizer(model=str(fixture_dir), precision="int8", dtype="float32").fit(TEXTS)
    with pytest.raises(TypeError):
        ElmoVectorizer(str(fixture_dir), "average")  # layers=... is keyword-only
    assert ElmoVectorizer(model=str(fixture_dir)).set_params(precision="auto").fit(TEXTS).precision_ == "float32"


def test_vectorizers_pickled_by_0_2_0_load_and_give_their_rows():
    """Vectorizers spacy-elmo 0.2.0 fitted and pickled (``dtype`` and ``dtype_`` in their state, no ``precision``;
    tests/fixtures/sklearn_pickles, made by that version) load with their ``dtype`` as ``precision`` and give the
    rows they gave then, with no warning."""
    import importlib.util

    if importlib.util.find_spec("numpy._core") is None:  # numpy's own limit: numpy 1 reads no numpy 2 pickle
        pytest.skip("these pickles were written under numpy 2 (numpy._core), which numpy 1 cannot read")
    pickled = pickle.loads((PICKLES / "vectorizers-0.2.0.pkl").read_bytes())
    rows = np.load(PICKLES / "vectorizers-0.2.0-rows.npz")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        for key, precision in (("plain", None), ("auto", "auto")):
            est = pickled[key]
            assert est.precision == precision and est.dtype == "deprecated" and est.precision_ == "float32"
            assert_recomputed_close(est.transform(pickled["texts"]), rows[key])
            assert clone(est).get_params() == est.get_params()
