"""The one reader of layers stored on a Doc (spacy.extensions.stored_layers) and its one policy:
stale layers (retokenized doc, another model) are recomputed by readers that hold a model and raise
StaleLayersError in readers that do not."""

import numpy as np
import pytest
import spacy

from spacy_elmo import ElmoVectorizer
from spacy_elmo.spacy.extensions import StaleLayersError, fresh_layers, stored_layers
from tests.numerics import assert_recomputed_close
from tests.spacy.test_spacy_mix_layer import examples_for, mix_of, textcat_nlp


@pytest.fixture(scope="module")
def nlp(fixture_dir):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(fixture_dir)})
    return nlp


def _retokenized(doc):
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:2])
    return doc


def test_fitting_layers_are_read_with_or_without_a_fingerprint(nlp, backend):
    doc = nlp("The bank is open .")
    shape = (backend.n_layers + 1, backend.dim)
    layers = stored_layers(doc, backend.fingerprint, shape)
    assert layers is not None and layers.dtype == np.float32 and layers.shape == (3, len(doc), backend.dim)
    np.testing.assert_array_equal(stored_layers(doc), layers)
    np.testing.assert_array_equal(fresh_layers(doc, backend.fingerprint, shape), layers)
    assert (
        stored_layers(nlp.make_doc("no layers")) is None
        and fresh_layers(nlp.make_doc("no"), backend.fingerprint) is None
    )


def test_stale_layers_raise_naming_why_and_fresh_layers_gives_none(nlp, backend):
    retokenized = _retokenized(nlp("The bank is open ."))
    with pytest.raises(StaleLayersError, match="retokenized after the 'elmo' component"):
        stored_layers(retokenized)
    other = nlp("The bank is open .")
    other._.elmo_model = "another-model"
    stored_layers(other)  # without a fingerprint to check, the layers fit the doc
    with pytest.raises(StaleLayersError, match="another-model"):
        stored_layers(other, backend.fingerprint)
    unvouched = nlp("The bank is open .")
    unvouched._.elmo_model = None
    with pytest.raises(StaleLayersError, match="fingerprint None"):
        stored_layers(unvouched, backend.fingerprint)
    with pytest.raises(StaleLayersError, match="layers of width 64"):
        stored_layers(nlp("The bank ."), shape=(3, 64))
    assert all(fresh_layers(doc, backend.fingerprint) is None for doc in (retokenized, other, unvouched))
    assert issubclass(StaleLayersError, ValueError)


def test_readers_without_a_model_raise_readers_with_one_recompute(fixture_dir, nlp, backend):
    retokenized = _retokenized(nlp("The bank is open ."))
    with pytest.raises(StaleLayersError):
        retokenized._.elmo  # the getters hold no model
    with pytest.raises(StaleLayersError):
        retokenized.vector  # nor do the hooks
    tokens = [t.text for t in retokenized]
    want = ElmoVectorizer(model=str(fixture_dir)).transform([tokens])
    assert_recomputed_close(ElmoVectorizer(model=str(fixture_dir)).transform([retokenized]), want)
    # an ElmoScalarMix linked to a component recomputes the doc from its current tokens
    pipeline = textcat_nlp(fixture_dir, dropout=0.0)
    pipeline.initialize(lambda: examples_for(pipeline))
    stale = _retokenized(pipeline("The bank is open ."))
    fresh = pipeline.get_pipe("elmo")(pipeline.make_doc("The bank is open ."))
    fresh = _retokenized(fresh)
    fresh._.elmo_layers = None
    (got,), _ = mix_of(pipeline)([stale], is_train=False)
    (recomputed,), _ = mix_of(pipeline)([fresh], is_train=False)
    assert got.shape == (len(stale), backend.dim)
    assert_recomputed_close(got, recomputed)
