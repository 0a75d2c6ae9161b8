"""spacy_elmo.compat.elmoformanylangs.Embedder: the package's API and numbers (one batch, fresh Embedder), stateless.

Reference outputs: ``tests/fixtures/elmoformanylangs/make_reference.py`` (the elmoformanylangs package itself).
"""

import numpy as np
import pytest

from spacy_elmo.compat.elmoformanylangs import Embedder
from tests.bilm.test_manylangs import FIXTURES, KINDS, TOLERANCE, reference, relative_errors, sentences


def peer_output(kind, key):
    with np.load(FIXTURES / kind / "reference.npz", allow_pickle=False) as data:
        return [data[f"{key}{i}"] for i in range(len(sentences()))]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("output_layer, key", [(-2, "s"), (-1, "average"), (1, "layer1")])
def test_sents2elmo_equals_the_package(kind, output_layer, key):
    embedder = Embedder(str(FIXTURES / kind))
    got = embedder.sents2elmo(sentences(), output_layer=output_layer)
    expected = peer_output(kind, key)
    assert isinstance(got, list) and all(g.dtype == np.float32 for g in got)
    assert [g.shape for g in got] == [e.shape for e in expected]
    if output_layer != -2:
        got, expected = [g[None] for g in got], [e[None] for e in expected]
    errors = relative_errors(got, expected)
    print(kind, f"output_layer={output_layer}: max error / layer scale", [f"{e:.1e}" for e in errors])
    assert max(errors) <= TOLERANCE


def test_every_output_layer_and_small_batches():
    """0..2 pick one layer; batches of 2 give what one batch gives (no state carried, input order kept)."""
    expected = reference("word_char")
    embedder = Embedder(str(FIXTURES / "word_char"), batch_size=2)
    embedder.backend.clear_cache()
    for layer in range(3):
        got = embedder.sents2elmo(sentences(), output_layer=layer)
        assert max(relative_errors([g[None] for g in got], [e[layer][None] for e in expected])) <= TOLERANCE
    first = embedder.sents2elmo(sentences()[::-1])[::-1]
    again = embedder.sents2elmo(sentences())
    for a, b in zip(first, again):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


def test_the_readme_example_runs_with_only_the_import_changed():
    e = Embedder(str(FIXTURES / "word_char"))
    sents = [["今", "天", "天氣", "真", "好", "阿"], ["潮水", "退", "了", "就", "知道", "誰", "沒", "穿", "褲子"]]
    vectors = e.sents2elmo(sents)
    assert [v.shape for v in vectors] == [(6, 32), (9, 32)]


@pytest.mark.parametrize("bad", [3, -3, 1.0, True])
def test_a_bad_output_layer_is_named(bad):
    with pytest.raises(ValueError, match=r"output_layer=.*expected -1 \(average\), -2 \(all layers\) or 0\.\.2"):
        Embedder(str(FIXTURES / "char_only")).sents2elmo([["x"]], output_layer=bad)
