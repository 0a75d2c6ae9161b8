"""Property-based tests (hypothesis) over the public entry points: any Unicode in, finite vectors of the right shape
out.

Tokens include lone surrogates, NUL, emoji, combining marks, whitespace and tokens far longer than
ELMo's 50 characters; each sentence must get the same vectors alone as inside a batch.
"""

import re

import numpy as np
import pytest
import spacy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spacy_elmo import ElmoVectorizer, load_bilm
from tests.numerics import assert_recomputed_close

ANY_CHAR = st.characters(exclude_categories=())  # every code point, lone surrogates included
SPECIAL = st.sampled_from(
    ["\x00", "a\x00b", "\ud800", "e\u0301", "\u0301", "👩‍👩‍👧", "\ufeff", " ", "\n", "<S>", "</S>", "ÿ" * 60]
)
TOKEN = st.one_of(
    st.text(ANY_CHAR, min_size=1, max_size=12),
    SPECIAL,
    st.text(ANY_CHAR, min_size=50, max_size=400),  # longer than max_characters_per_token
)
SENTENCE = st.lists(TOKEN, min_size=0, max_size=7)
TEXT = st.lists(st.one_of(st.text(ANY_CHAR, max_size=15), SPECIAL), max_size=8).map(" ".join)

PROPERTY_SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@pytest.fixture(scope="module")
def uncached(fixture_dir, tmp_path_factory):
    """A backend of its own without the memory cache, so every call computes (a copy of the fixture model)."""
    import shutil

    target = tmp_path_factory.mktemp("props") / "model"
    shutil.copytree(fixture_dir, target)
    return load_bilm(target, cache_mb=0)


def _check_layers(array: np.ndarray, n_tokens: int, backend) -> None:
    assert array.dtype == np.float32
    assert array.shape == (backend.n_layers + 1, n_tokens, backend.dim)
    assert np.isfinite(array).all()


@PROPERTY_SETTINGS
@given(sentences=st.lists(SENTENCE, min_size=1, max_size=4))
def test_embed_any_tokens_alone_equals_in_a_batch(uncached, sentences):
    batch = uncached.embed(sentences)
    assert len(batch) == len(sentences)
    for sentence, array in zip(sentences, batch):
        _check_layers(array, len(sentence), uncached)
        assert_recomputed_close(uncached.embed([sentence])[0], array)


@PROPERTY_SETTINGS
@given(text=TEXT)
def test_spacy_component_any_text(fixture_dir, backend, text):
    nlp = _nlp(fixture_dir)
    if _has_surrogate(text):  # spaCy's own tokenizer refuses them (README, Guarantees); token lists take them
        with pytest.raises(UnicodeEncodeError):
            nlp(text)
        return
    doc = nlp(text)
    _check_layers(doc._.elmo_layers, len(doc), backend)
    assert doc._.elmo.shape == (len(doc), backend.dim) and np.isfinite(doc._.elmo).all()
    assert doc.vector.shape == (backend.dim,) and np.isfinite(doc.vector).all()
    words = [t.text for t in doc if not t.is_space]
    if words:
        keep = [t.i for t in doc if not t.is_space]
        assert_recomputed_close(doc._.elmo_layers[:, keep], backend.embed([words])[0])


@PROPERTY_SETTINGS
@given(texts=st.lists(TEXT, min_size=1, max_size=4))
def test_vectorizer_any_texts_rows_alone_equal_rows_in_a_batch(fixture_dir, backend, texts):
    vectorizer = ElmoVectorizer(model=str(fixture_dir), pooling="mean+max")
    bad = [i for i, text in enumerate(texts) if _has_surrogate(text)]
    if bad:
        with pytest.raises(ValueError, match=f"text {bad[0]}: .* lone surrogate"):
            vectorizer.fit_transform(texts)
        return
    X = vectorizer.fit_transform(texts)
    assert X.shape == (len(texts), 2 * backend.dim) and X.dtype == np.float32 and np.isfinite(X).all()
    for text, row in zip(texts, X):
        assert_recomputed_close(vectorizer.transform([text])[0], row)


@PROPERTY_SETTINGS
@given(sentences=st.lists(SENTENCE, min_size=1, max_size=4))
def test_vectorizer_takes_any_token_lists(fixture_dir, backend, sentences):
    vectorizer = ElmoVectorizer(model=str(fixture_dir))
    words = re.compile(r"\S[ \t\n\r\f\v]+\S")  # ASCII whitespace inside a token
    texts = [i for i, s in enumerate(sentences) if len(s) == 1 and words.search(s[0])]
    if texts:  # one token of several words: a text in a one-item row, refused, named
        with pytest.raises(ValueError, match=rf"sample {texts[0]} is a token list of one token with several words"):
            vectorizer.fit_transform(sentences)
        return
    X = vectorizer.fit_transform(sentences)
    assert X.shape == (len(sentences), backend.dim) and np.isfinite(X).all()
    for sentence, row in zip(sentences, X):
        if not any(token.strip() for token in sentence):
            assert not row.any()  # nothing but whitespace: the documented zero row


def _has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


_NLP = {}


def _nlp(fixture_dir):
    if "nlp" not in _NLP:
        _NLP["nlp"] = spacy.blank("en")
        _NLP["nlp"].add_pipe("elmo", config={"model": str(fixture_dir)})
    return _NLP["nlp"]
