"""Every front end reaches the biLM through ``windows.embed_segments``: windows of at most
``settings.DEFAULT_MAX_LENGTH`` tokens where it windows, and at most ``MAX_TOKENS_PER_CALL`` tokens per backend call."""

import numpy as np
import pytest

from spacy_elmo import hub
from spacy_elmo.runtime.configuration.defaults import DEFAULT_MAX_LENGTH, DEFAULT_OVERLAP
from spacy_elmo.runtime.embedding import windows
from spacy_elmo.similarity import word_similarity
from tests.numerics import assert_recomputed_close

WORDS = ["the", "bank", "approved", "a", "loan", "for", "river", "house", "near", "."]
LONG = windows.MAX_TOKENS_PER_CALL + 700  # one text too long for one backend call


def _words(n: int) -> list[str]:
    return [WORDS[(i * 7) % len(WORDS)] for i in range(n)]


@pytest.fixture
def embed_calls(backend, monkeypatch):
    """The token lengths of the sentences of each ``ElmoBackend.embed`` call, one list per call."""
    calls: list[list[int]] = []
    embed = type(backend).embed

    def spy(self, sentences, **kwargs):
        sentences = list(sentences)
        calls.append([len(s) for s in sentences])
        return embed(self, sentences, **kwargs)

    monkeypatch.setattr(type(backend), "embed", spy)
    return calls


def _bounded(calls: list[list[int]], longest: int) -> None:
    assert len(calls) > 1, calls  # the input did not fit one call
    assert max(sum(call) for call in calls) <= windows.MAX_TOKENS_PER_CALL
    assert max(max(call) for call in calls) <= longest


def test_hub_long_sentence_is_windowed_and_bounded_per_call(fixture_dir, backend, embed_calls):
    elmo = hub.load(str(fixture_dir))
    sentence = " ".join(_words(LONG))
    out = elmo.signatures["default"]([sentence, "the bank ."])
    _bounded(embed_calls, DEFAULT_MAX_LENGTH)
    embed_calls.clear()
    rows = elmo([sentence, "the bank ."], as_dict=False)
    _bounded(embed_calls, DEFAULT_MAX_LENGTH)
    np.testing.assert_array_equal(rows, out["default"])
    ((_, stitched),) = windows.embed_segments(
        backend, [(0, sentence.split())], max_length=DEFAULT_MAX_LENGTH, overlap=DEFAULT_OVERLAP
    )
    assert_recomputed_close(out["lstm_outputs2"][0], stitched[2])
    # a sentence shorter than a window is embedded whole, as before
    assert_recomputed_close(out["lstm_outputs1"][1, :3], backend.embed([["the", "bank", "."]])[0][1])


def test_similarity_long_sentence_is_windowed_and_bounded_per_call(backend, embed_calls):
    long = " ".join([*_words(LONG - 3), "bank", "of", "money"])
    result = word_similarity(backend, "the bank of the river .", long, "bank")
    _bounded(embed_calls, DEFAULT_MAX_LENGTH)
    assert result.positions[0] == 1 and result.token_matrix.shape == (6, LONG)
    assert result.layers[0][1] == pytest.approx(1.0, abs=1e-5)  # layer 0 sees the word alone


def test_dask_file_task_is_bounded_per_call_and_equals_whole_lines(fixture_dir, backend, embed_calls):
    pytest.importorskip("distributed")
    from spacy_elmo.output.cluster import _sentence_chunk

    lines = [_words(300 + i % 7) for i in range(60)]  # ~18000 tokens: one 250-line task of long lines
    got = _sentence_chunk(lines, str(fixture_dir), None, None, 64, backend.fingerprint)
    _bounded(embed_calls, max(map(len, lines)))  # lines are embedded whole, as embed_file does in one process
    for line, layers in zip(lines[:3], got):
        assert layers.shape == (backend.n_layers + 1, len(line), backend.dim)
        assert_recomputed_close(layers, backend.embed([line])[0])
