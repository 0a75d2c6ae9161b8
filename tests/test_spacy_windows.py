import pytest
import spacy
from spacy.tokens import Doc

from spacy_elmo.spacy.windows import doc_segments, window_bounds


@pytest.mark.parametrize("n,max_length,overlap", [(0, 4, 1), (3, 4, 1), (4, 4, 0), (10, 4, 2), (11, 4, 1), (57, 8, 3), (100, 7, 6)])
def test_windows_tile_the_sequence_once(n, max_length, overlap):
    bounds = window_bounds(n, max_length, overlap)
    kept = [i for _, _, ks, ke in bounds for i in range(ks, ke)]
    assert kept == list(range(n))
    for start, end, keep_start, keep_end in bounds:
        assert 0 <= start <= keep_start <= keep_end <= end <= n and end - start <= max_length
    for (s0, e0, _, _), (s1, e1, _, _) in zip(bounds, bounds[1:]):
        assert s1 < e0 and e0 - s1 >= overlap  # consecutive windows share at least `overlap` tokens


def test_overlap_is_split_in_the_middle():
    # windows [0,6) [4,10): the two shared tokens 4, 5 go one to each window
    assert window_bounds(10, 6, 2) == [(0, 6, 0, 5), (4, 10, 5, 10)]


@pytest.mark.parametrize("max_length,overlap", [(0, 0), (4, 4), (4, -1), (4.0, 1), (True, 0)])
def test_bad_window_config(max_length, overlap):
    with pytest.raises(ValueError, match="max_length|window_overlap"):
        window_bounds(10, max_length, overlap)


def test_segments_follow_sentences_and_skip_whitespace():
    nlp = spacy.blank("en")
    doc = Doc(nlp.vocab, words=["A", "b", "\n", "C", "d", "e", "f", "g"], sent_starts=[True, False, False, True, False, False, False, False])
    segments = doc_segments(doc, max_length=3, overlap=1)
    assert [s.positions for s in segments] == [(0, 1), (3, 4, 5), (5, 6, 7)]
    assert [(s.keep_start, s.keep_end) for s in segments] == [(0, 2), (0, 2), (0, 3)]  # token 5 sits at the edge of both windows: the later one wins
    whole = doc_segments(doc, max_length=10, overlap=1, use_sentences=False)
    assert [s.positions for s in whole] == [(0, 1, 3, 4, 5, 6, 7)]
    assert doc_segments(Doc(nlp.vocab, words=[]), 4, 1) == []
    assert doc_segments(nlp("   "), 4, 1) == []
