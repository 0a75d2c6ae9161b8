import pytest
import spacy
from spacy.tokens import Doc

from spacy_elmo.spacy.architectures import sentence_positions
from spacy_elmo.windows import window_bounds


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


def test_positions_follow_sentences_and_skip_whitespace():
    nlp = spacy.blank("en")
    doc = Doc(nlp.vocab, words=["A", "b", "\n", "C", "d", "e", "f", "g"], sent_starts=[True, False, False, True, False, False, False, False])
    assert sentence_positions(doc) == [[0, 1], [3, 4, 5, 6, 7]]
    # with max_length=3, overlap=1 the second sentence becomes two windows, positions (3, 4, 5) and (5, 6, 7)
    assert window_bounds(2, 3, 1) == [(0, 2, 0, 2)]
    assert window_bounds(5, 3, 1) == [(0, 3, 0, 2), (2, 5, 2, 5)]  # token 5 sits at the edge of both windows: the later one wins
    assert sentence_positions(doc, use_sentences=False) == [[0, 1, 3, 4, 5, 6, 7]]
    assert sentence_positions(Doc(nlp.vocab, words=[])) == []
    assert sentence_positions(nlp("   ")) == []
